//! Cross-origin calls from browsers (CORS): which web origins may call a host, the preflight
//! answer, and the headers that let a page read an answer.

use std::time::Duration;

use http::header::{
    ACCESS_CONTROL_ALLOW_CREDENTIALS, ACCESS_CONTROL_ALLOW_HEADERS, ACCESS_CONTROL_ALLOW_METHODS,
    ACCESS_CONTROL_ALLOW_ORIGIN, ACCESS_CONTROL_EXPOSE_HEADERS, ACCESS_CONTROL_MAX_AGE,
    ACCESS_CONTROL_REQUEST_HEADERS, ACCESS_CONTROL_REQUEST_METHOD, ORIGIN, VARY,
};
use http::{HeaderMap, HeaderValue, Method};

use crate::core::error::{Error, Kind};

/// Which web origins may call a host from a browser, for
/// [`HostBuilder::cors`](crate::host::HostBuilder::cors). Off unless set: without it a browser page
/// from another origin cannot read a keel host's answers (its preflight gets 405).
///
/// With it, the HTTP binding answers a browser's preflight (`OPTIONS` with `Origin` and
/// `Access-Control-Request-Method`) for an allowed origin with `204 No Content`: methods
/// `GET, POST`, the request headers the browser asked for (metadata travels as headers), and
/// [`max_age`](Cors::max_age). A preflight from any other origin gets `403` (status
/// `permission_denied`). Every answer to an allowed origin carries
/// `Access-Control-Allow-Origin` and exposes its headers (`keel-status`, reply metadata, ...)
/// to the page.
///
/// gRPC-Web (GRPC.md) needs nothing more: its request headers (`x-grpc-web`,
/// `x-user-agent`, `grpc-timeout`, `content-type`, metadata) are allowed because a preflight
/// allows every header the browser asks for, and every gRPC-Web answer exposes
/// `grpc-status`, `grpc-message` and `grpc-status-details-bin` (where a Trailers-Only answer
/// carries its status) besides its other headers. Requests without `Origin` (curl, keel's clients) are not affected.
///
/// ```
/// # fn main() -> Result<(), keel::Error> {
/// let cors = keel::http::Cors::allow_origins(["https://app.example.com", "http://localhost:5173"])?
///     .max_age(std::time::Duration::from_secs(600));
/// # let _ = cors;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Cors {
    /// `None`: any origin.
    origins: Option<Vec<HeaderValue>>,
    max_age: Duration,
    credentials: bool,
}

impl Cors {
    /// Pages from these origins (`scheme://host[:port]`, as browsers send them in `Origin`,
    /// compared exactly) may call the host. Fails for a value that is not an origin.
    pub fn allow_origins<I, S>(origins: I) -> Result<Cors, Error>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let origins = origins
            .into_iter()
            .map(|o| {
                let o = o.as_ref();
                let valid = (o.starts_with("http://") || o.starts_with("https://"))
                    && !o.ends_with('/')
                    && o.split("://").nth(1).is_some_and(|rest| {
                        !rest.is_empty() && !rest.contains('/') && !rest.contains(char::is_whitespace)
                    });
                match HeaderValue::from_str(o) {
                    Ok(v) if valid => Ok(v),
                    _ => Err(Error::new(
                        Kind::Config,
                        format!(
                            "`{o}` is not a web origin: write scheme://host[:port], e.g. https://app.example.com"
                        ),
                    )),
                }
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Cors {
            origins: Some(origins),
            ..Cors::allow_any_origin()
        })
    }

    /// Pages from every origin may call the host (`Access-Control-Allow-Origin: *`). For a
    /// public API without cookies; with [`allow_credentials`](Cors::allow_credentials) the
    /// caller's origin is echoed instead, as browsers require.
    pub fn allow_any_origin() -> Cors {
        Cors {
            origins: None,
            max_age: Duration::from_secs(600),
            credentials: false,
        }
    }

    /// How long a browser may cache a preflight's answer. Default: 10 min (Chromium caps it at
    /// 2 h, Firefox at 24 h).
    pub fn max_age(mut self, max_age: Duration) -> Cors {
        self.max_age = max_age;
        self
    }

    /// Whether pages may send credentials (cookies, HTTP authentication) with their calls
    /// (`Access-Control-Allow-Credentials: true`). Default: no.
    pub fn allow_credentials(mut self, allow: bool) -> Cors {
        self.credentials = allow;
        self
    }

    fn allows(&self, origin: &HeaderValue) -> bool {
        self.origins
            .as_ref()
            .is_none_or(|list| list.iter().any(|o| o == origin))
    }

    /// The `Access-Control-Allow-Origin` value for an allowed `origin`.
    fn allow_origin_value(&self, origin: &HeaderValue) -> HeaderValue {
        if self.origins.is_none() && !self.credentials {
            HeaderValue::from_static("*")
        } else {
            origin.clone()
        }
    }

