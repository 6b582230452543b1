//! The bytes the attacks and the probe send, built by hand from `crates/keel-wire/PROTOCOL.md`
//! (keel-wire) and RFC 9112 (HTTP/1.1), so that they can stop anywhere mid-message and do not
//! depend on keel's own codec.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::Instant;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Protocol version the attacks speak.
pub(crate) const VERSION: u16 = 1;

/// The largest message body the attacker says it accepts.
pub(crate) const CLIENT_MAX_MESSAGE: u32 = 4 << 20;

/// Frame types (PROTOCOL.md, "Frames").
pub(crate) const REQUEST: u8 = 1;
pub(crate) const REPLY: u8 = 2;
pub(crate) const PING: u8 = 4;
pub(crate) const GO_AWAY: u8 = 6;

/// The service and operation every attack and probe calls (the calculator example's).
pub(crate) const SERVICE: &str = "Calculator";
pub(crate) const OPERATION: &str = "add";

/// Client → host `Hello`: magic, version, max_message_size.
pub(crate) fn hello() -> [u8; 10] {
    let mut h = [0u8; 10];
    h[..4].copy_from_slice(b"KEEL");
    h[4..6].copy_from_slice(&VERSION.to_le_bytes());
    h[6..].copy_from_slice(&CLIENT_MAX_MESSAGE.to_le_bytes());
    h
}

/// The `len` field of a Request frame with `body_len` bytes of body.
pub(crate) fn request_len(body_len: usize) -> usize {
    1 + 8 + 1 + 8 + 1 + SERVICE.len() + 1 + OPERATION.len() + body_len
}

/// Appends the start of a Request frame for `SERVICE`/`OPERATION` up to (not including) its
/// body; `body_len` is the body the length prefix announces.
pub(crate) fn request_head(call_id: u64, body_len: usize, out: &mut Vec<u8>) {
    let len = u32::try_from(request_len(body_len)).expect("a frame length fits in u32");
    out.extend_from_slice(&len.to_le_bytes());
    out.push(REQUEST);
    out.extend_from_slice(&call_id.to_le_bytes());
    out.push(0); // flags: neither one_way nor streamed
    out.extend_from_slice(&0u64.to_le_bytes()); // deadline_us: none
    out.push(SERVICE.len() as u8);
    out.extend_from_slice(SERVICE.as_bytes());
    out.push(OPERATION.len() as u8);
    out.extend_from_slice(OPERATION.as_bytes());
}

/// The postcard body of `add(a, b)`: the parameters as a tuple, two little-endian f64.
pub(crate) fn add_args(a: f64, b: f64) -> [u8; 16] {
    let mut body = [0u8; 16];
    body[..8].copy_from_slice(&a.to_le_bytes());
    body[8..].copy_from_slice(&b.to_le_bytes());
    body
}

/// Appends a whole Request frame: `add(1, 2)` with `call_id`.
pub(crate) fn add_request(call_id: u64, out: &mut Vec<u8>) {
    let body = add_args(1.0, 2.0);
    request_head(call_id, body.len(), out);
    out.extend_from_slice(&body);
}

/// Bytes of one [`add_request`] frame.
pub(crate) const ADD_REQUEST_BYTES: usize = 4 + 1 + 8 + 1 + 8 + 1 + 10 + 1 + 3 + 16;

/// Appends a Ping frame (len 9).
pub(crate) fn ping(nonce: u64, out: &mut Vec<u8>) {
    out.extend_from_slice(&9u32.to_le_bytes());
    out.push(PING);
    out.extend_from_slice(&nonce.to_le_bytes());
}

/// Bytes of one [`ping`] frame.
pub(crate) const PING_BYTES: usize = 13;

/// Sends `Hello` and reads the host's `HelloReply`; an error unless it is an Accept.
pub(crate) async fn handshake(s: &mut tokio::net::TcpStream) -> io::Result<()> {
    s.write_all(&hello()).await?;
    let tag = s.read_u8().await?;
    match tag {
        0 => {
            let mut rest = [0u8; 6];
            s.read_exact(&mut rest).await?;
            Ok(())
        }
        1 => Err(io::Error::other("the host rejected the handshake")),
        t => Err(io::Error::other(format!("bad HelloReply tag {t}"))),
    }
}

/// A blocking socket whose every read and write must finish by `deadline`.
pub(crate) struct Timed<'a> {
    pub(crate) s: &'a mut TcpStream,
    pub(crate) deadline: Instant,
}

