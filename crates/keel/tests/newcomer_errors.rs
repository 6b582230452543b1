//! The errors a newcomer meets when a URL and a port do not match (a keel-wire client at an
//! HTTP port and the other way round, TLS at a plain port) or a port is taken: each says what
//! went wrong and what to do. The tests assert the key words of both, not whole sentences.
//! Real sockets on port 0.

mod common;

use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Asserts that `text` contains every one of `words`.
fn says(text: &str, words: &[&str]) {
    for w in words {
        assert!(text.contains(w), "{w:?} not in {text:?}");
    }
}

/// An HTTP server that is not keel (as nginx does to bytes it cannot parse): reads what comes,
/// answers `HTTP/1.1 400 Bad Request` and closes. Returns its `host:port`.
async fn foreign_http_server() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 1024];
                let _ = s.read(&mut buf).await;
                let answer = "HTTP/1.1 400 Bad Request\r\nServer: nginx\r\n\
                              Content-Length: 0\r\nConnection: close\r\n\r\n";
                let _ = s.write_all(answer.as_bytes()).await;
                let _ = s.shutdown().await;
                // Read to the end: closing with bytes unread would reset the connection, and
                // the reset could overtake the answer.
                while matches!(s.read(&mut buf).await, Ok(n) if n > 0) {}
            });
        }
    });
    addr
}

#[test]
fn a_port_in_use_names_the_address_and_the_way_out() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("tcp://{}", taken.local_addr().unwrap());
    let err = keel::Host::builder()
        .service(ProbeServer::new(ProbeImpl::default()))
        .endpoint(url.as_str())
        .start()
        .unwrap_err();
    let msg = err.to_string();
    assert!(msg.starts_with("invalid configuration: "), "{msg}");
    // Cause: the address, in use, held by another process; fix: stop it, another port, port 0.
    says(
        &msg,
        &[
            &url,
            "in use",
            "Another process",
            "stop it",
            "another port",
            "port 0",
        ],
    );
    // An HTTP endpoint says the same.
    let url = format!("http://{}", taken.local_addr().unwrap());
    let err = keel::Host::builder()
        .service(ProbeServer::new(ProbeImpl::default()))
        .endpoint(url.as_str())
        .start()
        .unwrap_err();
    says(
        &err.to_string(),
        &[&url, "in use", "another port", "port 0"],
    );
}

#[cfg(unix)]
#[test]
fn a_unix_socket_in_use_says_another_host_listens_there() {
    let url = Binding::Unix.listen_url();
    let host = Binding::Unix.host_at(|h| h, &url);
    let err = keel::Host::builder()
        .service(ProbeServer::new(ProbeImpl::default()))
        .endpoint(url.as_str())
        .start()
        .unwrap_err();
    says(
        &err.to_string(),
        &["in use", "Another host", "another path"],
    );
    host.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keel_wire_client_at_an_http_port_is_told_to_use_http() {
    let host = Binding::Http1.host();
    let authority = host.url().strip_prefix("http://").unwrap().to_string();
    let foreign = foreign_http_server().await;
    for (who, authority) in [("keel", &authority), ("nginx-like", &foreign)] {
        let c = ProbeClient::new(keel::Channel::new(&format!("tcp://{authority}")).unwrap());
        let err = c.open().await.unwrap_err();
        // The kind is unchanged: the client could not connect to a keel-wire host.
        assert!(err.is_connection(), "{who}: {err}");
        assert_eq!(err.status_code(), Some(keel::StatusCode::Unavailable));
        // Cause: the peer speaks HTTP; fix: an http:// URL, or the keel-wire port.
        says(
            &err.to_string(),
            &["answered in HTTP", "not keel-wire", "http://", "port"],
        );
        let err = c.echo("x".into()).await.unwrap_err();
        says(&err.to_string(), &["answered in HTTP", "http://"]);
    }
    host.shutdown_async().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_client_at_a_keel_wire_port_is_told_to_use_tcp() {
    let host = Binding::Tcp.host();
    let authority = host.url().strip_prefix("tcp://").unwrap().to_string();
    let url = format!("http://{authority}");
    for binding in [Binding::Http2, Binding::Http1] {
        let c = ProbeClient::new(binding.channel(&url));
        let err = c.echo("x".into()).await.unwrap_err();
        // Cause: the port speaks keel-wire; fix: a tcp:// URL, or the HTTP port.
        says(&err.to_string(), &["speaks keel-wire, not HTTP", "tcp://"]);
    }
    // Any HTTP client (curl, a browser) reads the same as the body of a 400.
    let mut s = tokio::net::TcpStream::connect(&authority).await.unwrap();
    s.write_all(b"GET /Probe HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 400 "), "{answer}");
    says(&answer, &["speaks keel-wire, not HTTP", "tcp://"]);
    // The host still serves keel-wire.
    let c = Binding::Tcp.client(&host).await;
    assert_eq!(c.echo("still".into()).await.unwrap(), "still");
    host.shutdown_async().await;
}

/// curl over HTTP/2 (prior knowledge) at a keel-wire port reads the 400 and exits, with a
/// small body and with one larger than HTTP/2's initial window (300 KB): the host answers once
/// the request has been sent whole (giving the window for it), since curl drops an answer that
/// comes while it still sends; and it does not hold the client until its handshake timeout.
#[test]
fn curl_over_http2_at_a_keel_wire_port_reads_the_refusal() {
    if !common::have_curl() {
        return;
    }
    // A handshake timeout far above curl's own limit: curl must finish on the host's answer.
    let host = Binding::Tcp.host_with(|h| h.handshake_timeout(std::time::Duration::from_secs(120)));
    let url = host.url().replace("tcp://", "http://") + "/Probe/echo";
    let big = std::env::temp_dir().join(format!("keel-newcomer-{}.bin", std::process::id()));
    std::fs::write(&big, vec![b'x'; 300_000]).unwrap();
    let big_arg = format!("@{}", big.display());
    for i in 0..20 {
        let body = if i % 2 == 0 {
            "{\"s\":\"x\"}"
        } else {
            &big_arg
        };
        let out = std::process::Command::new("curl")
            .args(["-sS", "--http2-prior-knowledge", "--max-time", "60"])
            .args(["-w", "\n%{http_code}", "--data-binary", body, &url])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "curl failed ({:?}): {err}",
            out.status
        );
        assert!(text.ends_with("\n400"), "{text}");
        says(&text, &["speaks keel-wire, not HTTP", "tcp://"]);
    }
    let _ = std::fs::remove_file(&big);
    host.shutdown();
}

