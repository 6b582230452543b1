//! gRPC-Web's own pieces (grpc/grpc `doc/PROTOCOL-WEB.md`), with no IO: its content types, the
//! trailer frame (flag `0x80`, the trailers as `name: value\r\n` lines) and the base64 of
//! `application/grpc-web-text`, decoded as it arrives.

use base64::Engine as _;
use bytes::{BufMut, Bytes, BytesMut};
use http::HeaderMap;

/// The content type of gRPC-Web requests and answers (binary); `+{subtype}` names the
/// message encoding.
pub(crate) const CONTENT_TYPE: &str = "application/grpc-web";
/// The content type of gRPC-Web whose body is base64 (`application/grpc-web-text`).
pub(crate) const TEXT_CONTENT_TYPE: &str = "application/grpc-web-text";

/// The flags byte of the trailer frame.
pub(crate) const TRAILER_FLAG: u8 = 0x80;

/// What a gRPC-Web content type says: whether the body is base64, and the message subtype
/// (`""`, `"proto"`, `"json"`); `None` for any other content type.
pub(crate) fn parse_content_type(content_type: &str) -> Option<(bool, &str)> {
    let t = content_type.split(';').next().unwrap_or("").trim();
    let (text, rest) = [(true, TEXT_CONTENT_TYPE), (false, CONTENT_TYPE)]
        .into_iter()
        .find_map(|(text, prefix)| {
            let head = t.get(..prefix.len())?;
            head.eq_ignore_ascii_case(prefix)
                .then(|| (text, &t[prefix.len()..]))
        })?;
    match rest {
        "" => Some((text, "")),
        rest => rest
            .strip_prefix('+')
            .filter(|s| !s.is_empty())
            .map(|s| (text, s)),
    }
}

/// The trailer frame that carries `trailers`: flag `0x80`, the length, then each field as
/// `name: value\r\n` (names lower case, as HTTP/2 sends them).
pub(crate) fn trailer_frame(trailers: &HeaderMap, out: &mut BytesMut) {
    let mut block = Vec::new();
    for (name, value) in trailers {
        block.extend_from_slice(name.as_str().as_bytes());
        block.extend_from_slice(b": ");
        block.extend_from_slice(value.as_bytes());
        block.extend_from_slice(b"\r\n");
    }
    out.reserve(super::frame::PREFIX + block.len());
    out.put_u8(TRAILER_FLAG);
    out.put_u32(block.len() as u32);
    out.put_slice(&block);
}

/// The fields of a trailer frame's block (`name: value` lines), names lower-cased; `None` if
/// a line has no `:`.
#[cfg(test)]
fn parse_trailers(block: &[u8]) -> Option<Vec<(String, String)>> {
    let text = std::str::from_utf8(block).ok()?;
    text.split("\r\n")
        .filter(|line| !line.is_empty())
        .map(|line| {
            let (name, value) = line.split_once(':')?;
            Some((name.trim().to_ascii_lowercase(), value.trim().to_string()))
        })
        .collect()
}

/// `bytes` as `application/grpc-web-text` sends them: padded standard base64. Each chunk is
/// encoded on its own (a body may be several padded segments, as the protocol allows).
pub(crate) fn text_encode(bytes: &[u8]) -> Bytes {
    Bytes::from(base64::engine::general_purpose::STANDARD.encode(bytes))
}

/// Why a `-text` body was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NotBase64;

impl std::fmt::Display for NotBase64 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the application/grpc-web-text body is not base64")
    }
}

impl std::error::Error for NotBase64 {}

/// Decodes an `application/grpc-web-text` body as its chunks arrive: standard base64, in
/// groups of four characters, where each group may end a padded segment (several segments
/// may follow one another). Line breaks and spaces are skipped. At most three characters are
/// held between chunks.
#[derive(Debug, Default)]
pub(crate) struct TextDecoder {
    /// Characters of a group not yet complete.
    held: Vec<u8>,
}

