//! keel-pool (skeleton).
