//! What a peer seems to speak, from the first bytes it sent: for the errors a client or host
//! gives when both ends do not speak the same protocol (a `tcp://` client at an HTTP port, an
//! HTTP client at a keel-wire port).

/// The connection preface of an HTTP/2 client with prior knowledge (RFC 9113 §3.4).
pub(crate) const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Whether `bytes`, the first a client read, are an HTTP answer: an HTTP/1.x status line, or
/// an HTTP/2 server's first frame (SETTINGS on stream 0, RFC 9113 §3.4). `None` while too few
/// bytes have arrived to tell.
pub(crate) fn http_answer(bytes: &[u8]) -> Option<bool> {
    const STATUS_LINE: &[u8] = b"HTTP/";
    if bytes.len() < STATUS_LINE.len() && STATUS_LINE.starts_with(bytes) {
        return None;
    }
    if bytes.starts_with(STATUS_LINE) {
        return Some(true);
    }
    // An HTTP/2 frame header: length (3 bytes), type, flags, stream id (4 bytes). A first
    // frame shorter than 64 KiB starts with two zero bytes, which no keel-wire HelloReply does
    // (an Accept's version would be a multiple of 256).
    match bytes {
        [0, 0, _, 0x04, _, 0, 0, 0, 0, ..] => Some(true),
        [0, 0, ..] if bytes.len() < 9 => None,
        [0] => None,
        _ => Some(false),
    }
}

/// Whether `bytes`, the first a host read, start an HTTP request: a method and a space (HTTP/1.x)
/// or the HTTP/2 preface ([`is_h2_preface`]).
pub(crate) fn http_request(bytes: &[u8]) -> bool {
    const METHODS: [&[u8]; 9] = [
        b"GET ",
        b"POST ",
        b"PUT ",
        b"HEAD ",
        b"DELETE ",
        b"OPTIONS ",
        b"PATCH ",
        b"CONNECT ",
        b"TRACE ",
    ];
    is_h2_preface(bytes) || METHODS.iter().any(|m| bytes.starts_with(m))
}

/// Whether `bytes` start with the HTTP/2 client preface (at least its first line).
pub(crate) fn is_h2_preface(bytes: &[u8]) -> bool {
    bytes.len() >= 16 && H2_PREFACE.starts_with(&bytes[..bytes.len().min(H2_PREFACE.len())])
}

/// Follows an HTTP/2 client's first bytes (the preface, then frames) to the state of its first
/// request (stream 1), taking them from the front of the buffer as they arrive: only frame
/// headers are read (a payload is skipped as it comes), so a long body costs no memory and each
/// byte is looked at once. [`http_refusal`] answers that request, which an HTTP/2 client takes
/// only once it opened it, and best once it has sent all of it.
#[derive(Debug, Default)]
pub(crate) struct H2FirstRequest {
    /// The preface has been taken.
    past_preface: bool,
    /// Payload bytes of the current frame still to skip.
    skip: usize,
    /// Bytes taken so far.
    taken: usize,
    /// Stream 1's HEADERS arrived.
    opened: bool,
    /// Stream 1 ended (END_STREAM on its HEADERS or a DATA frame).
    ended: bool,
}

impl H2FirstRequest {
    /// Takes what `buf` holds (it must start with the client's preface, see [`is_h2_preface`]),
    /// leaving only a frame header not yet whole; then [`H2FirstRequest::state`].
    pub(crate) fn take(&mut self, buf: &mut bytes::BytesMut) -> Option<bool> {
        use bytes::Buf;
        const DATA: u8 = 0x00;
        const HEADERS: u8 = 0x01;
        const END_STREAM: u8 = 0x01;
        loop {
            if !self.past_preface {
                if buf.len() < H2_PREFACE.len() {
                    break;
                }
                buf.advance(H2_PREFACE.len());
                self.taken += H2_PREFACE.len();
                self.past_preface = true;
            }
            if self.skip > 0 {
                let n = self.skip.min(buf.len());
                if n == 0 {
                    break;
                }
                buf.advance(n);
                self.skip -= n;
                self.taken += n;
                continue;
            }
            let Some(header) = buf.get(..9) else { break };
            let len =
                usize::from(header[0]) << 16 | usize::from(header[1]) << 8 | usize::from(header[2]);
            let stream =
                u32::from_be_bytes([header[5], header[6], header[7], header[8]]) & !(1 << 31);
            let (kind, flags) = (header[3], header[4]);
            if stream == 1 {
                self.opened |= kind == HEADERS;
                if self.opened && (kind == HEADERS || kind == DATA) && flags & END_STREAM != 0 {
                    self.ended = true;
                }
            }
            buf.advance(9);
            self.taken += 9;
            self.skip = len;
        }
        self.state()
    }

