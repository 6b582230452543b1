//! The runtime behind blocking clients lives with keel's other runtime pieces, in
//! `runtime/client.rs`; this re-export keeps `client::block_on` where the client's code finds it.

pub(crate) use crate::runtime::client::block_on;
