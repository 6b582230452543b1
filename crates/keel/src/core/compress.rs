//! Message body compression: zstd for keel's own peers, gzip for HTTP clients such as curl.
//!
//! - [`Compression`]: the content codings keel speaks, by HTTP token and by wire id;
//! - [`compress`]: a whole body, in one call;
//! - [`decompress`]: a whole body, **bounded**: it never holds more than `limit` bytes of output,
//!   whatever the input claims;
//! - [`pick_from_accept_encoding`]: which coding a reply to an HTTP client may use.
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

/// A q-value in thousandths (RFC 9110 §12.4.2: `0`, `0.5`, `0.125`, `1`, `1.000`), or `None` if
/// `s` is not one.
#[cfg_attr(not(feature = "http"), allow(dead_code))] // HTTP's Accept-Encoding
fn parse_qvalue(s: &str) -> Option<u16> {
    let (int, frac) = match s.split_once('.') {
        Some((int, frac)) => (int, frac),
        None => (s, ""),
    };
    if frac.len() > 3 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let mut thousandths: u16 = 0;
    for (i, b) in frac.bytes().enumerate() {
        thousandths += u16::from(b - b'0') * [100, 10, 1][i];
    }
    match int {
        "0" => Some(thousandths),
        "1" if thousandths == 0 => Some(1000),
        _ => None,
    }
}

/// The q-value of one `Accept-Encoding` element's parameters (1 if it has none), or `None` if its
/// `q` is not a valid q-value (the element is then ignored). Other parameters, and empty ones
/// (`gzip;`), are ignored.
#[cfg_attr(not(feature = "http"), allow(dead_code))] // HTTP's Accept-Encoding
fn element_q<'a>(params: impl Iterator<Item = &'a str>) -> Option<u16> {
    let mut q = 1000;
    for param in params {
        let (name, value) = param.split_once('=').unwrap_or((param, ""));
        if name.trim().eq_ignore_ascii_case("q") {
            q = parse_qvalue(value.trim())?;
        }
    }
    Some(q)
}

/// The coding to compress a reply with, among `allowed`, for a client that sent `header` as its
/// `Accept-Encoding`; `None` means reply uncompressed.
///
/// - Each coding's weight is its q-value (RFC 9110 §12.5.3; 1 when none is given); `q=0` means
///   not acceptable. A coding not named takes the weight of `*` if there is one, and is not
///   acceptable otherwise. When a coding is listed twice, the first listing counts.
/// - The heaviest acceptable coding wins. At equal weight a coding the client named beats one
///   matched only by `*`; between two named codings zstd beats gzip (faster, smaller); between
///   two matched only by `*`, gzip beats zstd (a client that names neither is likelier to decode
///   gzip, which every HTTP client does).
/// - `identity` (no compression) is always acceptable to keel, so `identity;q=0` changes nothing.
///   A client that names `identity` with a greater weight than the winner prefers its reply
///   uncompressed: `None`.
/// - Unknown codings (`br`, `deflate`, …), elements with an invalid q-value, and empty elements
///   are ignored; so a header of garbage gives `None`.
#[cfg_attr(not(feature = "http"), allow(dead_code))] // HTTP's Accept-Encoding
pub(crate) fn pick_from_accept_encoding(
    header: &str,
    allowed: &[Compression],
) -> Option<Compression> {
    let mut named: [Option<u16>; Compression::ALL.len()] = [None; Compression::ALL.len()];
    let mut star = None;
    let mut identity = None;
    for element in header.split(',') {
        let mut parts = element.split(';');
        let coding = parts.next().unwrap_or_default().trim();
        if coding.is_empty() {
            continue;
        }
        let Some(q) = element_q(parts) else {
            continue;
        };
        let slot = if coding == "*" {
            &mut star
        } else if coding.eq_ignore_ascii_case("identity") {
            &mut identity
        } else if let Some(c) = Compression::from_token(coding) {
            &mut named[index(c)]
        } else {
            continue;
        };
        slot.get_or_insert(q);
    }

    // (weight, named by the client, preference): the greatest wins.
    let rank = |c: Compression| -> Option<(u16, bool, u8)> {
        let (q, is_named) = match named[index(c)] {
            Some(q) => (q, true),
            None => (star?, false),
        };
        let preference = match (c, is_named) {
            (Compression::Zstd, true) | (Compression::Gzip, false) => 1,
            (Compression::Gzip, true) | (Compression::Zstd, false) => 0,
        };
        (q > 0).then_some((q, is_named, preference))
    };
    let (best_rank, best) = allowed
        .iter()
        .filter_map(|&c| rank(c).map(|r| (r, c)))
        .max_by_key(|&(r, _)| r)?;
    match identity {
        Some(q) if q > best_rank.0 => None,
        _ => Some(best),
    }
}

