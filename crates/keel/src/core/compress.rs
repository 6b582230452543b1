//! Message body compression: zstd for keel's own peers, gzip for HTTP clients such as curl.
//!
//! - [`Compression`]: the content codings keel speaks, by HTTP token and by wire id;
//! - [`compress`]: a whole body, in one call;
//! - [`decompress`]: a whole body, **bounded**: it never holds more than `limit` bytes of output,
//!   whatever the input claims.
//!
//! (Which coding a reply to an HTTP client may use is the HTTP binding's: its
//! `accept_encoding` module.)
//!
//! # What decompression costs, at most
//!
//! A few bytes of zstd or gzip can stand for gigabytes (a zip bomb: 1 GiB of zeros is 1 MiB of
//! gzip and 32 KiB of zstd). [`decompress`] is given the largest body the caller accepts, and
//! answers [`DecompressError::TooLarge`] as soon as the output passes it:
//!
//! - The output buffer never holds more than `limit` bytes. When it is full at the limit, the
//!   decoder is given a 1-byte probe: any byte there makes the body too large.
//! - A zstd frame that declares more than `limit` is refused before anything is allocated.
//! - A declared size within the limit (zstd's frame content size, gzip's trailing `ISIZE`) is
//!   allocated up front only if it is at most 32 times the input's size
//!   ([`DECLARED_SIZE_RATIO`]): an honest body then lands in a buffer of exactly its size (zstd
//!   decodes such a frame in one call, straight into it, with no window). Otherwise the buffer
//!   starts at 16 KiB and doubles as output comes, stopping at the declared size if there is one:
//!   a lie costs no more than the output it really produces, or 32 bytes per byte received.
//! - zstd decoding a piece at a time keeps a window of recent output, sized by the frame's
//!   header. Its size is capped at `limit` rounded up to a power of two (so any frame whose window
//!   is no larger than its content, which is every frame a compressor writes when it knows the
//!   size, decodes under its content's limit), but never below 2 MiB (`2^21`: what zstd's default
//!   level uses when it does not know the size, e.g. `zstd` reading a pipe) nor above 128 MiB
//!   (`2^27`, zstd's own default cap). A frame asking for a larger window is `TooLarge`. keel
//!   builds zstd with its `with-rust-allocator` feature, so the window and zstd's contexts are
//!   allocated through Rust's global allocator and counted like the rest.
//! - gzip keeps a fixed 32 KiB window and ~10 KiB of tables (miniz_oxide).
//!
//! So a call holds at most `limit` bytes of output (1.5 times that for a moment, while the
//! buffer doubles), plus, for zstd, a window of at most `limit` rounded up to a power of two or
//! 2 MiB, plus about 300 KiB of codec state. `tests/zip_bomb.rs` measures the peak with a
//! counting global allocator: a 1 GiB bomb decoded under a 4 MiB limit peaks at 8.5 MiB (zstd)
//! and 6 MiB (gzip), a zstd frame lying about its size at 10.2 MiB at most, an honest 4 MiB body
//! at 4.1 MiB.
//!
//! # Which inputs are accepted
//!
//! - zstd: one or more concatenated frames (skippable frames included), which decode to their
//!   contents one after the other, as the `zstd` tool does; each frame's declared size is
//!   checked against what is left of the limit before it is decoded. Checksums are verified when
//!   present (keel writes them). Legacy (pre-1.0) frames and dictionaries are not supported.
//! - gzip: one or more members (RFC 1952 allows a series; `gzip -d` concatenates them), each
//!   checked against its CRC-32 and length.
//! - Anything after the last complete frame or member that is not another one (trailing
//!   garbage, padding), a truncated stream, or a corrupted one is
//!   [`DecompressError::Malformed`]. Empty input is malformed too: compressing nothing still
//!   gives a frame (or member), which decodes to nothing.

use std::cell::Cell;
use std::fmt;
use std::io::{self, Read};
use std::thread::LocalKey;

use bytes::Bytes;
use flate2::bufread::MultiGzDecoder;
use flate2::{Compress, Crc, FlushCompress, Status};
use zstd::zstd_safe::{
    self, zstd_sys::ZSTD_ErrorCode, CCtx, CParameter, DCtx, DParameter, InBuffer, OutBuffer,
};

