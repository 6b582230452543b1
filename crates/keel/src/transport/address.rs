//! Endpoint URLs (see the table in [`crate::transport`]), parsed by hand: the forms keel takes
//! are few and strict (`scheme://host:port`, `unix:///path`), and a general URL parser (the
//! `url` crate, with IDNA and its Unicode tables) cost a user's build about 25 crates.

use std::fmt;
use std::net::Ipv6Addr;
use std::path::PathBuf;

use super::{ALPN_H2, ALPN_HTTP1, ALPN_KEEL};
use crate::core::error::{Error, Kind};

/// Which protocol runs over an endpoint's byte stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Protocol {
    /// The keel wire protocol (`keel-wire`).
    Wire,
    /// HTTP/1.1 or HTTP/2.
    Http,
    /// gRPC over HTTP/2 (a client's scheme: hosts speak gRPC on their HTTP endpoints).
    Grpc,
    /// keel's calls on QUIC streams (feature `quic`).
    Quic,
}

/// Where a host listens or a client connects, parsed from a URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Endpoint {
    /// `tcp://host:port`
    Tcp(String),
    /// `tcps://host:port`
    Tcps(String),
    /// `unix:///path`
    Unix(PathBuf),
    /// `http://host:port`
    Http(String),
    /// `https://host:port`
    Https(String),
    /// `grpc://host:port`: gRPC over HTTP/2 with prior knowledge (h2c).
    Grpc(String),
    /// `grpcs://host:port`: gRPC over HTTP/2 on TLS (ALPN `h2`).
    Grpcs(String),
    /// `quic://host:port`: keel's calls on QUIC streams (UDP), TLS 1.3 (ALPN `keel/1`).
    Quic(String),
}

/// The schemes keel knows, each with what it is and the feature it needs (for errors).
const SCHEMES: &str = "tcp:// (keel's wire protocol), tcps:// (the same on TLS; feature `tls`), \
unix:///path (a Unix socket), http:// (HTTP/1.1 and HTTP/2, gRPC, JSON; feature `http`), \
https:// (features `http` and `tls`), grpc:// and grpcs:// (a client's gRPC; feature `http`, \
and `tls` for grpcs), quic:// (keel's calls on QUIC; feature `quic`)";

fn config(message: String) -> Error {
    Error::new(Kind::Config, message)
}

/// `host:port` of a network URL's authority, with the port written out (even 80 for `http`)
/// and nothing else: a path other than `/`, a query, a fragment or credentials is nothing keel
/// would use, so an error rather than silently dropped. The host is a DNS name or an IPv4
/// address (ASCII letters, digits, `-`, `.`, `_`; lowercased) or a bracketed IPv6 address.
fn host_port(input: &str, scheme: &str, rest: &str) -> Result<String, Error> {
    let expected = |why: &str| {
        config(format!(
            "`{input}`: {why}; expected {scheme}://host:port, e.g. {scheme}://127.0.0.1:7000 or \
             {scheme}://[::1]:7000"
        ))
    };
    let (authority, tail) = rest.split_at(rest.find(['/', '?', '#']).unwrap_or(rest.len()));
    if !matches!(tail, "" | "/") {
        return Err(expected(
            "a path, a query or a fragment is not part of an endpoint",
        ));
    }
    if authority.contains('@') {
        return Err(expected("credentials are not part of an endpoint"));
    }
    // A bracketed IPv6 address holds colons of its own: the port follows the `]`.
    let split = match authority.find(']') {
        Some(end) if authority.starts_with('[') => authority[end + 1..]
            .strip_prefix(':')
            .map(|port| (&authority[..=end], port)),
        _ => authority.rsplit_once(':'),
    };
    let Some((host, port)) = split else {
        return Err(expected("the port must be written out"));
    };
    if host.contains(':') && !host.starts_with('[') {
        return Err(expected("an IPv6 address goes in brackets"));
    }
    let port: u16 = match port.parse() {
        Ok(p) if port.bytes().all(|b| b.is_ascii_digit()) => p,
        _ => return Err(expected("the port must be a number from 0 to 65535")),
    };
    let host = if let Some(v6) = host.strip_prefix('[') {
        let addr: Ipv6Addr = v6
            .strip_suffix(']')
            .and_then(|a| a.parse().ok())
            .ok_or_else(|| expected("not an IPv6 address in brackets"))?;
        format!("[{addr}]")
    } else if host.is_empty() {
        return Err(expected("the host is missing"));
    } else if !host.is_ascii() {
        return Err(expected(
            "the host must be ASCII (write an internationalized name in its punycode form, \
             xn--...)",
        ));
    } else if !host
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'))
    {
        return Err(expected(
            "the host may hold only letters, digits, `-`, `.` and `_`",
        ));
    } else {
        host.to_ascii_lowercase()
    };
    Ok(format!("{host}:{port}"))
}