impl Timed<'_> {
    fn arm(&mut self) -> io::Result<()> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(io::ErrorKind::TimedOut, "timed out"));
        }
        self.s.set_read_timeout(Some(left))?;
        self.s.set_write_timeout(Some(left))
    }

    pub(crate) fn write_all(&mut self, b: &[u8]) -> io::Result<()> {
        self.arm()?;
        self.s.write_all(b)
    }

    pub(crate) fn read_exact(&mut self, b: &mut [u8]) -> io::Result<()> {
        loop {
            self.arm()?;
            match self.s.read_exact(b) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                r => return r,
            }
        }
    }

    pub(crate) fn read(&mut self, b: &mut [u8]) -> io::Result<usize> {
        self.arm()?;
        self.s.read(b)
    }
}

/// The HTTP/1.1 request head of `POST /Calculator/add` with a JSON body of `content_length`
/// bytes.
pub(crate) fn http_post_head(host: &str, content_length: u64, close: bool) -> String {
    let connection = if close { "Connection: close\r\n" } else { "" };
    format!(
        "POST /{SERVICE}/{OPERATION} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n\
         Content-Length: {content_length}\r\n{connection}\r\n"
    )
}

/// The status code of an HTTP/1.1 status line at the start of `buf`, if it is there.
pub(crate) fn http_status(buf: &[u8]) -> Option<u16> {
    let line_end = buf.windows(2).position(|w| w == b"\r\n")?;
    let line = std::str::from_utf8(&buf[..line_end]).ok()?;
    let mut parts = line.split(' ');
    if !parts.next()?.starts_with("HTTP/") {
        return None;
    }
    parts.next()?.parse().ok()
}

/// Byte `i` of a request head that never ends: a request line, then header lines forever.
pub(crate) fn endless_head_byte(i: usize) -> u8 {
    const START: &[u8] = b"POST /Calculator/add HTTP/1.1\r\nHost: keel\r\n";
    const LINE: &[u8] = b"X-Slow: loris\r\n";
    if i < START.len() {
        START[i]
    } else {
        LINE[(i - START.len()) % LINE.len()]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use keel_wire::{Codec, Frame, Limits};

    #[test]
    fn hand_built_frames_decode_with_keel_wire() {
        let mut out = Vec::new();
        add_request(7, &mut out);
        assert_eq!(out.len(), ADD_REQUEST_BYTES);
        ping(9, &mut out);
        assert_eq!(out.len(), ADD_REQUEST_BYTES + PING_BYTES);
        let mut buf = BytesMut::from(&out[..]);
        let mut codec = Codec::new(Limits::default());
        match codec.decode(&mut buf).unwrap() {
            Some(Frame::Request(r)) => {
                assert_eq!(
                    (r.call_id, &*r.service, &*r.operation),
                    (7, SERVICE, OPERATION)
                );
                let args: (f64, f64) = postcard::from_bytes(&r.body).unwrap();
                assert_eq!(args, (1.0, 2.0));
            }
            other => panic!("expected a request, got {other:?}"),
        }
        assert!(matches!(
            codec.decode(&mut buf).unwrap(),
            Some(Frame::Ping(_))
        ));
        let mut hb = BytesMut::from(&hello()[..]);
        let h = keel_wire::decode_hello(&mut hb).unwrap().unwrap();
        assert_eq!(
            (h.version, h.max_message_size),
            (VERSION, CLIENT_MAX_MESSAGE)
        );
    }

    #[test]
    fn a_large_head_announces_its_body() {
        let mut out = Vec::new();
        let body = 4 << 20;
        request_head(1, body, &mut out);
        let len = u32::from_le_bytes(out[..4].try_into().unwrap()) as usize;
        assert_eq!(len, request_len(body));
        assert_eq!(out.len() + body, 4 + len);
    }

    #[test]
    fn http_helpers() {
        assert_eq!(http_status(b"HTTP/1.1 408 Request Timeout\r\n"), Some(408));
        assert_eq!(http_status(b"HTTP/1.1 200"), None);
        let head: Vec<u8> = (0..60).map(endless_head_byte).collect();
        assert!(head.starts_with(b"POST /Calculator/add HTTP/1.1\r\nHost: keel\r\nX-Slow"));
        assert!(http_post_head("h", 3, true).ends_with("Connection: close\r\n\r\n"));
    }
}