/// `c`'s index in [`Compression::ALL`].
#[cfg_attr(not(feature = "http"), allow(dead_code))] // HTTP's Accept-Encoding
fn index(c: Compression) -> usize {
    match c {
        Compression::Zstd => 0,
        Compression::Gzip => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    use Compression::{Gzip, Zstd};

    const MIB: usize = 1024 * 1024;

    /// `n` bytes from a fixed xorshift sequence: incompressible.
    fn random_bytes(n: usize, seed: u64) -> Vec<u8> {
        let mut x = seed | 1;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 24) as u8
            })
            .collect()
    }

    /// JSON records like an RPC body's, about `n` bytes.
    fn json_body(n: usize) -> Vec<u8> {
        let mut out = String::from("[");
        let mut i = 0u64;
        while out.len() < n.saturating_sub(1) {
            if i > 0 {
                out.push(',');
            }
            out.push_str(&format!(
                r#"{{"id":{},"name":"user-{}","email":"user{}@example.com","active":{},"score":{}.{}}}"#,
                1000 + i * 7,
                i,
                i * 31 % 977,
                i % 3 == 0,
                i * 13 % 100,
                i % 10
            ));
            i += 1;
        }
        out.truncate(n.saturating_sub(1));
        out.push(']');
        out.into_bytes()
    }

    /// English-like text of about `n` bytes: words drawn from a small vocabulary.
    fn text_body(n: usize) -> Vec<u8> {
        const WORDS: &[&str] = &[
            "the",
            "call",
            "host",
            "keel",
            "latency",
            "stays",
            "flat",
            "under",
            "load",
            "and",
            "every",
            "reply",
            "is",
            "bounded",
            "by",
            "its",
            "budget",
            "when",
            "a",
            "burst",
            "arrives",
            "worker",
            "pool",
            "grows",
            "connection",
            "stream",
            "of",
            "bytes",
            "frame",
        ];
        let picks = random_bytes(n, 7);
        let mut out = Vec::with_capacity(n + 16);
        let mut i = 0;
        while out.len() < n {
            out.extend_from_slice(WORDS[usize::from(picks[i]) % WORDS.len()].as_bytes());
            out.push(if picks[i] % 11 == 0 { b'\n' } else { b' ' });
            i += 1;
        }
        out.truncate(n);
        out
    }

    fn samples() -> Vec<(&'static str, Vec<u8>)> {
        vec![
            ("empty", Vec::new()),
            ("one byte", b"a".to_vec()),
            ("1 KiB JSON", json_body(1024)),
            ("64 KiB text", text_body(64 * 1024)),
            ("277 KiB random", random_bytes(277 * 1024, 42)),
            ("1 MiB zeros", vec![0; MIB]),
        ]
    }

    fn malformed(r: Result<Bytes, DecompressError>) -> bool {
        matches!(r, Err(DecompressError::Malformed(_)))
    }

    /// A zstd frame without a content size: magic, frame header descriptor 0 (no size, no
    /// checksum, no dictionary), a window of `2^window_log`, then `blocks`.
    fn zstd_frame_unsized(window_log: u32, blocks: &[u8]) -> Vec<u8> {
        let mut f = vec![0x28, 0xB5, 0x2F, 0xFD, 0x00, ((window_log - 10) << 3) as u8];
        f.extend_from_slice(blocks);
        f
    }

    /// A zstd frame that declares `size` bytes of content (an 8-byte field) with a window of
    /// `2^window_log`, then `blocks` (whatever they really hold).
    fn zstd_frame_declaring(size: u64, window_log: u32, blocks: &[u8]) -> Vec<u8> {
        let mut f = vec![0x28, 0xB5, 0x2F, 0xFD, 0xC0, ((window_log - 10) << 3) as u8];
        f.extend_from_slice(&size.to_le_bytes());
        f.extend_from_slice(blocks);
        f
    }

    /// `count` RLE blocks of `size` bytes of `byte` each (the last one marked last): `4 × count`
    /// bytes of frame for `count × size` bytes of output.
    fn rle_blocks(count: usize, size: u32, byte: u8) -> Vec<u8> {
        let mut out = Vec::new();
        for i in 0..count {
            let last = u32::from(i + 1 == count);
            let header = (size << 3) | (1 << 1) | last;
            out.extend_from_slice(&header.to_le_bytes()[..3]);
            out.push(byte);
        }
        out
    }

    /// One raw block holding `data`, the last of its frame.
    fn raw_block(data: &[u8]) -> Vec<u8> {
        let header = ((data.len() as u32) << 3) | 1;
        let mut out = header.to_le_bytes()[..3].to_vec();
        out.extend_from_slice(data);
        out
    }

    #[test]
    fn round_trips() {
        for c in Compression::ALL {
            for (name, data) in samples() {
                let packed = compress(c, &data);
                let back = decompress(c, &packed, data.len());
                assert_eq!(back.as_deref(), Ok(&data[..]), "{c} {name}");
            }
        }
    }

    /// What `printf 'hello from the zstd tool\n' | zstd -c -3` writes (zstd 1.5.4): no size, a
    /// 2 MiB window, a checksum.
    const ZSTD_TOOL: &[u8] = &[
        0x28, 0xb5, 0x2f, 0xfd, 0x04, 0x58, 0xc9, 0x00, 0x00, 0x68, 0x65, 0x6c, 0x6c, 0x6f, 0x20,
        0x66, 0x72, 0x6f, 0x6d, 0x20, 0x74, 0x68, 0x65, 0x20, 0x7a, 0x73, 0x74, 0x64, 0x20, 0x74,
        0x6f, 0x6f, 0x6c, 0x0a, 0xc5, 0xe6, 0x33, 0x8e,
    ];

    /// What `(printf 'hello ' | gzip -c -n; printf 'again\n' | gzip -c -n)` writes: two members.
    const GZIP_TOOL: &[u8] = &[
        0x1f, 0x8b, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x03, 0xcb, 0x48, 0xcd, 0xc9, 0xc9,
        0x57, 0x00, 0x00, 0xf6, 0xf9, 0x81, 0xed, 0x06, 0x00, 0x00, 0x00, 0x1f, 0x8b, 0x08, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x03, 0x4b, 0x4c, 0x4f, 0xcc, 0xcc, 0xe3, 0x02, 0x00, 0xff,
        0x19, 0x4f, 0x86, 0x06, 0x00, 0x00, 0x00,
    ];

    #[test]
    fn decodes_what_the_zstd_and_gzip_tools_write() {
        let hello = b"hello from the zstd tool\n";
        assert_eq!(
            decompress(Zstd, ZSTD_TOOL, hello.len()).as_deref(),
            Ok(&hello[..])
        );
        assert_eq!(
            decompress(Zstd, ZSTD_TOOL, hello.len() - 1),
            Err(DecompressError::TooLarge { limit: 24 })
        );
        let mut bad = ZSTD_TOOL.to_vec();
        *bad.last_mut().unwrap() ^= 1;
        assert!(
            malformed(decompress(Zstd, &bad, 100)),
            "the checksum is checked"
        );
        assert_eq!(
            decompress(Gzip, GZIP_TOOL, 100).as_deref(),
            Ok(&b"hello again\n"[..])
        );
        assert_eq!(
            decompress(Gzip, GZIP_TOOL, 11),
            Err(DecompressError::TooLarge { limit: 11 })
        );
    }

    #[test]
    fn the_limit_is_exact() {
        for c in Compression::ALL {
            for (name, data) in samples() {
                let packed = compress(c, &data);
                assert_eq!(
                    decompress(c, &packed, data.len()).map(|b| b.len()),
                    Ok(data.len())
                );
                if let Some(limit) = data.len().checked_sub(1) {
                    assert_eq!(
                        decompress(c, &packed, limit),
                        Err(DecompressError::TooLarge { limit }),
                        "{c} {name}"
                    );
                }
            }
        }
    }

    #[test]
    fn compressed_empty_input_is_a_stream_that_decodes_to_nothing() {
        for c in Compression::ALL {
            let packed = compress(c, b"");
            assert!(!packed.is_empty(), "{c}");
            assert_eq!(decompress(c, &packed, 0).as_deref(), Ok(&b""[..]), "{c}");
        }
    }

    #[test]
    fn an_empty_body_is_malformed() {
        for c in Compression::ALL {
            assert!(malformed(decompress(c, b"", 1024)), "{c}");
        }
    }

    #[test]
    fn incompressible_input_grows_by_little_and_compressible_input_shrinks() {
        let random = random_bytes(277 * 1024, 3);
        let text = text_body(64 * 1024);
        for c in Compression::ALL {
            let packed = compress(c, &random);
            assert!(
                packed.len() <= random.len() + random.len() / 100 + 64,
                "{c}: {}",
                packed.len()
            );
            assert_eq!(
                decompress(c, &packed, random.len()).as_deref(),
                Ok(&random[..])
            );
            let packed = compress(c, &text);
            assert!(packed.len() < text.len() / 2, "{c}: {}", packed.len());
        }
    }

    #[test]
    fn output_is_exactly_sized_for_honest_bodies() {
        // The declared size (zstd's content size, gzip's ISIZE) stops the buffer's growth.
        for c in Compression::ALL {
            // Text is decoded in one call; zeros (over 32:1) a piece at a time.
            for (n, zeros) in [
                (1, false),
                (1000, false),
                (20_000, false),
                (300_000, false),
                (300_000, true),
            ] {
                let data = if zeros { vec![0; n] } else { text_body(n) };
                let back = decompress(c, &compress(c, &data), 4 * MIB).unwrap();
                let vec = Vec::from(back);
                assert_eq!((vec.len(), vec.capacity()), (n, n), "{c} {n}");
            }
        }
    }

    #[test]
    fn truncated_streams_are_malformed() {
        for c in Compression::ALL {
            let data = json_body(1024);
            let packed = compress(c, &data);
            for cut in 0..packed.len() {
                let r = decompress(c, &packed[..cut], 4096);
                assert!(
                    malformed(r.clone()),
                    "{c} cut at {cut} of {}: {r:?}",
                    packed.len()
                );
            }
        }
    }

    #[test]
    fn corrupted_streams_never_decode_to_something_else() {
        for c in Compression::ALL {
            let data = json_body(1024);
            let packed = compress(c, &data);
            let mut refused = 0;
            for i in 0..packed.len() {
                for flip in [0x01, 0x80, 0xFF] {
                    let mut bad = packed.to_vec();
                    bad[i] ^= flip;
                    match decompress(c, &bad, 4096) {
                        Ok(out) => assert_eq!(out, data, "{c}: byte {i} ^ {flip:#x}"),
                        Err(DecompressError::Malformed(_)) => refused += 1,
                        // Corrupting a size field can make it claim more than the limit.
                        Err(DecompressError::TooLarge { limit }) => {
                            assert_eq!(limit, 4096);
                            refused += 1;
                        }
                    }
                }
            }
            // A few bits change nothing (gzip's MTIME, XFL and OS header bytes, which no check
            // covers; padding and unused bits in either's bitstreams): those decode unchanged.
            let flips = packed.len() * 3;
            assert!(
                refused >= flips * 95 / 100,
                "{c}: {refused} of {flips} refused"
            );
        }
    }

    #[test]
    fn trailing_bytes_are_malformed() {
        for c in Compression::ALL {
            let packed = compress(c, b"hello, world");
            for tail in [&b"\0"[..], b"garbage", &[0; 8], &packed[..4]] {
                let mut bad = packed.to_vec();
                bad.extend_from_slice(tail);
                let r = decompress(c, &bad, 1024);
                assert!(malformed(r.clone()), "{c} + {tail:?}: {r:?}");
            }
        }
    }

    #[test]
    fn concatenated_frames_and_members_decode_one_after_the_other() {
        for c in Compression::ALL {
            let (a, b) = (text_body(5000), json_body(3000));
            let mut both = compress(c, &a).to_vec();
            both.extend_from_slice(&compress(c, &b));
            let expected = [&a[..], &b[..]].concat();
            assert_eq!(
                decompress(c, &both, 8000).as_deref(),
                Ok(&expected[..]),
                "{c}"
            );
            // The limit holds across them (zstd refuses the second frame on its declared size).
            assert_eq!(
                decompress(c, &both, 7999),
                Err(DecompressError::TooLarge { limit: 7999 })
            );
            assert_eq!(
                decompress(c, &both, 5000),
                Err(DecompressError::TooLarge { limit: 5000 })
            );
        }
    }

    #[test]
    fn zstd_skippable_frames_are_skipped() {
        let mut data = vec![0x50, 0x2A, 0x4D, 0x18, 5, 0, 0, 0, 1, 2, 3, 4, 5];
        data.extend_from_slice(&compress(Zstd, b"after"));
        data.extend_from_slice(&[0x5F, 0x2A, 0x4D, 0x18, 0, 0, 0, 0]);
        assert_eq!(decompress(Zstd, &data, 5).as_deref(), Ok(&b"after"[..]));
        assert_eq!(
            decompress(Zstd, &data, 4),
            Err(DecompressError::TooLarge { limit: 4 })
        );
    }

    #[test]
    fn zstd_frame_declaring_more_than_the_limit_is_refused_up_front() {
        // It holds 5 bytes; declared 6 is over a limit of 5, so it is refused before decoding.
        let frame = zstd_frame_declaring(6, 10, &raw_block(b"hello"));
        assert_eq!(
            decompress(Zstd, &frame, 5),
            Err(DecompressError::TooLarge { limit: 5 })
        );
        // A declared 2^62 bytes with a 1 TiB limit: refused, nothing allocated for it.
        let frame = zstd_frame_declaring(1 << 62, 20, &raw_block(b"hello"));
        assert_eq!(
            decompress(Zstd, &frame, 1 << 40),
            Err(DecompressError::TooLarge { limit: 1 << 40 })
        );
    }

    #[test]
    fn zstd_frame_declaring_more_than_it_holds_is_malformed() {
        // 100 bytes declared in a 22-byte frame: decoded in one call into 100 bytes. 1 TiB
        // declared (a limit that large accepts it): decoded a piece at a time, the buffer
        // growing only as output comes. Either way the frame ends short of its size.
        for declared in [100, 1 << 40] {
            let frame = zstd_frame_declaring(declared, 20, &raw_block(b"hello"));
            assert!(malformed(decompress(Zstd, &frame, 1 << 41)), "{declared}");
        }
    }

    #[test]
    fn zstd_frame_declaring_less_than_it_holds_is_refused() {
        // 64 × 128 KiB = 8 MiB of zeros in a 270-byte frame. Declaring 1000 bytes, it is decoded
        // in one call into 1000 bytes; declaring 100,000 (more than 32 times 270), a piece at a
        // time. Either way the cap holds and the lie is found.
        for declared in [1000, 100_000] {
            let frame = zstd_frame_declaring(declared, 20, &rle_blocks(64, 128 * 1024, 0));
            for limit in [declared as usize, 4 * MIB, 16 * MIB] {
                let r = decompress(Zstd, &frame, limit);
                assert!(r.is_err(), "{declared} {limit}: {:?}", r.map(|b| b.len()));
            }
        }
    }

    #[test]
    fn zstd_frame_without_a_size_is_capped_while_decoding() {
        // 8 MiB of zeros in 256 bytes, no declared size.
        let frame = zstd_frame_unsized(20, &rle_blocks(64, 128 * 1024, 0));
        assert_eq!(
            decompress(Zstd, &frame, 4 * MIB),
            Err(DecompressError::TooLarge { limit: 4 * MIB })
        );
        assert_eq!(
            decompress(Zstd, &frame, 8 * MIB).map(|b| b.len()),
            Ok(8 * MIB)
        );
    }

    #[test]
    fn zstd_window_is_capped_by_the_limit() {
        assert_eq!(window_log_max(0), WINDOW_LOG_FLOOR);
        assert_eq!(window_log_max(1), WINDOW_LOG_FLOOR);
        assert_eq!(window_log_max(2 * MIB), 21);
        assert_eq!(window_log_max(4 * MIB), 22);
        assert_eq!(window_log_max(4 * MIB + 1), 23);
        assert_eq!(window_log_max(usize::MAX), WINDOW_LOG_CEILING);
        // A 1-byte frame asking for a 128 MiB window: over a 4 MiB limit's 4 MiB cap.
        let frame = zstd_frame_unsized(27, &raw_block(b"x"));
        assert_eq!(
            decompress(Zstd, &frame, 4 * MIB),
            Err(DecompressError::TooLarge { limit: 4 * MIB })
        );
        assert_eq!(
            decompress(Zstd, &frame, 128 * MIB).as_deref(),
            Ok(&b"x"[..])
        );
        // 2 MiB windows (zstd's default level on a pipe) decode under any limit.
        let frame = zstd_frame_unsized(21, &raw_block(b"x"));
        assert_eq!(decompress(Zstd, &frame, 1).as_deref(), Ok(&b"x"[..]));
        // Past zstd's own default cap, whatever the limit.
        let frame = zstd_frame_unsized(28, &raw_block(b"x"));
        assert_eq!(
            decompress(Zstd, &frame, 1 << 40),
            Err(DecompressError::TooLarge { limit: 1 << 40 })
        );
    }

    #[test]
    fn gzip_trailer_that_lies_about_the_size_is_malformed() {
        let data = text_body(100_000);
        let packed = compress(Gzip, &data);
        for isize in [0u32, 10, 99_999, 100_001, u32::MAX] {
            let mut bad = packed.to_vec();
            let at = bad.len() - 4;
            bad[at..].copy_from_slice(&isize.to_le_bytes());
            assert!(malformed(decompress(Gzip, &bad, MIB)), "ISIZE {isize}");
            // Declaring exactly the limit does not let more through.
            if let Ok(limit) = usize::try_from(isize) {
                if limit < data.len() {
                    let r = decompress(Gzip, &bad, limit);
                    assert_eq!(r, Err(DecompressError::TooLarge { limit }), "ISIZE {isize}");
                }
            }
        }
    }

    #[test]
    fn growth_never_passes_the_limit_and_stops_at_the_declared_size() {
        assert_eq!(next_capacity(0, 100, None), 100);
        assert_eq!(next_capacity(0, MIB, None), MIN_CAPACITY);
        assert_eq!(next_capacity(0, MIB, Some(10)), 10);
        assert_eq!(next_capacity(10, MIB, Some(10)), MIN_CAPACITY);
        assert_eq!(next_capacity(MIN_CAPACITY, MIB, Some(20_000)), 20_000);
        assert_eq!(
            next_capacity(MIN_CAPACITY, MIB, Some(2 * MIB)),
            2 * MIN_CAPACITY
        );
        assert_eq!(next_capacity(MIB / 2 + 1, MIB, None), MIB);
        assert_eq!(next_capacity(MIB - 1, MIB, None), MIB);
        assert_eq!(next_capacity(usize::MAX - 1, usize::MAX, None), usize::MAX);
    }

    #[test]
    fn tokens_and_wire_ids() {
        assert_eq!((Zstd.as_str(), Gzip.as_str()), ("zstd", "gzip"));
        assert_eq!(Zstd.to_string(), "zstd");
        for (token, c) in [
            ("zstd", Some(Zstd)),
            (" ZStd\t", Some(Zstd)),
            ("gzip", Some(Gzip)),
            ("GZIP ", Some(Gzip)),
            ("x-gzip", Some(Gzip)),
            ("identity", None),
            ("br", None),
            ("deflate", None),
            ("*", None),
            ("", None),
            ("gzip;q=1", None),
        ] {
            assert_eq!(Compression::from_token(token), c, "{token:?}");
        }
        for c in Compression::ALL {
            assert_eq!(Compression::from_token(c.as_str()), Some(c));
            assert_eq!(Compression::from_u8(c.to_u8()), Some(c));
            assert_ne!(c.to_u8(), Compression::IDENTITY_ID);
        }
        assert_eq!((Zstd.to_u8(), Gzip.to_u8()), (1, 2));
        assert_eq!(Compression::from_u8(Compression::IDENTITY_ID), None);
        assert_eq!(Compression::from_u8(3), None);
        assert_eq!(Compression::from_u8(255), None);
    }

    #[test]
    fn accept_encoding() {
        let both = &Compression::ALL[..];
        for (header, allowed, picked) in [
            ("gzip, deflate, br", both, Some(Gzip)),
            ("gzip, deflate, br", &[Zstd][..], None),
            ("gzip, deflate, br, zstd", both, Some(Zstd)),
            ("gzip, zstd", &[Gzip][..], Some(Gzip)),
            ("zstd;q=0.5, gzip;q=0.8", both, Some(Gzip)),
            ("zstd;q=0.5, gzip;q=0.8", &[Zstd][..], Some(Zstd)),
            ("zstd;q=0.8, gzip;q=0.5", both, Some(Zstd)),
            ("gzip, zstd", both, Some(Zstd)),
            ("GZIP;Q=0.5, ZSTD;q=0.4", both, Some(Gzip)),
            ("gzip;q=0", both, None),
            ("gzip;q=0.000", both, None),
            ("gzip;q=0.001", both, Some(Gzip)),
            ("gzip;q=0, zstd;q=0", both, None),
            ("gzip;q=0, gzip", both, None),
            ("gzip, gzip;q=0", both, Some(Gzip)),
            ("*", both, Some(Gzip)),
            ("*", &[Zstd][..], Some(Zstd)),
            ("*;q=0", both, None),
            ("gzip;q=0, *", both, Some(Zstd)),
            ("zstd;q=0.5, *", both, Some(Gzip)),
            ("gzip;q=0.5, *;q=0.5", both, Some(Gzip)),
            ("*, zstd;q=0", &[Zstd][..], None),
            ("x-gzip", both, Some(Gzip)),
            ("identity", both, None),
            ("identity;q=0", both, None),
            ("gzip, identity;q=0", both, Some(Gzip)),
            ("gzip;q=0.5, identity", both, None),
            ("gzip;q=0.5, identity;q=0.5", both, Some(Gzip)),
            ("identity;q=0.4, *;q=0.5", both, Some(Gzip)),
            ("gzip;", both, Some(Gzip)),
            ("gzip ; q=0.5 ; level=9", both, Some(Gzip)),
            ("gzip;foo", both, Some(Gzip)),
            ("gzip;q=1.0, zstd;q=1.000", both, Some(Zstd)),
            ("gzip;q=0.5, zstd;q=0.50", both, Some(Zstd)),
            ("gzip", &[][..], None),
            // Garbage: ignored, element by element.
            ("", both, None),
            (",,, ;;; ,", both, None),
            ("gzip;q=abc", both, None),
            ("gzip;q=1.5", both, None),
            ("gzip;q=1.001", both, None),
            ("gzip;q=0.1234", both, None),
            ("gzip;q=-0", both, None),
            ("gzip;q=", both, None),
            ("gzip;q", both, None),
            ("gzip;q=.5", both, None),
            ("gzip;q=abc, zstd;q=0.1", both, Some(Zstd)),
            ("q=1", both, None),
            ("gzip zstd", both, None),
            ("\u{0}gzip\u{7f}", both, None),
            ("gzïp, ☃", both, None),
        ] {
            assert_eq!(
                pick_from_accept_encoding(header, allowed),
                picked,
                "{header:?} {allowed:?}"
            );
        }
    }

    proptest::proptest! {
        #[test]
        fn accept_encoding_never_panics_and_picks_an_allowed_coding(
            header in "[a-zA-Z*;=,. 0-9q-]{0,40}",
            only_gzip: bool,
        ) {
            let allowed: &[Compression] = if only_gzip { &[Gzip] } else { &Compression::ALL };
            if let Some(c) = pick_from_accept_encoding(&header, allowed) {
                proptest::prop_assert!(allowed.contains(&c));
            }
        }

        #[test]
        fn garbage_never_panics_and_never_passes_the_limit(
            data in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..512),
            gzip: bool,
            limit in 0usize..100_000,
        ) {
            let c = if gzip { Gzip } else { Zstd };
            match decompress(c, &data, limit) {
                Ok(out) => proptest::prop_assert!(out.len() <= limit),
                Err(DecompressError::TooLarge { limit: l }) => proptest::prop_assert_eq!(l, limit),
                Err(DecompressError::Malformed(_)) => {}
            }
        }

        #[test]
        fn mutated_streams_never_panic_and_never_pass_the_limit(
            seed: u64,
            edits in proptest::collection::vec((proptest::prelude::any::<usize>(), proptest::prelude::any::<u8>()), 1..8),
            gzip: bool,
            limit in 0usize..20_000,
        ) {
            let c = if gzip { Gzip } else { Zstd };
            let data = text_body(10_000 + (seed % 1000) as usize);
            let mut packed = compress(c, &data).to_vec();
            for (at, byte) in edits {
                let at = at % packed.len();
                packed[at] = byte;
            }
            match decompress(c, &packed, limit) {
                Ok(out) => proptest::prop_assert!(out.len() <= limit),
                Err(DecompressError::TooLarge { limit: l }) => proptest::prop_assert_eq!(l, limit),
                Err(DecompressError::Malformed(_)) => {}
            }
        }
    }

    /// Runs `f` repeatedly for about `budget`, returning the time per run.
    fn time_per_run(budget: Duration, mut f: impl FnMut()) -> Duration {
        f();
        let start = Instant::now();
        let mut runs = 0u32;
        while start.elapsed() < budget {
            f();
            runs += 1;
        }
        start.elapsed() / runs
    }

    /// Compression and decompression speed and ratio of each codec and level on three bodies.
    /// Not a test: `cargo test -p keel --release --lib benchmark_codecs -- --ignored --nocapture`.
    #[test]
    #[ignore = "a measurement, run by hand in release"]
    fn benchmark_codecs() {
        let bodies = [
            ("1 KiB JSON", json_body(1024)),
            ("64 KiB text", text_body(64 * 1024)),
            ("64 KiB JSON", json_body(64 * 1024)),
            ("277 KiB random", random_bytes(277 * 1024, 9)),
        ];
        type Compressor = Box<dyn Fn(&[u8]) -> Bytes>;
        let codecs: Vec<(&str, Compression, Compressor)> = vec![
            ("zstd -1", Zstd, Box::new(|d| zstd_compress(d, 1))),
            ("zstd -3", Zstd, Box::new(|d| zstd_compress(d, 3))),
            ("gzip -1", Gzip, Box::new(|d| gzip_compress(d, 1))),
            ("gzip -6", Gzip, Box::new(|d| gzip_compress(d, 6))),
        ];
        let budget = Duration::from_millis(300);
        println!(
            "| body | codec | compressed | ratio | compress | decompress | compress MB/s | decompress MB/s |"
        );
        println!("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |");
        for (body, data) in &bodies {
            for (name, c, f) in &codecs {
                let packed = f(data);
                assert_eq!(
                    decompress(*c, &packed, data.len()).as_deref(),
                    Ok(&data[..])
                );
                let t_c = time_per_run(budget, || {
                    std::hint::black_box(f(std::hint::black_box(data)));
                });
                let t_d = time_per_run(budget, || {
                    std::hint::black_box(
                        decompress(*c, std::hint::black_box(&packed), data.len()).ok(),
                    );
                });
                let mbps = |t: Duration| data.len() as f64 / t.as_secs_f64() / 1e6;
                println!(
                    "| {body} | {name} | {} | {:.2} | {:.1} µs | {:.1} µs | {:.0} | {:.0} |",
                    packed.len(),
                    data.len() as f64 / packed.len() as f64,
                    t_c.as_secs_f64() * 1e6,
                    t_d.as_secs_f64() * 1e6,
                    mbps(t_c),
                    mbps(t_d),
                );
            }
        }
    }
}