/// A content coding for message bodies: how a body is compressed on the wire.
///
/// Its HTTP name ([`as_str`](Compression::as_str)) is the `Content-Encoding` /
/// `Accept-Encoding` token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Compression {
    /// Zstandard (RFC 8878): fast, and compresses well. keel's choice between its own peers.
    Zstd,
    /// gzip (RFC 1952): slower and larger than zstd, but every HTTP client decodes it (curl's
    /// `--compressed`, browsers, every HTTP library).
    Gzip,
}

/// zstd's compression level. Level 1, zstd's fastest regular level, against its default 3
/// (`benchmark_codecs` in the tests, release build, this project's 2-core machine): the same on
/// a 1 KiB body (4.8 µs, 4:1); on 64 KiB of JSON 10% faster (89 µs against 99) at the same ratio
/// (10:1); on 64 KiB of text the same speed or faster and 9% larger (3.9:1 against 4.25:1). Its
/// context is also half the size (570 KiB against 1.3 MiB per thread).
const ZSTD_LEVEL: i32 = 1;

/// gzip's compression level (0–9). Level 1, deflate's fastest (greedy matching), against zlib's
/// default 6 (same measurement): 11.5 µs against 15.7 on a 1 KiB body for 4% more bytes; on
/// 64 KiB of JSON 8 times faster (115 µs against 898) for 12% more; on 64 KiB of text 16 times
/// faster. gzip is for HTTP clients without zstd: speed matters more than the last few percent.
const GZIP_LEVEL: u32 = 1;

/// A size the input declares (zstd's frame content size, gzip's `ISIZE`), when within the limit,
/// is allocated up front if it is at most this many times the input's size: an honest body then
/// decodes into a buffer of exactly its size (for zstd, in one call, with no window: several
/// times faster on small bodies). Past it (a body of zeros, or a lie), the buffer grows only as
/// output comes. So a declared size is never trusted for more than 32 bytes of allocation per
/// byte received.
const DECLARED_SIZE_RATIO: usize = 32;

/// The output buffer's first size, unless the input declares a smaller body.
const MIN_CAPACITY: usize = 16 * 1024;

/// zstd's window is never capped below `2^21` bytes (2 MiB): what zstd's default level uses when
/// it does not know the input's size, so `zstd` reading a pipe decodes under any limit.
const WINDOW_LOG_FLOOR: u32 = 21;

/// zstd's window is never allowed above `2^27` bytes (128 MiB): zstd's own default cap
/// (`ZSTD_WINDOWLOG_LIMIT_DEFAULT`).
const WINDOW_LOG_CEILING: u32 = 27;

impl Compression {
    /// The codings keel speaks, in its order of preference.
    #[cfg_attr(not(feature = "http"), allow(dead_code))] // HTTP's Accept-Encoding
    pub(crate) const ALL: [Compression; 2] = [Compression::Zstd, Compression::Gzip];

    /// The wire id that means "not compressed". [`from_u8`](Self::from_u8) gives `None` for it.
    pub(crate) const IDENTITY_ID: u8 = 0;

