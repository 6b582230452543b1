//! keel.