/// The path of `unix:///absolute/path`, percent-decoded (`%20` is a space; a space written as
/// is also works). `.` and `..` segments, a query and a fragment are refused: the socket path
/// would not be the one written.
fn unix_path(input: &str, rest: &str) -> Result<PathBuf, Error> {
    let expected = |why: &str| {
        config(format!(
            "`{input}`: {why}; expected unix:///absolute/path, e.g. unix:///run/app.sock"
        ))
    };
    if !rest.starts_with('/') {
        return Err(expected(
            "a Unix socket URL has an empty host and an absolute path (three slashes)",
        ));
    }
    if rest.contains(['?', '#']) {
        return Err(expected(
            "a query or a fragment is not part of a socket path",
        ));
    }
    let path = percent_encoding::percent_decode_str(rest)
        .decode_utf8()
        .map_err(|_| expected("the path is not UTF-8 once percent-decoded"))?;
    // Checked once decoded, so that `%2e%2e` is refused as `..` is.
    if path.split('/').any(|seg| seg == "." || seg == "..") {
        return Err(expected("`.` and `..` segments are not allowed"));
    }
    if path.len() < 2 {
        return Err(expected("the path is missing"));
    }
    Ok(PathBuf::from(path.into_owned()))
}

impl Endpoint {
    /// Parses an endpoint URL (see the module docs for the schemes). A scheme is matched
    /// without regard to case (`TCP://` is `tcp://`), as URL schemes are.
    pub(crate) fn parse(input: &str) -> Result<Endpoint, Error> {
        let Some((scheme, rest)) = input.split_once("://") else {
            let known = [
                "tcp", "tcps", "unix", "http", "https", "grpc", "grpcs", "quic",
            ];
            if let Some((scheme, _)) = input
                .split_once(':')
                .filter(|(s, _)| known.iter().any(|k| s.eq_ignore_ascii_case(k)))
            {
                return Err(config(format!(
                    "`{input}` is not an endpoint URL: `{scheme}:` is followed by `//` in one \
                     (e.g. {scheme}://127.0.0.1:7000, or unix:///run/app.sock)"
                )));
            }
            return Err(config(format!(
                "`{input}` is not an endpoint URL: it has no scheme. Write one of the schemes \
                 keel knows before the address, e.g. tcp://{input} or http://{input}. keel knows \
                 {SCHEMES}"
            )));
        };
        match scheme.to_ascii_lowercase().as_str() {
            "tcp" => host_port(input, "tcp", rest).map(Endpoint::Tcp),
            "tcps" => host_port(input, "tcps", rest).map(Endpoint::Tcps),
            "http" => host_port(input, "http", rest).map(Endpoint::Http),
            "https" => host_port(input, "https", rest).map(Endpoint::Https),
            "grpc" => host_port(input, "grpc", rest).map(Endpoint::Grpc),
            "grpcs" => host_port(input, "grpcs", rest).map(Endpoint::Grpcs),
            "unix" => unix_path(input, rest).map(Endpoint::Unix),
            "quic" => host_port(input, "quic", rest).map(Endpoint::Quic),
            "ws" | "wss" => Err(config(format!(
                "`{input}`: unknown scheme `{scheme}`: keel has no WebSocket binding; streams \
                 and duplex calls run on tcp:// or on http:// (HTTP/2). keel knows {SCHEMES}"
            ))),
            _ => Err(config(format!(
                "`{input}`: unknown scheme `{scheme}`. keel knows {SCHEMES}"
            ))),
        }
    }