    /// The HTTP content-coding token: `"zstd"` or `"gzip"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Compression::Zstd => "zstd",
            Compression::Gzip => "gzip",
        }
    }

    /// The coding an HTTP content-coding token names, ignoring ASCII case and surrounding
    /// whitespace: `"zstd"`, `"gzip"`, and `"x-gzip"` (which RFC 9110 asks recipients to treat
    /// as `gzip`). `None` for any other token, `"identity"` included.
    pub fn from_token(token: &str) -> Option<Self> {
        let token = token.trim();
        if token.eq_ignore_ascii_case("zstd") {
            Some(Compression::Zstd)
        } else if token.eq_ignore_ascii_case("gzip") || token.eq_ignore_ascii_case("x-gzip") {
            Some(Compression::Gzip)
        } else {
            None
        }
    }

    /// The coding's id in keel's own wire protocol: zstd is 1, gzip 2 (0 is
    /// [`IDENTITY_ID`](Self::IDENTITY_ID), no compression).
    pub(crate) fn to_u8(self) -> u8 {
        match self {
            Compression::Zstd => 1,
            Compression::Gzip => 2,
        }
    }

    /// The coding with wire id `id`; `None` for [`IDENTITY_ID`](Self::IDENTITY_ID) and for ids
    /// keel does not know ([`from_wire_id`](Self::from_wire_id) tells those two apart).
    pub(crate) fn from_u8(id: u8) -> Option<Self> {
        match id {
            1 => Some(Compression::Zstd),
            2 => Some(Compression::Gzip),
            _ => None,
        }
    }

    /// What a frame's compression id says: `Ok(None)` for [`IDENTITY_ID`](Self::IDENTITY_ID)
    /// (not compressed), `Err(id)` for an id keel does not know.
    pub(crate) fn from_wire_id(id: u8) -> Result<Option<Self>, u8> {
        match id {
            Self::IDENTITY_ID => Ok(None),
            id => Self::from_u8(id).map(Some).ok_or(id),
        }
    }
}

impl fmt::Display for Compression {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why decompressing a body failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecompressError {
    /// The body decompresses to more than `limit` bytes (or is a zstd frame that declares so, or
    /// asks for a decoding window larger than `limit` allows: see the module docs). Answered
    /// `TooLarge`, as an uncompressed body over the limit is.
    TooLarge {
        /// The limit it passed, in bytes of decompressed output.
        limit: usize,
    },
    /// The body is not a valid stream of its coding: truncated, corrupted, or followed by bytes
    /// that are not another frame or member. The message says what the decoder found.
    Malformed(String),
}

impl fmt::Display for DecompressError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecompressError::TooLarge { limit } => {
                write!(f, "the body decompresses to more than {limit} bytes")
            }
            DecompressError::Malformed(why) => write!(f, "malformed compressed body: {why}"),
        }
    }
}

impl std::error::Error for DecompressError {}

/// `data` compressed with `c`, as one complete zstd frame (with its content size and a checksum)
/// or one gzip member.
pub(crate) fn compress(c: Compression, data: &[u8]) -> Bytes {
    match c {
        Compression::Zstd => zstd_compress(data, ZSTD_LEVEL),
        Compression::Gzip => gzip_compress(data, GZIP_LEVEL),
    }
}

/// `data` decompressed with `c`, or [`TooLarge`](DecompressError::TooLarge) as soon as the
/// output passes `limit` bytes. Never panics on any input; holds at most `limit` bytes of output,
/// plus the codec's state (see the module docs for the whole bound).
pub(crate) fn decompress(
    c: Compression,
    data: &[u8],
    limit: usize,
) -> Result<Bytes, DecompressError> {
    match c {
        Compression::Zstd => zstd_decompress(data, limit),
        Compression::Gzip => gzip_decompress(data, limit),
    }
}

thread_local! {
    /// Each thread's zstd compression context, reused: creating one costs more than compressing
    /// a 1 KiB body (about 17 µs against 5). It holds up to ~570 KiB at level 1 (zstd shrinks it
    /// again once it has been that much too large for 128 calls).
    static ZSTD_CCTX: Cell<Option<CCtx<'static>>> = const { Cell::new(None) };
    /// Each thread's zstd decompression context for one-shot decoding (94 KiB; one-shot decoding
    /// writes straight into the output, so it never holds a window).
    static ZSTD_DCTX: Cell<Option<DCtx<'static>>> = const { Cell::new(None) };
    /// Each thread's deflate context for gzip, and the level it was made for (~300 KiB).
    static GZIP_DEFLATE: Cell<Option<(u32, Compress)>> = const { Cell::new(None) };
}

/// Runs `f` with the context in `slot`, or a new one if the slot is empty (first use, or a
/// thread being torn down), then puts it back.
fn with_context<C, T>(
    slot: &'static LocalKey<Cell<Option<C>>>,
    create: fn() -> C,
    f: impl FnOnce(&mut C) -> T,
) -> T {
    let mut context = slot
        .try_with(Cell::take)
        .ok()
        .flatten()
        .unwrap_or_else(create);
    let out = f(&mut context);
    let _ = slot.try_with(|cell| cell.set(Some(context)));
    out
}

