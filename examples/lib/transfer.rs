//! A file-transfer style service for streamed transfer: upload and download of any size with
//! bounded memory.

use keel::ByteStream;

/// Streams bytes in and out.
#[keel::contract]
pub trait Transfer {
    /// Reads the whole upload and returns how many bytes arrived.
    async fn upload(&self, data: ByteStream) -> u64;
    /// Sends `n` bytes (all `0xAB`), produced as the receiver makes room.
    async fn download(&self, n: u64) -> ByteStream;
}

/// The implementation: counts what it receives, generates what it sends. Holds no data.
#[derive(Debug, Default, Clone, Copy)]
pub struct TransferImpl;

/// Size of the chunks [`TransferImpl`] produces.
pub const CHUNK: usize = 64 * 1024;

impl Transfer for TransferImpl {
    async fn upload(&self, mut data: ByteStream) -> u64 {
        let mut n = 0;
        while let Some(Ok(chunk)) = data.next().await {
            n += chunk.len() as u64;
        }
        n
    }

    async fn download(&self, n: u64) -> ByteStream {
        zeros(n)
    }
}

/// `n` bytes of `0xAB` in chunks of [`CHUNK`], produced lazily (one shared buffer, no copies).
pub fn zeros(n: u64) -> ByteStream {
    let chunk = bytes_of(CHUNK);
    let chunks = n.div_ceil(CHUNK as u64);
    ByteStream::from_iter((0..chunks).map(move |i| {
        let len = (n - i * CHUNK as u64).min(CHUNK as u64) as usize;
        chunk.slice(..len)
    }))
}

fn bytes_of(n: usize) -> keel::Bytes {
    keel::Bytes::from(vec![0xAB; n])
}

/// A host serving [`Transfer`] on `url`.
pub fn host(url: &str) -> Result<keel::Host, keel::Error> {
    builder(url).start()
}

/// The builder of [`host`], to add settings before it starts.
pub fn builder(url: &str) -> keel::host::HostBuilder {
    keel::Host::builder()
        .service(TransferServer::new(TransferImpl))
        .endpoint(url)
}