    /// The protocol spoken over this endpoint.
    pub(crate) fn protocol(&self) -> Protocol {
        match self {
            Endpoint::Tcp(_) | Endpoint::Tcps(_) | Endpoint::Unix(_) => Protocol::Wire,
            Endpoint::Http(_) | Endpoint::Https(_) => Protocol::Http,
            Endpoint::Grpc(_) | Endpoint::Grpcs(_) => Protocol::Grpc,
            Endpoint::Quic(_) => Protocol::Quic,
        }
    }

    /// The URL scheme, e.g. `tcp`.
    pub(crate) fn scheme(&self) -> &'static str {
        match self {
            Endpoint::Tcp(_) => "tcp",
            Endpoint::Tcps(_) => "tcps",
            Endpoint::Unix(_) => "unix",
            Endpoint::Http(_) => "http",
            Endpoint::Https(_) => "https",
            Endpoint::Grpc(_) => "grpc",
            Endpoint::Grpcs(_) => "grpcs",
            Endpoint::Quic(_) => "quic",
        }
    }

    /// The scheme an HTTP request to this endpoint names (`:scheme`): `https` over TLS, else
    /// `http` (gRPC's requests are HTTP/2 requests).
    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    pub(crate) fn http_scheme(&self) -> &'static str {
        if self.is_tls() {
            "https"
        } else {
            "http"
        }
    }

    /// Whether the scheme runs over TLS.
    pub(crate) fn is_tls(&self) -> bool {
        matches!(
            self,
            Endpoint::Tcps(_) | Endpoint::Https(_) | Endpoint::Grpcs(_) | Endpoint::Quic(_)
        )
    }

    /// The ALPN protocols of this endpoint's binding, most preferred first: what a host accepts,
    /// and what a client offers unless told otherwise.
    pub(crate) fn alpn(&self) -> &'static [&'static [u8]] {
        match self.protocol() {
            Protocol::Wire | Protocol::Quic => &[ALPN_KEEL],
            Protocol::Http => &[ALPN_H2, ALPN_HTTP1],
            Protocol::Grpc => &[ALPN_H2],
        }
    }

    /// The host part of a network endpoint (`[::1]:80` gives `::1`): the name a TLS client
    /// checks the certificate against by default.
    #[cfg_attr(not(feature = "tls"), allow(dead_code))]
    pub(crate) fn host(&self) -> &str {
        let authority = self.authority().unwrap_or_default();
        let host = authority.rsplit_once(':').map_or(authority, |(h, _)| h);
        host.strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host)
    }

    /// The same scheme at another `host:port` (a Unix endpoint stays itself).
    pub(crate) fn with_authority(&self, authority: String) -> Endpoint {
        match self {
            Endpoint::Tcp(_) => Endpoint::Tcp(authority),
            Endpoint::Tcps(_) => Endpoint::Tcps(authority),
            Endpoint::Http(_) => Endpoint::Http(authority),
            Endpoint::Https(_) => Endpoint::Https(authority),
            Endpoint::Grpc(_) => Endpoint::Grpc(authority),
            Endpoint::Grpcs(_) => Endpoint::Grpcs(authority),
            Endpoint::Quic(_) => Endpoint::Quic(authority),
            Endpoint::Unix(p) => Endpoint::Unix(p.clone()),
        }
    }

    /// `host:port` for network schemes.
    pub(crate) fn authority(&self) -> Option<&str> {
        match self {
            Endpoint::Tcp(a)
            | Endpoint::Tcps(a)
            | Endpoint::Http(a)
            | Endpoint::Https(a)
            | Endpoint::Grpc(a)
            | Endpoint::Grpcs(a)
            | Endpoint::Quic(a) => Some(a),
            Endpoint::Unix(_) => None,
        }
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Endpoint::Tcp(a) => write!(f, "tcp://{a}"),
            Endpoint::Tcps(a) => write!(f, "tcps://{a}"),
            Endpoint::Http(a) => write!(f, "http://{a}"),
            Endpoint::Https(a) => write!(f, "https://{a}"),
            Endpoint::Grpc(a) => write!(f, "grpc://{a}"),
            Endpoint::Grpcs(a) => write!(f, "grpcs://{a}"),
            Endpoint::Quic(a) => write!(f, "quic://{a}"),
            Endpoint::Unix(p) => write!(f, "unix://{}", p.display()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::looks_like_tls;

    #[test]
    fn parses_every_scheme_and_rejects_the_rest() {
        assert_eq!(
            Endpoint::parse("tcp://127.0.0.1:0").unwrap(),
            Endpoint::Tcp("127.0.0.1:0".into())
        );
        assert_eq!(
            Endpoint::parse("tcp://localhost:80/").unwrap(),
            Endpoint::Tcp("localhost:80".into())
        );
        assert_eq!(
            Endpoint::parse("tcps://h:1").unwrap(),
            Endpoint::Tcps("h:1".into())
        );
        assert_eq!(
            Endpoint::parse("http://h:1").unwrap(),
            Endpoint::Http("h:1".into())
        );
        assert_eq!(
            Endpoint::parse("https://h:1/").unwrap(),
            Endpoint::Https("h:1".into())
        );
        assert_eq!(
            Endpoint::parse("grpc://h:1").unwrap(),
            Endpoint::Grpc("h:1".into())
        );
        assert_eq!(
            Endpoint::parse("grpcs://h:1/").unwrap(),
            Endpoint::Grpcs("h:1".into())
        );
        assert_eq!(
            Endpoint::parse("unix:///tmp/k.sock").unwrap(),
            Endpoint::Unix("/tmp/k.sock".into())
        );
        for bad in [
            "127.0.0.1:80",
            "tcp://",
            "tcp://host",
            "ftp://h:1",
            "tcp://h:1/x",
            "unix://relative.sock",
            "unix://",
            "http://h",
            "grpc://h",
            "grpcs://h:1/Svc",
        ] {
            let e = Endpoint::parse(bad).unwrap_err();
            assert_eq!(e.kind(), Kind::Config, "{bad}");
        }
    }

    #[test]
    fn default_ports_written_out_and_ipv6_hosts() {
        assert_eq!(
            Endpoint::parse("http://h:80").unwrap(),
            Endpoint::Http("h:80".into())
        );
        assert_eq!(
            Endpoint::parse("https://[::1]:443").unwrap(),
            Endpoint::Https("[::1]:443".into())
        );
        assert_eq!(
            Endpoint::parse("tcp://[::1]:7").unwrap(),
            Endpoint::Tcp("[::1]:7".into())
        );
        for bad in [
            "https://[::1]",
            "tcp://h:1?x=1",
            "tcp://h:1#f",
            "tcp://user:pw@h:1",
            "tcp://h:99999",
            "unix:///tmp/a?b.sock",
            "unix:///tmp/../etc/x.sock",
            "unix:///tmp/%2e%2e/etc/x.sock",
        ] {
            assert!(Endpoint::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(
            Endpoint::parse("unix:///tmp/my sock").unwrap(),
            Endpoint::Unix("/tmp/my sock".into())
        );
    }

    #[test]
    fn every_url_form_the_docs_use() {
        let ok = [
            (
                "tcp://127.0.0.1:7000",
                Endpoint::Tcp("127.0.0.1:7000".into()),
            ),
            (
                "TCP://LocalHost:7000/",
                Endpoint::Tcp("localhost:7000".into()),
            ),
            (
                "tcps://my-host.example_1.com:1",
                Endpoint::Tcps("my-host.example_1.com:1".into()),
            ),
            ("tcp://0.0.0.0:65535", Endpoint::Tcp("0.0.0.0:65535".into())),
            ("http://[::]:80", Endpoint::Http("[::]:80".into())),
            // IPv6 literals in their canonical (shortest) form, as `Display` writes them.
            (
                "https://[0:0:0:0:0:0:0:1]:8443/",
                Endpoint::Https("[::1]:8443".into()),
            ),
            (
                "grpc://[FE80::1]:50051",
                Endpoint::Grpc("[fe80::1]:50051".into()),
            ),
            (
                "unix:///run/app.sock",
                Endpoint::Unix("/run/app.sock".into()),
            ),
            (
                "unix:///tmp/my%20sock",
                Endpoint::Unix("/tmp/my sock".into()),
            ),
        ];
        for (url, want) in ok {
            assert_eq!(Endpoint::parse(url).unwrap(), want, "{url}");
        }
        // Each refusal says why, names the form expected, and never drops a part silently.
        for (bad, why) in [
            ("tcp://h", "port must be written out"),
            ("tcp://h:", "number from 0 to 65535"),
            ("tcp://h:65536", "number from 0 to 65535"),
            ("tcp://h:+1", "number from 0 to 65535"),
            ("tcp://:80", "host is missing"),
            ("tcp://::1:80", "IPv6 address goes in brackets"),
            ("tcp://[::1]", "port must be written out"),
            ("tcp://[::g]:1", "not an IPv6 address"),
            ("tcp://bücher.example:1", "punycode"),
            ("tcp://a b:1", "only letters, digits"),
            ("tcp://h%41:1", "only letters, digits"),
            ("http://user@h:1", "credentials"),
            ("http://h:1/path", "path, a query or a fragment"),
            ("http://h:1?q", "path, a query or a fragment"),
            ("unix://run/app.sock", "three slashes"),
            ("unix:///tmp/./x", "`.` and `..`"),
            ("unix:///tmp/x#f", "query or a fragment"),
            ("unix:///", "path is missing"),
        ] {
            let e = Endpoint::parse(bad).unwrap_err();
            assert_eq!(e.kind(), Kind::Config, "{bad}");
            let text = e.to_string();
            assert!(text.contains(why), "{bad}: {text}");
            assert!(text.contains("expected"), "{bad}: {text}");
        }
    }

    #[test]
    fn unknown_scheme_names_the_cause_and_the_fix() {
        for bad in ["ftp://h:1", "htp://h:1", "quics://h:1", "wss://h:1"] {
            let text = Endpoint::parse(bad).unwrap_err().to_string();
            assert!(text.contains("unknown scheme"), "{text}");
            // The schemes keel knows, and the feature that enables each optional one.
            for known in [
                "tcp://", "tcps://", "unix:///", "http://", "https://", "grpc://", "quic://",
            ] {
                assert!(text.contains(known), "{bad}: {text}");
            }
            assert!(text.contains("feature `tls`"), "{text}");
            assert!(text.contains("feature `http`"), "{text}");
            assert!(text.contains("feature `quic`"), "{text}");
        }
        let text = Endpoint::parse("127.0.0.1:7000").unwrap_err().to_string();
        assert!(text.contains("no scheme"), "{text}");
        assert!(text.contains("tcp://127.0.0.1:7000"), "{text}");
        let text = Endpoint::parse("tcp:/h:1").unwrap_err().to_string();
        assert!(text.contains("`tcp:` is followed by `//`"), "{text}");
    }

    #[test]
    fn host_part_and_alpn() {
        for (url, host) in [
            ("tcps://localhost:1", "localhost"),
            ("tcps://127.0.0.1:443", "127.0.0.1"),
            ("https://[::1]:8443", "::1"),
        ] {
            assert_eq!(Endpoint::parse(url).unwrap().host(), host, "{url}");
        }
        assert_eq!(Endpoint::parse("tcps://h:1").unwrap().alpn(), &[b"keel/1"]);
        // gRPC is HTTP/2 only.
        let grpcs = Endpoint::parse("grpcs://h:1").unwrap();
        assert_eq!(grpcs.alpn(), &[&b"h2"[..]]);
        assert!(grpcs.is_tls());
        assert_eq!(grpcs.http_scheme(), "https");
        assert_eq!(Endpoint::parse("grpc://h:1").unwrap().http_scheme(), "http");
        assert_eq!(
            Endpoint::parse("https://h:1").unwrap().alpn(),
            &[&b"h2"[..], &b"http/1.1"[..]]
        );
        let quic = Endpoint::parse("quic://h:1").unwrap();
        assert_eq!(quic, Endpoint::Quic("h:1".into()));
        assert!(quic.is_tls());
        assert_eq!(quic.protocol(), Protocol::Quic);
        assert_eq!(quic.alpn(), &[&b"keel/1"[..]]);
        assert!(looks_like_tls(&[0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x0a]));
        assert!(!looks_like_tls(b"KEEL"));
    }

    #[test]
    fn display_round_trips() {
        for url in [
            "tcp://h:1",
            "tcps://h:1",
            "unix:///tmp/x.sock",
            "http://h:1",
            "https://h:1",
            "grpc://h:1",
            "quic://h:1",
            "grpcs://h:1",
        ] {
            assert_eq!(Endpoint::parse(url).unwrap().to_string(), url);
        }
    }
}
