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

/// What `bytes`, an HTTP/2 client's first bytes (the preface, then frames), say of its first
/// request (stream 1): `None` while its HEADERS have not arrived; then whether the request has
/// ended (END_STREAM on its HEADERS or on a DATA frame). [`http_refusal`] answers that stream,
/// which an HTTP/2 client takes only once it opened it, and best once it has sent all of it.
pub(crate) fn h2_first_request(bytes: &[u8]) -> Option<bool> {
    const DATA: u8 = 0x00;
    const HEADERS: u8 = 0x01;
    const END_STREAM: u8 = 0x01;
    let mut at = H2_PREFACE.len();
    let mut opened = false;
    while let Some(header) = bytes.get(at..at + 9) {
        let len =
            usize::from(header[0]) << 16 | usize::from(header[1]) << 8 | usize::from(header[2]);
        let stream = u32::from_be_bytes([header[5], header[6], header[7], header[8]]) & !(1 << 31);
        let (kind, flags) = (header[3], header[4]);
        // A frame counts once it has all arrived (its END_STREAM is then final).
        if stream == 1 && bytes.len() >= at + 9 + len {
            opened |= kind == HEADERS;
            if opened && (kind == HEADERS || kind == DATA) && flags & END_STREAM != 0 {
                return Some(true);
            }
        }
        at += 9 + len;
    }
    opened.then_some(false)
}

/// The answer a keel-wire endpoint gives an HTTP client, before it closes the connection: an
/// HTTP/1.1 400 with `text` as its body; or for an HTTP/2 client, the server's SETTINGS, a 400
/// with `text` on stream 1 (its first request, see [`h2_first_request`]), a RST_STREAM with
/// NO_ERROR if the request has not ended (RFC 9113 §8.1: stop sending it, no error), and a
/// GOAWAY.
pub(crate) fn http_refusal(request: &[u8], text: &str) -> Vec<u8> {
    const CONTENT_TYPE: &[u8] = b"text/plain; charset=utf-8";
    if is_h2_preface(request) {
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
        if h2_first_request(request) != Some(true) {
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
        let refusal = http_refusal(b"GET / HTTP/1.1\r\n", "no");
        assert!(refusal.starts_with(b"HTTP/1.1 400 "));
        assert!(refusal.ends_with(b"\r\n\r\nno"));

        // HEADERS on stream 1 without END_STREAM (a body follows), then its DATA that ends it.
        let mut request = H2_PREFACE.to_vec();
        assert_eq!(h2_first_request(&request), None);
        // The client's SETTINGS (one setting).
        request.extend_from_slice(&[0, 0, 6, 0x04, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 100]);
        assert_eq!(h2_first_request(&request), None);
        request.extend_from_slice(&[0, 0, 1, 0x01, 0x04, 0, 0, 0, 1, 0x83]);
        assert_eq!(h2_first_request(&request), Some(false));
        // Answered now, the request still sending: SETTINGS, HEADERS, DATA, RST_STREAM
        // NO_ERROR, GOAWAY.
        let refusal = http_refusal(&request, "no");
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
        // DATA with END_STREAM, its payload not all here yet: not ended until it is.
        let data = [0, 0, 2, 0x00, 0x01, 0, 0, 0, 1, b'h'];
        request.extend_from_slice(&data);
        assert_eq!(h2_first_request(&request), Some(false));
        request.push(b'i');
        assert_eq!(h2_first_request(&request), Some(true));
        // Answered once it ended: no RST_STREAM.
        let refusal = http_refusal(&request, "no");
        assert_eq!(&refusal[58..67], &[0, 0, 8, 0x07, 0, 0, 0, 0, 0]);
        // HEADERS with END_STREAM (no body) end it at once.
        let mut get = H2_PREFACE.to_vec();
        get.extend_from_slice(&[0, 0, 1, 0x01, 0x05, 0, 0, 0, 1, 0x82]);
        assert_eq!(h2_first_request(&get), Some(true));
    }
}