fn zstd_compress(data: &[u8], level: i32) -> Bytes {
    let mut out = Vec::with_capacity(zstd_safe::compress_bound(data.len()));
    let written = with_context(&ZSTD_CCTX, CCtx::create, |cctx| {
        // Neither can fail: both values are in range. They are set on every call, since the
        // context is shared; `compress2` starts a new frame, keeping them.
        let _ = cctx.set_parameter(CParameter::CompressionLevel(level));
        let _ = cctx.set_parameter(CParameter::ChecksumFlag(true));
        cctx.compress2(&mut out, data)
    });
    if let Err(code) = written {
        // Only an input past zstd's maximum (about 2^63 bytes) could fail: no body is that big.
        panic!(
            "zstd compression failed: {}",
            zstd_safe::get_error_name(code)
        );
    }
    out.shrink_to_fit();
    Bytes::from(out)
}

fn gzip_compress(data: &[u8], level: u32) -> Bytes {
    // A gzip member (RFC 1952): a 10-byte header, raw deflate, and the CRC-32 and size of the
    // data. Written by hand around a reused deflate context, which flate2's `GzEncoder` cannot
    // take: a new one costs more than compressing a 1 KiB body (its ~300 KiB of tables are
    // allocated and zeroed each time).
    let xfl = match level {
        0 | 1 => 4, // the fastest algorithm
        9.. => 2,   // maximum compression
        _ => 0,
    };
    // No name, no modification time (0), operating system unknown (255), as flate2 writes.
    let header = [0x1f, 0x8b, 8, 0, 0, 0, 0, 0, xfl, 255];
    // Deflate's worst case is the input in stored blocks of 5 more bytes per 64 KiB.
    let mut out = Vec::with_capacity(header.len() + data.len() + data.len() / 1024 + 64);
    out.extend_from_slice(&header);
    let mut deflate = match GZIP_DEFLATE.try_with(Cell::take).ok().flatten() {
        Some((used_level, mut deflate)) if used_level == level => {
            deflate.reset();
            deflate
        }
        _ => Compress::new(flate2::Compression::new(level), false),
    };
    loop {
        let consumed = usize::try_from(deflate.total_in()).unwrap_or(data.len());
        match deflate.compress_vec(&data[consumed..], &mut out, FlushCompress::Finish) {
            Ok(Status::StreamEnd) => break,
            // Out of room (which the capacity above should prevent): more, and go on.
            Ok(Status::Ok | Status::BufError) => out.reserve(out.capacity() / 2 + 64),
            // Compressing into memory does not fail.
            Err(e) => panic!("deflate failed: {e}"),
        }
    }
    let _ = GZIP_DEFLATE.try_with(|cell| cell.set(Some((level, deflate))));
    let mut crc = Crc::new();
    crc.update(data);
    out.extend_from_slice(&crc.sum().to_le_bytes());
    // ISIZE: the size modulo 2^32.
    out.extend_from_slice(&(data.len() as u32).to_le_bytes());
    out.shrink_to_fit();
    Bytes::from(out)
}

/// The capacity to grow a full output buffer of `len` bytes to: double, at least
/// [`MIN_CAPACITY`], no more than the `expected` size while the output is below it, and never more
/// than `limit`. The caller has checked `len < limit`, so the result is at least `len + 1`. (A
/// buffer full at the limit is not grown: one more byte of output, decoded into a 1-byte probe,
/// makes the body too large.)
fn next_capacity(len: usize, limit: usize, expected: Option<usize>) -> usize {
    let mut cap = len.saturating_mul(2).max(MIN_CAPACITY);
    if let Some(expected) = expected {
        if expected > len {
            cap = cap.min(expected);
        }
    }
    let cap = cap.min(limit);
    debug_assert!(cap > len);
    cap
}

/// The window-log cap for a limit: `log2(limit)` rounded up, within
/// [`WINDOW_LOG_FLOOR`]..=[`WINDOW_LOG_CEILING`].
fn window_log_max(limit: usize) -> u32 {
    let ceil_log2 = usize::BITS - limit.saturating_sub(1).leading_zeros();
    ceil_log2.clamp(WINDOW_LOG_FLOOR, WINDOW_LOG_CEILING)
}

