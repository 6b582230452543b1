//! TLS beyond the binding matrix: mutual TLS, trust failures, no plaintext fallback, server name
//! overrides, configuration errors, PEM files, ALPN, and handshakes that never hold up the accept
//! loop. Real sockets on port 0.
#![cfg(feature = "tls")]

mod common;

use std::sync::Arc;

use common::*;
use keel::tls::{self, ClientTls, ServerTls};
use rustls::pki_types::pem::PemObject as _;

/// A certificate authority that issues leaf certificates, for mutual TLS with real chains.
struct Ca {
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
    pem: String,
}

impl Ca {
    fn new(name: &str) -> Ca {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        let key = rcgen::KeyPair::generate().unwrap();
        let pem = params.self_signed(&key).unwrap().pem();
        Ca {
            issuer: rcgen::Issuer::new(params, key),
            pem,
        }
    }

    /// A leaf certificate for `name`: (chain PEM, leaf then this CA; key PEM).
    fn issue(&self, name: &str) -> (String, String) {
        let params = rcgen::CertificateParams::new(vec![name.to_string()]).unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        (format!("{}{}", cert.pem(), self.pem), key.serialize_pem())
    }
}

fn tls_host(tls: ServerTls) -> keel::Host {
    keel::Host::builder()
        .service(ProbeServer::new(ProbeImpl::default()))
        .endpoint("tcps://127.0.0.1:0")
        .tls(tls)
        .start()
        .expect("host starts")
}

