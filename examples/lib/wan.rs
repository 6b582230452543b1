//! Seed 004's test service: a short string echoed, and a large upload (buffered or streamed)
//! answered with its length. keel-lab's `wan` experiment calls it through a latency proxy.

use keel::ByteStream;

/// The seed's large payload was a 277 KB JPEG; keel-lab sends this many incompressible bytes.
pub const LARGE_BYTES: usize = 277 * 1024;

/// The seed's small payload.
pub const SMALL: &str = "hi mom";

/// Seed 004's contract, in both transfer modes.
#[keel::contract]
pub trait Wan {
    /// Echoes `s` (buffered both ways). Idempotent: a resumed `quic://` connection may carry
    /// it as 0-RTT data.
    #[keel(idempotent)]
    async fn echo(&self, s: String) -> String;
    /// [`Wan::echo`], not marked idempotent: it waits for a resumed `quic://` connection's
    /// handshake (keel-lab measures both).
    async fn echo_once(&self, s: String) -> String;
    /// Echoes a streamed upload back as a streamed reply.
    async fn echo_stream(&self, data: ByteStream) -> ByteStream;
    /// The length of a buffered upload. Idempotent, as `echo`.
    #[keel(idempotent)]
    async fn upload(&self, data: Vec<u8>) -> u64;
    /// The length of a streamed upload, read to its end.
    async fn upload_stream(&self, data: ByteStream) -> u64;
}

/// The implementation: holds nothing.
#[derive(Debug, Default, Clone, Copy)]
pub struct WanImpl;

impl Wan for WanImpl {
    async fn echo(&self, s: String) -> String {
        s
    }

    async fn echo_once(&self, s: String) -> String {
        s
    }

    async fn echo_stream(&self, data: ByteStream) -> ByteStream {
        data
    }

    async fn upload(&self, data: Vec<u8>) -> u64 {
        data.len() as u64
    }

    async fn upload_stream(&self, mut data: ByteStream) -> u64 {
        let mut n = 0;
        while let Some(Ok(chunk)) = data.next().await {
            n += chunk.len() as u64;
        }
        n
    }
}