    /// `None` while stream 1's HEADERS have not arrived; then whether the request has ended.
    pub(crate) fn state(&self) -> Option<bool> {
        self.opened.then_some(self.ended)
    }

    /// The bytes taken so far.
    pub(crate) fn taken(&self) -> usize {
        self.taken
    }
}

/// What a keel-wire endpoint sends an HTTP/2 client still sending its first request's body
/// before answering it: SETTINGS with an initial stream window of `window` bytes, and as much
/// more on the connection's window, so that the client can send up to that and then read the
/// answer (an answer before the request's end makes some clients drop it).
pub(crate) fn h2_open_window(window: u32) -> Vec<u8> {
    let mut out = Vec::with_capacity(9 + 6 + 9 + 4);
    // SETTINGS: SETTINGS_INITIAL_WINDOW_SIZE (0x4).
    out.extend_from_slice(&[0, 0, 6, 0x04, 0, 0, 0, 0, 0, 0, 0x04]);
    out.extend_from_slice(&window.to_be_bytes());
    // WINDOW_UPDATE on the connection (stream 0), past its initial 65,535.
    out.extend_from_slice(&[0, 0, 4, 0x08, 0, 0, 0, 0, 0]);
    out.extend_from_slice(&window.saturating_sub(65_535).to_be_bytes());
    out
}