impl TextDecoder {
    /// The bytes of the whole groups `chunk` completes.
    pub(crate) fn push(&mut self, chunk: &[u8]) -> Result<Bytes, NotBase64> {
        let mut out = BytesMut::with_capacity(chunk.len() / 4 * 3 + 3);
        // Runs of unpadded groups are decoded at once; a padded group ends a segment.
        let mut run: Vec<u8> = Vec::with_capacity(chunk.len() + 4);
        run.append(&mut self.held);
        for &c in chunk {
            if c.is_ascii_whitespace() {
                continue;
            }
            run.push(c);
            if run.len().is_multiple_of(4) && c == b'=' {
                decode_into(&run, &mut out)?;
                run.clear();
            }
        }
        let whole = run.len() / 4 * 4;
        decode_into(&run[..whole], &mut out)?;
        self.held = run[whole..].to_vec();
        Ok(out.freeze())
    }

    /// The body ended: fails if it ended inside a group.
    pub(crate) fn finish(&self) -> Result<(), NotBase64> {
        if self.held.is_empty() {
            Ok(())
        } else {
            Err(NotBase64)
        }
    }
}

fn decode_into(groups: &[u8], out: &mut BytesMut) -> Result<(), NotBase64> {
    if groups.is_empty() {
        return Ok(());
    }
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(groups)
        .map_err(|_| NotBase64)?;
    out.extend_from_slice(&bytes);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    #[test]
    fn content_types() {
        assert_eq!(
            parse_content_type("application/grpc-web"),
            Some((false, ""))
        );
        assert_eq!(
            parse_content_type("application/grpc-web+proto"),
            Some((false, "proto"))
        );
        assert_eq!(
            parse_content_type("Application/gRPC-Web+json; charset=utf-8"),
            Some((false, "json"))
        );
        assert_eq!(
            parse_content_type("application/grpc-web-text"),
            Some((true, ""))
        );
        assert_eq!(
            parse_content_type("application/grpc-web-text+proto"),
            Some((true, "proto"))
        );
        for other in [
            "application/grpc",
            "application/grpc+proto",
            "application/grpc-web+",
            "application/grpc-webx",
            "application/grpc-web-textual",
            "application/json",
            "",
        ] {
            assert_eq!(parse_content_type(other), None, "{other}");
        }
    }

    #[test]
    fn the_trailer_frame_holds_the_trailers_as_lines() {
        let mut trailers = HeaderMap::new();
        trailers.insert("grpc-status", HeaderValue::from_static("5"));
        trailers.insert("grpc-message", HeaderValue::from_static("no%20such"));
        let mut out = BytesMut::new();
        trailer_frame(&trailers, &mut out);
        assert_eq!(out[0], TRAILER_FLAG);
        let len = u32::from_be_bytes([out[1], out[2], out[3], out[4]]) as usize;
        assert_eq!(len, out.len() - 5);
        assert_eq!(&out[5..], b"grpc-status: 5\r\ngrpc-message: no%20such\r\n");
        let fields = parse_trailers(&out[5..]).unwrap();
        assert_eq!(fields[0], ("grpc-status".into(), "5".into()));
        assert_eq!(
            parse_trailers(b"Grpc-Status:0\r\n").unwrap()[0].0,
            "grpc-status"
        );
        assert_eq!(parse_trailers(b"no colon\r\n"), None);
    }

    #[test]
    fn text_decodes_in_any_chunks_and_across_padded_segments() {
        let body: Vec<u8> = (0u8..=255).collect();
        // Two segments, each padded, as a client that encodes each message on its own sends.
        let text = [text_encode(&body[..100]), text_encode(&body[100..])].concat();
        for split in [1, 2, 3, 5, 7, 64, text.len()] {
            let mut d = TextDecoder::default();
            let mut got = Vec::new();
            for chunk in text.chunks(split) {
                got.extend_from_slice(&d.push(chunk).unwrap());
            }
            d.finish().unwrap();
            assert_eq!(got, body, "chunks of {split}");
        }
        let mut d = TextDecoder::default();
        assert_eq!(&d.push(b"QU\r\nJD").unwrap()[..], b"ABC");
    }

    #[test]
    fn what_is_not_base64_is_refused() {
        assert_eq!(TextDecoder::default().push(b"AAAA!!!!"), Err(NotBase64));
        assert_eq!(TextDecoder::default().push(b"A===AAAA"), Err(NotBase64));
        let mut d = TextDecoder::default();
        d.push(b"AAAAAA").unwrap();
        assert_eq!(d.finish(), Err(NotBase64));
    }
}
