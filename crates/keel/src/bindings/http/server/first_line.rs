//! The first line of a connection whose protocol no ALPN agreed (an `http://` endpoint, where
//! HTTP/1.1 and HTTP/2 share a port): held back from hyper until it ends, so that a peer that
//! speaks neither protocol is closed without an answer rather than answered in HTTP/1.1.
//!
//! hyper-util's `auto` server takes any bytes that are not HTTP/2's preface for HTTP/1.1, and
//! hyper answers what it cannot parse with an HTTP/1.1 error (400). To a peer that meant HTTP/2
//! and sent a broken preface, that is bytes it cannot read: RFC 9113 §3.4 makes an invalid
//! preface a connection error, and h2spec's case 3.5/2 (`INVALID CONNECTION PREFACE\r\n\r\n`)
//! expects the connection closed. Telling the two apart takes the whole line: httparse refuses
//! `INVALID CONNECTION PREFACE` and `GET /a b HTTP/1.1` at the same byte (the third word), and
//! only the line's end says that the second is HTTP/1.1 (still answered 400 by hyper) and the
//! first names no HTTP version.
//!
//! The rule: the first line that is not empty must end in ` HTTP/<digit>.<digit>` (HTTP/2's
//! preface, `PRI * HTTP/2.0`, does); a control byte before its end (binary: a TLS ClientHello,
//! keel-wire's hello) closes at once, keel-wire's hello after an HTTP/1.1 400 that tells the
//! client to use an `http://` URL. A line longer than hyper's head buffer is left to hyper
//! (431). After the first line nothing is held or checked.

/// What the first line says so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Verdict {
    /// It has not ended yet: read on.
    Wait,
    /// HTTP/1 or HTTP/2's preface (or too long to hold): hyper takes it from here.
    Pass,
    /// Neither: close the connection without an answer.
    Close,
    /// keel-wire's hello (a `tcp://` client at an HTTP port): answered with an HTTP/1.1 400
    /// that says so, which keel's client shows, then closed.
    KeelWire,
}

/// The first line's bytes as they arrive, held until its verdict.
#[derive(Debug, Default)]
pub(super) struct FirstLine {
    held: Vec<u8>,
    /// Where the line starts in `held`: past the empty lines HTTP/1.1 lets a client send first
    /// (RFC 9112 §2.2; hyper skips them).
    start: usize,
}

impl FirstLine {
    /// Adds `bytes` to what is held and says what the line is, once it can.
    pub(super) fn feed(&mut self, bytes: &[u8]) -> Verdict {
        let from = self.held.len();
        self.held.extend_from_slice(bytes);
        for i in from..self.held.len() {
            match self.held[i] {
                b'\n' => {
                    let line = &self.held[self.start..i];
                    let line = line.strip_suffix(b"\r").unwrap_or(line);
                    if line.is_empty() {
                        self.start = i + 1;
                        continue;
                    }
                    return if names_http_version(line) {
                        Verdict::Pass
                    } else {
                        Verdict::Close
                    };
                }
                b if is_control(b) => {
                    return if self.held[self.start..].starts_with(&keel_wire::MAGIC) {
                        Verdict::KeelWire
                    } else {
                        Verdict::Close
                    }
                }
                _ => {}
            }
        }
        if self.held.len() >= super::super::H1_MAX_BUF {
            Verdict::Pass
        } else {
            Verdict::Wait
        }
    }

    /// What was held, for hyper.
    pub(super) fn into_held(self) -> Vec<u8> {
        self.held
    }
}

/// Whether `line` ends in ` HTTP/<digit>.<digit>`.
fn names_http_version(line: &[u8]) -> bool {
    let Some(tail) = line.len().checked_sub(9).map(|at| &line[at..]) else {
        return false;
    };
    tail.starts_with(b" HTTP/")
        && tail[6].is_ascii_digit()
        && tail[7] == b'.'
        && tail[8].is_ascii_digit()
}

/// A byte no HTTP/1 request line holds (HTAB and CR are left to hyper).
fn is_control(b: u8) -> bool {
    (b < 0x20 && b != b'\t' && b != b'\r') || b == 0x7f
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verdict(chunks: &[&[u8]]) -> Verdict {
        let mut line = FirstLine::default();
        let mut v = Verdict::Wait;
        for chunk in chunks {
            v = line.feed(chunk);
            if v != Verdict::Wait {
                break;
            }
        }
        v
    }

    #[test]
    fn http1_request_lines_and_the_h2_preface_pass() {
        for line in [
            &b"GET / HTTP/1.1\r\n"[..],
            b"POST /Calculator/add HTTP/1.0\n",
            b"\r\n\r\nGET / HTTP/1.1\r\n",
            b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
            // Malformed HTTP/1.1, still hyper's to answer (400).
            b"GET /a b HTTP/1.1\r\n",
            b"POST /Probe/echo HTTP/9.9\r\n",
        ] {
            assert_eq!(verdict(&[line]), Verdict::Pass, "{line:?}");
        }
        // Byte by byte.
        let line = b"GET /x HTTP/1.1\r\nhost: a\r\n\r\n";
        let chunks: Vec<&[u8]> = line.chunks(1).collect();
        assert_eq!(verdict(&chunks), Verdict::Pass);
    }

    #[test]
    fn lines_that_name_no_http_version_and_binary_close() {
        for line in [
            &b"INVALID CONNECTION PREFACE\r\n\r\n"[..],
            b"GET /\r\n",
            b"GET / HTTP/1.x\r\n",
            b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",
            b"GET /\x00 HTTP/1.1\r\n",
        ] {
            assert_eq!(verdict(&[line]), Verdict::Close, "{line:?}");
        }
        // keel-wire's hello: magic, version 2, then the message limit.
        let hello = b"KEEL\x02\x00\x00\x00\x00\x01";
        assert_eq!(verdict(&[hello]), Verdict::KeelWire);
        assert_eq!(verdict(&[b"KE", b"EL\x02"]), Verdict::KeelWire);
    }

    #[test]
    fn an_unfinished_line_waits_up_to_the_head_buffer() {
        assert_eq!(verdict(&[b"GET /", b"abc"]), Verdict::Wait);
        let long = vec![b'a'; super::super::super::H1_MAX_BUF];
        assert_eq!(verdict(&[b"GET /", &long]), Verdict::Pass);
    }
}
