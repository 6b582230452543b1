//! keel macros.