/// The content size a zstd frame header at the start of `data` declares (`None` when the frame
/// leaves it out), or `Malformed` when `data` does not start with a frame header.
fn zstd_declared_size(data: &[u8], what: &str) -> Result<Option<u64>, DecompressError> {
    zstd_safe::get_frame_content_size(data)
        .map_err(|_| DecompressError::Malformed(format!("zstd: {what}")))
}

fn zstd_error(code: usize, limit: usize) -> DecompressError {
    if zstd_safe::is_error_kind(
        code,
        ZSTD_ErrorCode::ZSTD_error_frameParameter_windowTooLarge,
    ) {
        DecompressError::TooLarge { limit }
    } else {
        DecompressError::Malformed(format!("zstd: {}", zstd_safe::get_error_name(code)))
    }
}

fn zstd_decompress(data: &[u8], limit: usize) -> Result<Bytes, DecompressError> {
    // Refuse a frame that declares more than the limit before allocating anything.
    let declared = match zstd_declared_size(data, "not a zstd frame, or its header is cut short")? {
        Some(n) if n > limit as u64 => return Err(DecompressError::TooLarge { limit }),
        // At most `limit`, so it fits.
        Some(n) => Some(n as usize),
        None => None,
    };
    match declared {
        Some(size)
            if size <= data.len().saturating_mul(DECLARED_SIZE_RATIO)
                && zstd_safe::find_frame_compressed_size(data) == Ok(data.len()) =>
        {
            zstd_decompress_one_shot(data, size, limit)
        }
        _ => zstd_decompress_streaming(data, limit, declared),
    }
}

/// Decodes the single frame `data`, which declares `size` bytes, straight into a buffer of that
/// size, with this thread's context.
fn zstd_decompress_one_shot(
    data: &[u8],
    size: usize,
    limit: usize,
) -> Result<Bytes, DecompressError> {
    let mut out = Vec::with_capacity(size);
    let decoded = with_context(&ZSTD_DCTX, DCtx::create, |dctx| {
        dctx.decompress(&mut out, data)
    });
    match decoded {
        // zstd checks that the frame held exactly the size it declared.
        Ok(_) => Ok(Bytes::from(out)),
        Err(code)
            if zstd_safe::is_error_kind(code, ZSTD_ErrorCode::ZSTD_error_dstSize_tooSmall) =>
        {
            Err(DecompressError::Malformed(
                "zstd: the frame holds more than the size it declares".to_owned(),
            ))
        }
        Err(code) => Err(zstd_error(code, limit)),
    }
}

/// Decodes `data` (one or more frames, the first declaring `declared` bytes if it says) a piece
/// at a time, into a buffer that grows as output comes, with a context of its own (its window
/// is not kept).
fn zstd_decompress_streaming(
    data: &[u8],
    limit: usize,
    declared: Option<usize>,
) -> Result<Bytes, DecompressError> {
    let too_large = || DecompressError::TooLarge { limit };
    let mut expected = declared;
    let mut dctx = DCtx::create();
    dctx.set_parameter(DParameter::WindowLogMax(window_log_max(limit)))
        .map_err(|code| zstd_error(code, limit))?;
    let mut out: Vec<u8> = Vec::new();
    let mut input = InBuffer::around(data);
    loop {
        if out.len() == out.capacity() && out.len() < limit {
            let cap = next_capacity(out.len(), limit, expected);
            out.reserve_exact(cap - out.len());
        }
        let (left, full) = if out.len() < out.capacity() {
            let pos = out.len();
            // Decodes into `out`'s spare capacity, and sets its length to what was decoded.
            let mut output = OutBuffer::around_pos(&mut out, pos);
            let left = dctx
                .decompress_stream(&mut output, &mut input)
                .map_err(|code| zstd_error(code, limit))?;
            (left, output.pos() == output.capacity())
        } else {
            // Full at the limit: one byte more is too many.
            let mut probe = [0; 1];
            let mut output = OutBuffer::around(&mut probe[..]);
            let left = dctx
                .decompress_stream(&mut output, &mut input)
                .map_err(|code| zstd_error(code, limit))?;
            if output.pos() > 0 {
                return Err(too_large());
            }
            (left, false)
        };
        if out.len() > limit {
            return Err(too_large());
        }
        if left == 0 {
            // A frame ended, and all it decoded is in `out`.
            let rest = &data[input.pos()..];
            if rest.is_empty() {
                break;
            }
            // Another frame follows: concatenated frames decode one after the other.
            let more = zstd_declared_size(rest, "trailing bytes after the last frame")?;
            expected = match more {
                Some(n) if n > (limit - out.len()) as u64 => return Err(too_large()),
                Some(n) => Some(out.len() + n as usize),
                None => None,
            };
        } else if input.pos() == data.len() && !full {
            // zstd wants more input and has flushed all it could: there is none.
            return Err(DecompressError::Malformed(
                "zstd: the frame is cut short".to_owned(),
            ));
        }
    }
    Ok(Bytes::from(out))
}