fn client(url: &str, tls: ClientTls) -> ProbeClient {
    ProbeClient::new(
        keel::Channel::builder(url)
            .tls(tls)
            .build()
            .expect("channel"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_admits_only_clients_with_a_certificate_from_the_trusted_ca() {
    let clients_ca = Ca::new("clients");
    let other_ca = Ca::new("someone else");
    let host = tls_host(
        test_cert()
            .server_tls()
            .unwrap()
            .require_client_certs(clients_ca.pem.as_bytes())
            .unwrap(),
    );

    let (chain, key) = clients_ca.issue("good-client");
    let good = client(
        host.url(),
        test_cert()
            .client_tls()
            .unwrap()
            .with_identity(chain.as_bytes(), key.as_bytes())
            .unwrap(),
    );
    assert_eq!(good.echo("admitted".into()).await.unwrap(), "admitted");

    let anonymous = client(host.url(), test_cert().client_tls().unwrap());
    let err = anonymous.open().await.unwrap_err();
    assert!(err.is_connection(), "{err}");
    assert!(err.to_string().contains("CertificateRequired"), "{err}");

    let (chain, key) = other_ca.issue("bad-client");
    let stranger = client(
        host.url(),
        test_cert()
            .client_tls()
            .unwrap()
            .with_identity(chain.as_bytes(), key.as_bytes())
            .unwrap(),
    );
    let err = stranger.open().await.unwrap_err();
    assert!(err.is_connection(), "{err}");
    assert!(err.to_string().contains("UnknownCA"), "{err}");

    // The refused clients never got past the handshake; the admitted one still works.
    assert_eq!(good.echo("still".into()).await.unwrap(), "still");
    assert_eq!(host.stats().connections_opened, 1);
    host.shutdown_async().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untrusted_server_certificate_is_a_clear_connection_error() {
    let host = tls_host(test_cert().server_tls().unwrap());
    let stranger = tls::self_signed(&["localhost", "127.0.0.1"]).unwrap();
    let c = client(host.url(), stranger.client_tls().unwrap());
    let err = c.echo("x".into()).await.unwrap_err();
    assert!(err.is_connection(), "{err}");
    assert!(
        err.to_string()
            .contains("invalid peer certificate: UnknownIssuer"),
        "{err}"
    );
    assert!(err.to_string().contains(host.url()), "{err}");

    // Trusted, but not issued for the name checked.
    let c = client(
        host.url(),
        test_cert()
            .client_tls()
            .unwrap()
            .with_server_name("elsewhere.example"),
    );
    let err = c.open().await.unwrap_err();
    assert!(err.is_connection(), "{err}");
    assert!(err.to_string().contains("not valid for name"), "{err}");
    host.shutdown_async().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_tls_settings_a_client_trusts_only_the_system_roots() {
    let host = tls_host(test_cert().server_tls().unwrap());
    let c = ProbeClient::new(keel::Channel::new(host.url()).unwrap());
    let err = c.open().await.unwrap_err();
    // A self-signed certificate is in no system store; a machine without one says so.
    assert!(
        (err.is_connection() && err.to_string().contains("UnknownIssuer"))
            || err.to_string().contains("no system root certificates"),
        "{err}"
    );
    host.shutdown_async().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn there_is_no_plaintext_fallback_either_way() {
    let host = tls_host(test_cert().server_tls().unwrap());
    let plain_url = host.url().replace("tcps://", "tcp://");
    for _ in 0..3 {
        let plain = ProbeClient::new(keel::Channel::new(&plain_url).unwrap());
        let err = plain.open().await.unwrap_err();
        assert!(err.is_connection(), "{err}");
        assert!(err.to_string().contains("TLS"), "{err}");
        // The fix: a tcps:// URL.
        assert!(
            err.to_string().contains("Connect with a tcps:// URL"),
            "{err}"
        );
    }
    // The host keeps serving TLS clients.
    let c = Binding::Tcps.client(&host).await;
    assert_eq!(c.echo("fine".into()).await.unwrap(), "fine");
    assert_eq!(host.stats().connections_opened, 1);
    host.shutdown_async().await;

    // A TLS client to a plain host.
    let plain_host = Binding::Tcp.host();
    let tls_url = plain_host.url().replace("tcp://", "tcps://");
    let c = client(&tls_url, test_cert().client_tls().unwrap());
    let err = c.open().await.unwrap_err();
    assert!(err.is_connection(), "{err}");
    assert!(err.to_string().contains("TLS"), "{err}");
    // The cause (the host closed the handshake, no TLS here) and the fix (a tcp:// URL).
    for words in [
        "closed the connection during the TLS handshake",
        "tcp:// for keel-wire",
    ] {
        assert!(err.to_string().contains(words), "{words:?} not in {err}");
    }
    plain_host.shutdown_async().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_server_name_overrides_the_name_checked() {
    let cert = tls::self_signed(&["localhost"]).unwrap();
    let host = tls_host(cert.server_tls().unwrap());
    assert!(host.url().starts_with("tcps://127.0.0.1:"));

    let by_address = client(host.url(), cert.client_tls().unwrap());
    let err = by_address.open().await.unwrap_err();
    assert!(err.to_string().contains("not valid for name"), "{err}");
    // The cause names the name checked and the certificate's; the fix, both ways out.
    for words in [
        "not valid for `127.0.0.1`, the name this client checked",
        "localhost",
        "Connect by a name the certificate has",
        "ClientTls::with_server_name",
    ] {
        assert!(err.to_string().contains(words), "{words:?} not in {err}");
    }

    let by_name = client(
        host.url(),
        cert.client_tls().unwrap().with_server_name("localhost"),
    );
    assert_eq!(by_name.echo("named".into()).await.unwrap(), "named");

    let invalid = client(
        host.url(),
        cert.client_tls().unwrap().with_server_name("not a name"),
    );
    let err = invalid.open().await.unwrap_err();
    assert!(
        err.to_string().contains("not a valid TLS server name"),
        "{err}"
    );
    host.shutdown_async().await;
}

#[test]
fn a_tls_endpoint_without_a_certificate_fails_to_start() {
    let err = keel::Host::builder()
        .service(ProbeServer::new(ProbeImpl::default()))
        .endpoint("tcp://127.0.0.1:0")
        .endpoint("tcps://127.0.0.1:0")
        .start()
        .unwrap_err();
    let msg = err.to_string();
    assert!(msg.starts_with("invalid configuration"), "{msg}");
    assert!(msg.contains("tcps://127.0.0.1:0"), "{msg}");
    assert!(msg.contains("HostBuilder::tls"), "{msg}");
}

#[test]
fn server_tls_from_pem_rejects_garbage() {
    let cert = test_cert();
    let err = ServerTls::from_pem(b"garbage", cert.key_pem.as_bytes()).unwrap_err();
    assert!(
        err.to_string().contains("no certificate found in PEM"),
        "{err}"
    );
    let err = ServerTls::from_pem(cert.cert_pem.as_bytes(), b"garbage").unwrap_err();
    assert!(err.to_string().contains("no private key"), "{err}");
    let other = tls::self_signed(&["localhost"]).unwrap();
    let err = ServerTls::from_pem(cert.cert_pem.as_bytes(), other.key_pem.as_bytes()).unwrap_err();
    assert!(err.to_string().contains("does not match"), "{err}");
    let broken = cert.cert_pem.replace("-----END CERTIFICATE-----", "");
    let err = ServerTls::from_pem(broken.as_bytes(), cert.key_pem.as_bytes()).unwrap_err();
    assert!(err.to_string().contains("invalid PEM"), "{err}");
}

#[test]
fn pem_files_round_trip() {
    let dir = std::env::temp_dir().join(format!("keel-tls-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cert = tls::self_signed(&["localhost", "127.0.0.1"]).unwrap();
    let (cert_path, key_path) = (dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::write(&cert_path, &cert.cert_pem).unwrap();
    std::fs::write(&key_path, &cert.key_pem).unwrap();

    let host = tls_host(ServerTls::from_pem_files(&cert_path, &key_path).unwrap());
    let channel = keel::Channel::builder(host.url())
        .tls(ClientTls::from_roots_pem_file(&cert_path).unwrap())
        .build()
        .unwrap();
    let c = ProbeBlockingClient::new(channel);
    assert_eq!(c.echo("from files".into()).unwrap(), "from files");
    host.shutdown();

    let missing = dir.join("missing.pem");
    let err = ServerTls::from_pem_files(&missing, &key_path).unwrap_err();
    assert!(err.to_string().contains("missing.pem"), "{err}");
    let err = ClientTls::from_roots_pem_file(&missing).unwrap_err();
    assert!(err.to_string().contains("missing.pem"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_client_does_not_hold_up_other_connections() {
    let host = Binding::Tcps.host_with(|h| h.worker_threads(1));
    let addr = host.url().strip_prefix("tcps://").unwrap().to_string();
    // Connects and never says a word: its handshake waits in its own task.
    let silent = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let also_silent = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let c = Binding::Tcps.client(&host).await;
    assert_eq!(c.echo("not blocked".into()).await.unwrap(), "not blocked");
    let other = Binding::Tcps.client(&host).await;
    assert_eq!(other.echo("me neither".into()).await.unwrap(), "me neither");
    assert_eq!(host.stats().connections_opened, 2);
    drop((silent, also_silent));
    host.shutdown_async().await;
}

/// A raw rustls handshake with a tcps host offering `alpn`; the protocol agreed.
async fn raw_handshake(url: &str, alpn: &[&[u8]]) -> std::io::Result<Option<Vec<u8>>> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_slice_iter(test_cert().cert_pem.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    let tcp = tokio::net::TcpStream::connect(url.strip_prefix("tcps://").unwrap()).await?;
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await?;
    Ok(tls.get_ref().1.alpn_protocol().map(<[u8]>::to_vec))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcps_agrees_on_keel_alpn_and_refuses_other_protocols() {
    let host = Binding::Tcps.host();
    let agreed = raw_handshake(host.url(), &[b"h2", b"keel/1"])
        .await
        .unwrap();
    assert_eq!(agreed.as_deref(), Some(&b"keel/1"[..]));
    let err = raw_handshake(host.url(), &[b"h2", b"http/1.1"])
        .await
        .unwrap_err();
    assert!(err.to_string().contains("NoApplicationProtocol"), "{err}");
    host.shutdown_async().await;
}

/// What the host saw of its caller under mutual TLS.
#[keel::contract]
pub trait Peer {
    /// The caller's certificate chain as the handler's context reports it (DER).
    async fn certificates(&self, ctx: keel::Context) -> Vec<Vec<u8>>;
}

struct PeerImpl;

impl Peer for PeerImpl {
    async fn certificates(&self, ctx: keel::Context) -> Vec<Vec<u8>> {
        ctx.peer_certificates()
            .map(|chain| chain.iter().map(|c| c.to_vec()).collect())
            .unwrap_or_default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_sees_the_clients_certificate_under_mutual_tls_on_both_tls_bindings() {
    let clients_ca = Ca::new("clients");
    let (chain, key) = clients_ca.issue("client-7");
    let expected: Vec<Vec<u8>> =
        rustls::pki_types::CertificateDer::pem_slice_iter(chain.as_bytes())
            .map(|c| c.unwrap().to_vec())
            .collect();
    for url in ["tcps://127.0.0.1:0", "https://127.0.0.1:0"] {
        let host = keel::Host::builder()
            .service(PeerServer::new(PeerImpl))
            .endpoint(url)
            .tls(
                test_cert()
                    .server_tls()
                    .unwrap()
                    .require_client_certs(clients_ca.pem.as_bytes())
                    .unwrap(),
            )
            .start()
            .unwrap();
        let tls = test_cert()
            .client_tls()
            .unwrap()
            .with_identity(chain.as_bytes(), key.as_bytes())
            .unwrap();
        let client = PeerClient::new(keel::Channel::builder(host.url()).tls(tls).build().unwrap());
        let seen = client.certificates().await.unwrap();
        assert_eq!(
            seen.first(),
            expected.first(),
            "{url}: the client's own certificate first"
        );
        assert!(!seen.is_empty());
        host.shutdown_async().await;
    }
    // Without mutual TLS a handler sees no certificate.
    let host = keel::Host::builder()
        .service(PeerServer::new(PeerImpl))
        .endpoint("tcps://127.0.0.1:0")
        .tls(test_cert().server_tls().unwrap())
        .start()
        .unwrap();
    let client = PeerClient::new(
        keel::Channel::builder(host.url())
            .tls(test_cert().client_tls().unwrap())
            .build()
            .unwrap(),
    );
    assert!(client.certificates().await.unwrap().is_empty());
    host.shutdown_async().await;
}

/// The warnings keel logged (this test binary's logger).
static WARNINGS: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

struct Warnings;

impl log::Log for Warnings {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        metadata.level() <= log::Level::Warn
    }
    fn log(&self, record: &log::Record<'_>) {
        if self.enabled(record.metadata()) {
            WARNINGS.lock().unwrap().push(record.args().to_string());
        }
    }
    fn flush(&self) {}
}

/// The certificate a TLS endpoint presents to a new connection now (the leaf, DER), checked
/// against `ca_pem`.
async fn presented_leaf(url: &str, ca_pem: &str) -> Vec<u8> {
    let (scheme, addr) = url.split_once("://").unwrap();
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let alpn: &[u8] = if scheme == "tcps" { b"keel/1" } else { b"h2" };
    config.alpn_protocols = vec![alpn.to_vec()];
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
        .unwrap();
    tls.get_ref().1.peer_certificates().unwrap()[0].to_vec()
}

/// The first certificate of a PEM chain, DER.
fn leaf_of(chain_pem: &str) -> Vec<u8> {
    let first = rustls::pki_types::CertificateDer::pem_slice_iter(chain_pem.as_bytes())
        .next()
        .unwrap();
    first.unwrap().to_vec()
}

/// Certificate files laid out as Kubernetes' secret volumes and cert-manager lay them out: the
/// host reads `dir/live/cert.pem` and `dir/live/key.pem`, where `live` is a symbolic link to
/// one generation's directory, swapped in one rename.
struct CertDir {
    dir: std::path::PathBuf,
    generation: u32,
}

impl CertDir {
    fn new(name: &str) -> CertDir {
        let dir = std::env::temp_dir().join(format!("keel-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        CertDir { dir, generation: 0 }
    }

    fn cert(&self) -> std::path::PathBuf {
        self.dir.join("live/cert.pem")
    }

    fn key(&self) -> std::path::PathBuf {
        self.dir.join("live/key.pem")
    }

    /// Makes `(chain, key)` the live files, at once.
    fn publish(&mut self, chain: &str, key: &str) {
        self.generation += 1;
        let name = format!("gen-{}", self.generation);
        let gen = self.dir.join(&name);
        std::fs::create_dir_all(&gen).unwrap();
        std::fs::write(gen.join("cert.pem"), chain).unwrap();
        std::fs::write(gen.join("key.pem"), key).unwrap();
        let tmp = self.dir.join("live.tmp");
        let _ = std::fs::remove_file(&tmp);
        std::os::unix::fs::symlink(&name, &tmp).unwrap();
        std::fs::rename(&tmp, self.dir.join("live")).unwrap();
    }
}

impl Drop for CertDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Certificate rotation under load: a host serving tcps and https while its certificate files
/// are replaced 100 times, with 8 clients calling (and opening new connections) throughout:
/// no call fails, new connections see each new certificate, and a corrupt file is refused,
/// logged, and the certificate before it kept.
#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificate_files_replaced_100_times_under_load_lose_no_call() {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

    let _ = log::set_logger(&Warnings).map(|()| log::set_max_level(log::LevelFilter::Warn));
    let ca = Ca::new("rotation CA");
    let mut files = CertDir::new("tls-rotation");
    let (chain, key) = ca.issue("127.0.0.1");
    files.publish(&chain, &key);
    let host = keel::Host::builder()
        .service(ProbeServer::new(ProbeImpl::default()))
        .endpoint("tcps://127.0.0.1:0")
        .endpoint("https://127.0.0.1:0")
        .tls(ServerTls::from_pem_files(files.cert(), files.key()).unwrap())
        .watch_tls_files(std::time::Duration::from_millis(5))
        .runtime(tokio::runtime::Handle::current())
        .start()
        .unwrap();
    let trust = || ClientTls::from_roots_pem(ca.pem.as_bytes()).unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let calls = Arc::new(AtomicU64::new(0));
    let clients: Vec<_> = (0..8)
        .map(|i| {
            let url = host.urls()[i % 2].clone();
            let (stop, calls, tls) = (stop.clone(), calls.clone(), trust());
            tokio::spawn(async move {
                let mut failures = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    // A new connection (and handshake) for every 20 calls.
                    let c = client(&url, tls.clone());
                    for n in 0..20 {
                        match c.echo(format!("{i}-{n}")).await {
                            Ok(echoed) => assert_eq!(echoed, format!("{i}-{n}")),
                            Err(e) => failures.push(format!("{url}: {e}")),
                        }
                        calls.fetch_add(1, Ordering::Relaxed);
                    }
                }
                failures
            })
        })
        .collect();

    for round in 1..=100 {
        let (chain, key) = ca.issue("127.0.0.1");
        files.publish(&chain, &key);
        assert!(
            eventually(|| host.stats().tls_reloads == round).await,
            "reload {round} not taken: {:?}, warnings {:?}",
            host.stats(),
            WARNINGS.lock().unwrap()
        );
        if round % 25 == 0 {
            for url in host.urls() {
                assert_eq!(presented_leaf(url, &ca.pem).await, leaf_of(&chain), "{url}");
            }
        }
    }
    // A corrupt certificate: refused, logged, the last good one kept.
    let (good, _) = ca.issue("127.0.0.1");
    let last = presented_leaf(host.url(), &ca.pem).await;
    files.publish("-----BEGIN CERTIFICATE-----\nnot base64\n", "garbage");
    assert!(eventually(|| host.stats().tls_reload_failures == 1).await);
    assert_eq!(host.stats().tls_reloads, 100);
    assert_eq!(presented_leaf(host.url(), &ca.pem).await, last);
    assert_ne!(leaf_of(&good), last);
    let logged = WARNINGS.lock().unwrap().clone();
    assert!(
        logged
            .iter()
            .any(|w| w.contains("refused") && w.contains("certificate")),
        "{logged:?}"
    );

    stop.store(true, Ordering::Relaxed);
    for c in clients {
        let failures = c.await.unwrap();
        assert!(failures.is_empty(), "{failures:?}");
    }
    assert!(
        calls.load(Ordering::Relaxed) >= 8 * 20,
        "the clients made their calls"
    );
    host.shutdown_async().await;
}

#[cfg(unix)]
#[test]
fn watching_tls_files_needs_settings_read_from_files_and_reload_needs_a_tls_endpoint() {
    let err = keel::Host::builder()
        .service(ProbeServer::new(ProbeImpl::default()))
        .endpoint("tcps://127.0.0.1:0")
        .tls(test_cert().server_tls().unwrap())
        .watch_tls_files(std::time::Duration::from_secs(1))
        .start()
        .unwrap_err();
    assert!(err.to_string().contains("from_pem_files"), "{err}");
    let mut dir = CertDir::new("tls-zero-interval");
    let cert = test_cert();
    dir.publish(&cert.cert_pem, &cert.key_pem);
    let err = keel::Host::builder()
        .service(ProbeServer::new(ProbeImpl::default()))
        .endpoint("tcps://127.0.0.1:0")
        .tls(ServerTls::from_pem_files(dir.cert(), dir.key()).unwrap())
        .watch_tls_files(std::time::Duration::ZERO)
        .start()
        .unwrap_err();
    assert!(err.to_string().contains("longer than zero"), "{err}");
    let host = keel::Host::builder()
        .service(ProbeServer::new(ProbeImpl::default()))
        .endpoint("tcp://127.0.0.1:0")
        .start()
        .unwrap();
    let err = host
        .reload_tls(test_cert().server_tls().unwrap())
        .unwrap_err();
    assert!(err.to_string().contains("no TLS endpoint"), "{err}");
    host.shutdown();
}

/// Both sides rotate under mutual TLS: the host moves to a certificate from a new CA and trusts
/// only clients of a new client CA; a connection open before keeps working; a client whose
/// settings are reloaded (`ClientTls::reload`) reaches the host again from its channels, even
/// one made before the reload.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_and_client_rotate_their_certificates_under_mutual_tls() {
    let (server_ca, new_server_ca) = (Ca::new("server CA"), Ca::new("new server CA"));
    let (client_ca, new_client_ca) = (Ca::new("client CA"), Ca::new("new client CA"));
    let server_tls = |ca: &Ca, trusted: &str| {
        let (chain, key) = ca.issue("127.0.0.1");
        ServerTls::from_pem(chain.as_bytes(), key.as_bytes())
            .unwrap()
            .require_client_certs(trusted.as_bytes())
            .unwrap()
    };
    let client_tls = |server: &Ca, client: &Ca| {
        let (chain, key) = client.issue("a-client");
        ClientTls::from_roots_pem(server.pem.as_bytes())
            .unwrap()
            .with_identity(chain.as_bytes(), key.as_bytes())
            .unwrap()
    };
    let both_client_cas = format!("{}{}", client_ca.pem, new_client_ca.pem);
    let host = tls_host(server_tls(&server_ca, &both_client_cas));
    let tls = client_tls(&server_ca, &client_ca);
    let before = client(host.url(), tls.clone());
    assert_eq!(before.echo("one".into()).await.unwrap(), "one");

    host.reload_tls(server_tls(&new_server_ca, &new_client_ca.pem))
        .unwrap();
    // The connection open before the reload keeps its certificate and goes on.
    assert_eq!(before.echo("two".into()).await.unwrap(), "two");
    // A new connection meets the new certificate, which these settings do not trust yet.
    let after = client(host.url(), tls.clone());
    let err = after.echo("three".into()).await.unwrap_err();
    assert!(err.is_connection(), "{err}");

    tls.reload(&client_tls(&new_server_ca, &new_client_ca));
    // Channels given these settings (or clones) connect with the new ones from now on.
    assert_eq!(after.echo("four".into()).await.unwrap(), "four");
    let fresh = client(host.url(), tls.clone());
    assert_eq!(fresh.echo("five".into()).await.unwrap(), "five");
    assert_eq!(host.stats().tls_reloads, 1);
    host.shutdown_async().await;
}