    /// `Some(answer)` if `method` and `headers` are a CORS preflight: `Ok(headers)` of a 204
    /// for an allowed origin, `Err(message)` for a 403 otherwise.
    pub(crate) fn preflight(
        &self,
        method: &Method,
        headers: &HeaderMap,
    ) -> Option<Result<HeaderMap, String>> {
        if method != Method::OPTIONS {
            return None;
        }
        let origin = headers.get(ORIGIN)?;
        let requested = headers.get(ACCESS_CONTROL_REQUEST_METHOD)?;
        if !self.allows(origin) {
            return Some(Err(format!(
                "origin {} may not call this host (CORS: not among its allowed origins)",
                String::from_utf8_lossy(origin.as_bytes())
            )));
        }
        if requested != "POST" && requested != "GET" {
            return Some(Err(format!(
                "{} is not a method of this host (CORS: GET and POST)",
                String::from_utf8_lossy(requested.as_bytes())
            )));
        }
        let mut out = HeaderMap::new();
        out.insert(ACCESS_CONTROL_ALLOW_ORIGIN, self.allow_origin_value(origin));
        out.insert(
            ACCESS_CONTROL_ALLOW_METHODS,
            HeaderValue::from_static("GET, POST"),
        );
        if let Some(asked) = headers.get(ACCESS_CONTROL_REQUEST_HEADERS) {
            // Metadata travels as headers of the application's choosing: allow what is asked.
            out.insert(ACCESS_CONTROL_ALLOW_HEADERS, asked.clone());
        }
        if let Ok(v) = HeaderValue::from_str(&self.max_age.as_secs().to_string()) {
            out.insert(ACCESS_CONTROL_MAX_AGE, v);
        }
        if self.credentials {
            out.insert(
                ACCESS_CONTROL_ALLOW_CREDENTIALS,
                HeaderValue::from_static("true"),
            );
        }
        out.insert(
            VARY,
            HeaderValue::from_static(
                "origin, access-control-request-method, access-control-request-headers",
            ),
        );
        Some(Ok(out))
    }

    /// Marks an answer to a request from `origin` (its `Origin` header) readable by the page, if
    /// the origin is allowed: `Access-Control-Allow-Origin`, and every header of the answer
    /// exposed.
    pub(crate) fn decorate(&self, origin: Option<&HeaderValue>, headers: &mut HeaderMap) {
        if self.origins.is_some() || self.credentials {
            // The answer depends on the caller's origin: caches must keep them apart.
            headers.append(VARY, HeaderValue::from_static("origin"));
        }
        let Some(origin) = origin.filter(|o| self.allows(o)) else {
            return;
        };
        let mut exposed: Vec<&str> = headers
            .keys()
            .map(|k| k.as_str())
            .filter(|k| !is_safelisted_response_header(k))
            .collect();
        let grpc_web = headers
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|ct| ct.to_ascii_lowercase().starts_with("application/grpc-web"));
        if grpc_web {
            // gRPC-Web clients look for the status in the headers of a Trailers-Only answer;
            // expose its names whether or not this answer has them.
            for name in GRPC_WEB_EXPOSED {
                if !exposed.contains(&name) {
                    exposed.push(name);
                }
            }
        }
        if !exposed.is_empty() {
            if let Ok(v) = HeaderValue::from_str(&exposed.join(", ")) {
                headers.insert(ACCESS_CONTROL_EXPOSE_HEADERS, v);
            }
        }
        headers.insert(ACCESS_CONTROL_ALLOW_ORIGIN, self.allow_origin_value(origin));
        if self.credentials {
            headers.insert(
                ACCESS_CONTROL_ALLOW_CREDENTIALS,
                HeaderValue::from_static("true"),
            );
        }
    }
}

/// What every gRPC-Web answer exposes to the page.
const GRPC_WEB_EXPOSED: [&str; 3] = ["grpc-status", "grpc-message", "grpc-status-details-bin"];