/// The answer a keel-wire endpoint gives an HTTP client, before it closes the connection: an
/// HTTP/1.1 400 with `text` as its body (`h2`: `None`); or for an HTTP/2 client (`h2`: whether
/// its first request ended, see [`H2FirstRequest`]), the server's SETTINGS, a 400 with `text`
/// on stream 1, a RST_STREAM with NO_ERROR if the request has not ended (RFC 9113 §8.1: stop
/// sending it, no error), and a GOAWAY.
pub(crate) fn http_refusal(h2: Option<bool>, text: &str) -> Vec<u8> {
    const CONTENT_TYPE: &[u8] = b"text/plain; charset=utf-8";
    if let Some(ended) = h2 {
        let frame = |out: &mut Vec<u8>, kind: u8, flags: u8, stream: u8, payload: &[u8]| {
            let len = u32::try_from(payload.len()).unwrap_or(0).to_be_bytes();
            out.extend_from_slice(&[len[1], len[2], len[3], kind, flags, 0, 0, 0, stream]);
            out.extend_from_slice(payload);
        };
        let mut out = Vec::with_capacity(64 + text.len());
        // SETTINGS, empty.
        frame(&mut out, 0x04, 0, 0, &[]);
        // HEADERS, END_HEADERS, in HPACK: `:status: 400` (static index 12), then
        // `content-type` (static name 31) with a literal value, not indexed.
        let mut block = vec![0x80 | 12, 0x0f, 31 - 15, CONTENT_TYPE.len() as u8];
        block.extend_from_slice(CONTENT_TYPE);
        frame(&mut out, 0x01, 0x04, 1, &block);
        // DATA, END_STREAM.
        frame(&mut out, 0x00, 0x01, 1, text.as_bytes());
        if !ended {
            // RST_STREAM, NO_ERROR.
            frame(&mut out, 0x03, 0, 1, &[0, 0, 0, 0]);
        }
        // GOAWAY: last stream 1, NO_ERROR.
        frame(&mut out, 0x07, 0, 0, &[0, 0, 0, 1, 0, 0, 0, 0]);
        return out;
    }
    format!(
        "HTTP/1.1 400 Bad Request\r\ncontent-type: text/plain; charset=utf-8\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n{text}",
        text.len()
    )
    .into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tells_http_from_keel_wire() {
        assert_eq!(http_answer(b"HTTP/1.1 400 Bad Request\r\n"), Some(true));
        assert_eq!(http_answer(b"HTT"), None);
        assert_eq!(
            http_answer(&[0, 0, 0x12, 0x04, 0, 0, 0, 0, 0, 0]),
            Some(true)
        );
        assert_eq!(http_answer(&[0, 0, 0x12]), None);
        // keel-wire's HelloReply::Accept: tag 0, version (2, little-endian), limit.
        assert_eq!(http_answer(&[0, 2, 0, 0, 0x04, 0, 0]), Some(false));
        assert_eq!(http_answer(&[0]), None);
        assert_eq!(http_answer(&[0x16, 0x03, 0x03]), Some(false));

        assert!(http_request(b"POST /Calc/add HTTP/1.1\r\n"));
        assert!(http_request(H2_PREFACE));
        assert!(!http_request(b"KEEL\x00\x02"));
        assert!(!http_request(&[0x16, 0x03, 0x01]));
    }

    #[test]
    fn refuses_in_the_clients_http() {
        let refusal = http_refusal(None, "no");
        assert!(refusal.starts_with(b"HTTP/1.1 400 "));
        assert!(refusal.ends_with(b"\r\n\r\nno"));

        // Answered with the request still sending: SETTINGS, HEADERS, DATA, RST_STREAM
        // NO_ERROR, GOAWAY.
        let refusal = http_refusal(Some(false), "no");
        assert_eq!(&refusal[..9], &[0, 0, 0, 0x04, 0, 0, 0, 0, 0]);
        assert_eq!(&refusal[9..18], &[0, 0, 29, 0x01, 0x04, 0, 0, 0, 1]);
        assert_eq!(
            &refusal[47..58],
            &[0, 0, 2, 0x00, 0x01, 0, 0, 0, 1, b'n', b'o']
        );
        assert_eq!(
            &refusal[58..71],
            &[0, 0, 4, 0x03, 0, 0, 0, 0, 1, 0, 0, 0, 0]
        );
        assert_eq!(&refusal[71..80], &[0, 0, 8, 0x07, 0, 0, 0, 0, 0]);
        // Answered once it ended: no RST_STREAM.
        let refusal = http_refusal(Some(true), "no");
        assert_eq!(&refusal[58..67], &[0, 0, 8, 0x07, 0, 0, 0, 0, 0]);

        let window = h2_open_window(1 << 20);
        assert_eq!(
            &window[..15],
            &[0, 0, 6, 0x04, 0, 0, 0, 0, 0, 0, 4, 0, 0x10, 0, 0]
        );
        assert_eq!(
            &window[15..],
            &[0, 0, 4, 0x08, 0, 0, 0, 0, 0, 0, 0x0f, 0, 1]
        );
    }

    /// The client's SETTINGS, HEADERS on stream 1 without END_STREAM, then DATA that ends it,
    /// fed one byte at a time: the state follows, only an unfinished frame header is kept,
    /// and a payload is skipped as it comes.
    #[test]
    fn follows_the_first_request_byte_by_byte() {
        let mut client = H2_PREFACE.to_vec();
        let settings = client.len();
        client.extend_from_slice(&[0, 0, 6, 0x04, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 100]);
        let headers = client.len();
        client.extend_from_slice(&[0, 0, 1, 0x01, 0x04, 0, 0, 0, 1, 0x83]);
        let data = client.len();
        client.extend_from_slice(&[0, 0, 3, 0x00, 0x01, 0, 0, 0, 1, b'a', b'b', b'c']);
        let mut scan = H2FirstRequest::default();
        let mut buf = bytes::BytesMut::new();
        for (i, b) in client.iter().enumerate() {
            buf.extend_from_slice(&[*b]);
            let state = scan.take(&mut buf);
            let fed = i + 1;
            let expected = match fed {
                n if n < headers + 9 => None,
                n if n < data + 9 => Some(false),
                _ => Some(true),
            };
            assert_eq!(state, expected, "after {fed} bytes");
            if fed >= H2_PREFACE.len() {
                assert!(buf.len() < 9, "kept {} bytes", buf.len());
            }
            if fed == settings {
                assert!(buf.is_empty());
            }
        }
        assert_eq!(scan.taken(), client.len());
        // HEADERS with END_STREAM (no body) end it at once.
        let mut get = H2_PREFACE.to_vec();
        get.extend_from_slice(&[0, 0, 1, 0x01, 0x05, 0, 0, 0, 1, 0x82]);
        let mut scan = H2FirstRequest::default();
        assert_eq!(scan.take(&mut bytes::BytesMut::from(&get[..])), Some(true));
        // A hostile length (16 MiB) is only skipped, never buffered.
        let mut big = H2_PREFACE.to_vec();
        big.extend_from_slice(&[0xff, 0xff, 0xff, 0x00, 0, 0, 0, 0, 3]);
        let mut scan = H2FirstRequest::default();
        let mut buf = bytes::BytesMut::from(&big[..]);
        assert_eq!(scan.take(&mut buf), None);
        buf.extend_from_slice(&[0; 1000]);
        assert_eq!(scan.take(&mut buf), None);
        assert!(buf.is_empty());
    }
}