/// The size a gzip stream's last member declares in its trailer (`ISIZE`, the size modulo 2^32),
/// if `data` is long enough to have one. Only used to stop the buffer growing past it.
fn gzip_declared_size(data: &[u8]) -> Option<usize> {
    // A member is at least a 10-byte header, 2 bytes of deflate, and an 8-byte trailer.
    let tail = data.len().checked_sub(4).filter(|_| data.len() >= 20)?;
    let bytes: [u8; 4] = data[tail..].try_into().ok()?;
    usize::try_from(u32::from_le_bytes(bytes)).ok()
}

fn gzip_decompress(data: &[u8], limit: usize) -> Result<Bytes, DecompressError> {
    if data.is_empty() {
        return Err(DecompressError::Malformed("gzip: empty body".to_owned()));
    }
    let expected = gzip_declared_size(data).filter(|&n| n <= limit);
    let mut decoder = MultiGzDecoder::new(data);
    // `buf` is zero-filled up to its capacity (once, when it grows); `filled` bytes of it are
    // output. Never more than `limit` bytes.
    let mut buf: Vec<u8> = match expected {
        Some(n) if n <= data.len().saturating_mul(DECLARED_SIZE_RATIO) => vec![0; n],
        _ => Vec::new(),
    };
    let mut filled = 0;
    loop {
        let n = if filled < buf.len() {
            gzip_read(&mut decoder, &mut buf[filled..])?
        } else if filled == limit || (filled > 0 && expected == Some(filled)) {
            // Full at the limit, or at the size the trailer declares: look for the end with a
            // 1-byte read before growing (an honest body then ends up exactly sized).
            let mut probe = [0; 1];
            let n = gzip_read(&mut decoder, &mut probe)?;
            if n == 1 {
                if filled == limit {
                    return Err(DecompressError::TooLarge { limit });
                }
                grow_zeroed(&mut buf, limit, expected);
                buf[filled] = probe[0];
            }
            n
        } else {
            grow_zeroed(&mut buf, limit, expected);
            gzip_read(&mut decoder, &mut buf[filled..])?
        };
        if n == 0 {
            break;
        }
        filled += n;
        debug_assert!(filled <= limit);
    }
    buf.truncate(filled);
    Ok(Bytes::from(buf))
}

/// Grows the full, zero-filled `buf` to [`next_capacity`], zero-filled (each byte is zeroed once).
fn grow_zeroed(buf: &mut Vec<u8>, limit: usize, expected: Option<usize>) {
    let cap = next_capacity(buf.len(), limit, expected);
    buf.reserve_exact(cap - buf.len());
    buf.resize(cap, 0);
}

/// Reads some output from `decoder`, retrying when interrupted; 0 is the end of the stream.
fn gzip_read(
    decoder: &mut MultiGzDecoder<&[u8]>,
    buf: &mut [u8],
) -> Result<usize, DecompressError> {
    loop {
        match decoder.read(buf) {
            Ok(n) => return Ok(n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(DecompressError::Malformed(format!("gzip: {e}"))),
        }
    }
}

#[cfg(test)]
mod tests;