/// An HTTP/2 client that sends its first request's HEADERS and then nothing (a body it
/// streams, slowly) is answered after a short pause, not at the host's handshake timeout: the
/// answer, a RST_STREAM NO_ERROR (stop sending) and a GOAWAY.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http2_request_still_sending_is_answered_after_a_pause() {
    let host = Binding::Tcp.host_with(|h| h.handshake_timeout(std::time::Duration::from_secs(120)));
    let authority = host.url().strip_prefix("tcp://").unwrap().to_string();
    let mut s = tokio::net::TcpStream::connect(&authority).await.unwrap();
    let mut hello = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    // SETTINGS (empty), then HEADERS on stream 1, END_HEADERS only: `:method: POST` (static
    // index 3).
    hello.extend_from_slice(&[0, 0, 0, 0x04, 0, 0, 0, 0, 0]);
    hello.extend_from_slice(&[0, 0, 1, 0x01, 0x04, 0, 0, 0, 1, 0x83]);
    s.write_all(&hello).await.unwrap();
    let mut answer = Vec::new();
    let read = tokio::time::timeout(std::time::Duration::from_secs(30), async {
        let mut chunk = [0u8; 4096];
        loop {
            let n = s.read(&mut chunk).await.unwrap();
            if n == 0 {
                break;
            }
            answer.extend_from_slice(&chunk[..n]);
        }
    })
    .await;
    assert!(
        read.is_ok(),
        "not answered and closed within 30 s (handshake timeout 120 s)"
    );
    says(
        &String::from_utf8_lossy(&answer),
        &["speaks keel-wire, not HTTP"],
    );
    // RST_STREAM on stream 1 with NO_ERROR, then GOAWAY.
    let rst = [0, 0, 4, 0x03, 0, 0, 0, 0, 1, 0, 0, 0, 0];
    assert!(answer.windows(13).any(|w| w == rst), "{answer:?}");
    assert!(
        answer.windows(4).any(|w| w == [0, 0, 8, 0x07]),
        "{answer:?}"
    );
    host.shutdown_async().await;
}

#[cfg(feature = "tls")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_client_at_a_plain_http_port_is_told_it_does_not_serve_tls() {
    let foreign = foreign_http_server().await;
    let host = Binding::Http1.host();
    let keel_http = host.url().strip_prefix("http://").unwrap().to_string();
    // A foreign HTTP server answers the TLS hello in plaintext; keel's closes the connection.
    for (authority, cause) in [(&foreign, "plaintext, not TLS"), (&keel_http, "closed")] {
        for scheme in ["tcps", "https"] {
            let url = format!("{scheme}://{authority}");
            let c = ProbeClient::new(
                keel::Channel::builder(&url)
                    .tls(test_cert().client_tls().unwrap())
                    .build()
                    .unwrap(),
            );
            let err = c.open().await.unwrap_err();
            assert!(err.is_connection(), "{err}");
            says(
                &err.to_string(),
                &[cause, "not", "serve TLS on this port", "http://"],
            );
        }
    }
    host.shutdown_async().await;
}

#[cfg(feature = "tls")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tcps_client_at_an_https_port_is_told_the_scheme_it_serves() {
    let host = Binding::Https.host();
    let url = host.url().replace("https://", "tcps://");
    let c = ProbeClient::new(Binding::Tcps.channel(&url));
    let err = c.open().await.unwrap_err();
    assert!(err.is_connection(), "{err}");
    says(
        &err.to_string(),
        &[
            "serves TLS on this port, but for another protocol than tcps://",
            "https://",
        ],
    );
    host.shutdown_async().await;
}

/// Inside async code (`#[tokio::main]`), a host that cannot start returns its error: the
/// runtime it built is put away without blocking, not dropped with tokio's panic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_port_in_use_inside_async_code_is_an_error_not_a_panic() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("tcp://{}", taken.local_addr().unwrap());
    let err = keel::Host::builder()
        .service(ProbeServer::new(ProbeImpl::default()))
        .endpoint(url.as_str())
        .start()
        .unwrap_err();
    says(&err.to_string(), &[&url, "in use", "another port"]);
}