/// Response headers a page may read without being told (the Fetch standard's CORS-safelisted
/// response header names), and the CORS headers themselves.
fn is_safelisted_response_header(name: &str) -> bool {
    matches!(
        name,
        "cache-control"
            | "content-language"
            | "content-length"
            | "content-type"
            | "expires"
            | "last-modified"
            | "pragma"
            | "vary"
    ) || name.starts_with("access-control-")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn preflight_headers(origin: &str, method: &str, asked: Option<&str>) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(ORIGIN, HeaderValue::from_str(origin).unwrap());
        h.insert(
            ACCESS_CONTROL_REQUEST_METHOD,
            HeaderValue::from_str(method).unwrap(),
        );
        if let Some(a) = asked {
            h.insert(
                ACCESS_CONTROL_REQUEST_HEADERS,
                HeaderValue::from_str(a).unwrap(),
            );
        }
        h
    }

    #[test]
    fn origins_are_checked_when_configured() {
        assert!(Cors::allow_origins(["https://app.example.com", "http://localhost:5173"]).is_ok());
        for bad in [
            "app.example.com",
            "https://app.example.com/",
            "https://",
            "ftp://x",
            "https://a b",
        ] {
            assert!(Cors::allow_origins([bad]).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_preflight_from_an_allowed_origin_is_answered() {
        let cors = Cors::allow_origins(["http://a.test:8000"]).unwrap();
        let h = preflight_headers("http://a.test:8000", "POST", Some("content-type, x-user"));
        let out = cors.preflight(&Method::OPTIONS, &h).unwrap().unwrap();
        assert_eq!(out[ACCESS_CONTROL_ALLOW_ORIGIN], "http://a.test:8000");
        assert_eq!(out[ACCESS_CONTROL_ALLOW_METHODS], "GET, POST");
        assert_eq!(out[ACCESS_CONTROL_ALLOW_HEADERS], "content-type, x-user");
        assert_eq!(out[ACCESS_CONTROL_MAX_AGE], "600");
        assert!(out.get(ACCESS_CONTROL_ALLOW_CREDENTIALS).is_none());
        // Other origins, other methods: refused. Not a preflight: not answered here.
        let other = preflight_headers("http://b.test:8000", "POST", None);
        assert!(cors.preflight(&Method::OPTIONS, &other).unwrap().is_err());
        let put = preflight_headers("http://a.test:8000", "PUT", None);
        assert!(cors.preflight(&Method::OPTIONS, &put).unwrap().is_err());
        assert!(cors.preflight(&Method::POST, &h).is_none());
        assert!(cors
            .preflight(&Method::OPTIONS, &HeaderMap::new())
            .is_none());
    }

    #[test]
    fn any_origin_is_a_star_unless_credentials() {
        let h = preflight_headers("http://x.test", "POST", None);
        let any = Cors::allow_any_origin();
        let out = any.preflight(&Method::OPTIONS, &h).unwrap().unwrap();
        assert_eq!(out[ACCESS_CONTROL_ALLOW_ORIGIN], "*");
        let creds = Cors::allow_any_origin().allow_credentials(true);
        let out = creds.preflight(&Method::OPTIONS, &h).unwrap().unwrap();
        assert_eq!(out[ACCESS_CONTROL_ALLOW_ORIGIN], "http://x.test");
        assert_eq!(out[ACCESS_CONTROL_ALLOW_CREDENTIALS], "true");
    }

    #[test]
    fn answers_to_allowed_origins_expose_their_headers() {
        let cors = Cors::allow_origins(["http://a.test"]).unwrap();
        let mut headers = HeaderMap::new();
        headers.insert("content-type", HeaderValue::from_static("application/json"));
        headers.insert("keel-status", HeaderValue::from_static("not_found"));
        headers.insert("x-request-id", HeaderValue::from_static("7"));
        let origin = HeaderValue::from_static("http://a.test");
        cors.decorate(Some(&origin), &mut headers);
        assert_eq!(headers[ACCESS_CONTROL_ALLOW_ORIGIN], "http://a.test");
        assert_eq!(
            headers[ACCESS_CONTROL_EXPOSE_HEADERS],
            "keel-status, x-request-id"
        );
        assert_eq!(headers[VARY], "origin");
        // Another origin: nothing that lets its page read the answer.
        let mut headers = HeaderMap::new();
        cors.decorate(
            Some(&HeaderValue::from_static("http://b.test")),
            &mut headers,
        );
        assert!(headers.get(ACCESS_CONTROL_ALLOW_ORIGIN).is_none());
        assert_eq!(headers[VARY], "origin");
    }

    #[test]
    fn grpc_web_answers_expose_the_status_headers() {
        let cors = Cors::allow_origins(["http://a.test"]).unwrap();
        let h = preflight_headers(
            "http://a.test",
            "POST",
            Some("content-type, x-grpc-web, x-user-agent, grpc-timeout"),
        );
        let out = cors.preflight(&Method::OPTIONS, &h).unwrap().unwrap();
        assert_eq!(
            out[ACCESS_CONTROL_ALLOW_HEADERS],
            "content-type, x-grpc-web, x-user-agent, grpc-timeout"
        );
        let mut headers = HeaderMap::new();
        headers.insert(
            "content-type",
            HeaderValue::from_static("application/grpc-web+proto"),
        );
        headers.insert("grpc-accept-encoding", HeaderValue::from_static("gzip"));
        let origin = HeaderValue::from_static("http://a.test");
        cors.decorate(Some(&origin), &mut headers);
        assert_eq!(
            headers[ACCESS_CONTROL_EXPOSE_HEADERS],
            "grpc-accept-encoding, grpc-status, grpc-message, grpc-status-details-bin"
        );
    }
}
