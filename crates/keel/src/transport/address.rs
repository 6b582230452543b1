//! Endpoint URLs (see the table in [`crate::transport`]), parsed with the `url` crate.

use std::fmt;
use std::path::PathBuf;

use url::Url;

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
}

const SCHEMES: &str = "tcp, tcps, unix, http, https, grpc, grpcs";

fn config(message: String) -> Error {
    Error::new(Kind::Config, message)
}

/// `host:port` of a network URL. The port must be written out, even for `http` and `https`
/// (the `url` crate forgets a default port once parsed, so the text is checked for one).
fn host_port(input: &str, url: &Url) -> Result<String, Error> {
    let expected = || config(format!("`{input}`: expected {}://host:port", url.scheme()));
    let authority = input.split_once("://").map_or("", |(_, rest)| rest);
    let authority = authority.split(['/', '?', '#']).next().unwrap_or("");
    let written_port = authority
        .rsplit_once(':')
        .is_some_and(|(_, port)| !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()));
    let extra = !matches!(url.path(), "" | "/") || has_extras(url);
    match (url.host_str(), url.port_or_known_default()) {
        (Some(host), Some(port)) if written_port && !extra && !host.is_empty() => {
            Ok(format!("{host}:{port}"))
        }
        _ => Err(expected()),
    }
}

/// A query, a fragment or credentials: nothing keel would use, so an error rather than silently
/// dropped.
fn has_extras(url: &Url) -> bool {
    url.query().is_some()
        || url.fragment().is_some()
        || !url.username().is_empty()
        || url.password().is_some()
}

impl Endpoint {
    /// Parses an endpoint URL (see the module docs for the schemes).
    pub(crate) fn parse(input: &str) -> Result<Endpoint, Error> {
        let url = Url::parse(input).map_err(|e| {
            config(format!(
                "`{input}` is not an endpoint URL (expected e.g. tcp://host:port): {e}"
            ))
        })?;
        match url.scheme() {
            "tcp" => host_port(input, &url).map(Endpoint::Tcp),
            "tcps" => host_port(input, &url).map(Endpoint::Tcps),
            "http" => host_port(input, &url).map(Endpoint::Http),
            "https" => host_port(input, &url).map(Endpoint::Https),
            "grpc" => host_port(input, &url).map(Endpoint::Grpc),
            "grpcs" => host_port(input, &url).map(Endpoint::Grpcs),
            "unix" => {
                let expected = || config(format!("`{input}`: expected unix:///absolute/path"));
                if url.host_str().is_some_and(|h| !h.is_empty()) || has_extras(&url) {
                    return Err(expected());
                }
                // The path as written: `url` percent-encodes spaces and the like (decoded back
                // here) and removes `.` and `..` segments (refused: the socket path would not
                // be the one written).
                let written = input.split_once("://").map_or("", |(_, rest)| rest);
                let path = percent_encoding::percent_decode_str(url.path())
                    .decode_utf8()
                    .map_err(|_| expected())?;
                if path.len() < 2 || written.split('/').any(|seg| seg == "." || seg == "..") {
                    return Err(expected());
                }
                Ok(Endpoint::Unix(PathBuf::from(path.into_owned())))
            }
            other => Err(config(format!(
                "`{input}`: unsupported scheme `{other}` (supported: {SCHEMES})"
            ))),
        }
    }

    /// The protocol spoken over this endpoint.
    pub(crate) fn protocol(&self) -> Protocol {
        match self {
            Endpoint::Tcp(_) | Endpoint::Tcps(_) | Endpoint::Unix(_) => Protocol::Wire,
            Endpoint::Http(_) | Endpoint::Https(_) => Protocol::Http,
            Endpoint::Grpc(_) | Endpoint::Grpcs(_) => Protocol::Grpc,
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
            Endpoint::Tcps(_) | Endpoint::Https(_) | Endpoint::Grpcs(_)
        )
    }

    /// The ALPN protocols of this endpoint's binding, most preferred first: what a host accepts,
    /// and what a client offers unless told otherwise.
    pub(crate) fn alpn(&self) -> &'static [&'static [u8]] {
        match self.protocol() {
            Protocol::Wire => &[ALPN_KEEL],
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
            | Endpoint::Grpcs(a) => Some(a),
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
        ] {
            assert!(Endpoint::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(
            Endpoint::parse("unix:///tmp/my sock").unwrap(),
            Endpoint::Unix("/tmp/my sock".into())
        );
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
            "grpcs://h:1",
        ] {
            assert_eq!(Endpoint::parse(url).unwrap().to_string(), url);
        }
    }
}
