//! TLS for every network binding (feature `tls`, on by default), with rustls and its `ring`
//! provider.
//!
//! - `tcps://host:port` runs the keel wire protocol over TLS (ALPN `keel/1`);
//! - `https://host:port` runs HTTP/1.1 or HTTP/2 over TLS (ALPN `h2`, `http/1.1`), with the
//!   `http` feature;
//! - `quic://host:port` runs keel's calls on QUIC streams, TLS 1.3 inside QUIC's handshake
//!   (ALPN `keel/1`), with the `quic` feature.
//!
//! A host gets its certificate from a [`ServerTls`] ([`HostBuilder::tls`]); a client decides whom
//! to trust with a [`ClientTls`] ([`ChannelBuilder::tls`]; without one, it trusts the
//! system's root certificates). Mutual TLS is [`ServerTls::require_client_certs`] on the host and
//! [`ClientTls::with_identity`] on the client. There is never a plaintext fallback: a plain
//! client cannot talk to a TLS endpoint, nor a TLS client to a plain one.
//!
//! The TLS handshake runs in each connection's own task, within
//! [`HostConfig::handshake_timeout`], so a slow or silent peer delays only itself.
//!
//! For development and tests, `self_signed` (feature `dev-cert`, off by default) makes a
//! certificate and both sides' settings:
//!
//! ```
//! # #[keel::contract] pub trait Greeter { fn hello(&self, name: String) -> String; }
//! # struct G;
//! # impl Greeter for G { fn hello(&self, name: String) -> String { format!("hello {name}") } }
//! let cert = keel::tls::self_signed(&["localhost", "127.0.0.1"])?;
//! let host = keel::Host::builder()
//!     .service(GreeterServer::new(G))
//!     .endpoint("tcps://127.0.0.1:0")
//!     .tls(cert.server_tls()?)
//!     .start()?;
//!
//! let channel = keel::Channel::builder(host.url()).tls(cert.client_tls()?).build()?;
//! let client = GreeterBlockingClient::new(channel);
//! assert_eq!(client.hello("tls".into())?, "hello tls");
//! host.shutdown();
//! # Ok::<(), keel::Error>(())
//! ```
//!
//! In production, load the host's certificate chain and key from PEM files
//! ([`ServerTls::from_pem_files`]); clients either trust the system roots (the default) or a
//! private CA ([`ClientTls::from_roots_pem_file`]). A renewed certificate (cert-manager, ACME)
//! is taken without a restart: the host watches its files
//! ([`HostBuilder::watch_tls_files`](crate::host::HostBuilder::watch_tls_files)) or is given new
//! settings ([`Host::reload_tls`](crate::Host::reload_tls)); new handshakes use the new
//! certificate at once, connections already open keep theirs, and files that do not make a
//! usable certificate are refused with a logged warning while the current one stays. A client's
//! trust roots and certificate are replaced with [`ClientTls::reload`]. Anything else rustls can do is available
//! through the escape hatch [`rustls_unstable`], outside keel's semver guarantees.
//!
//! [`HostBuilder::tls`]: crate::host::HostBuilder::tls
//! [`ChannelBuilder::tls`]: crate::client::ChannelBuilder::tls
//! [`HostConfig::handshake_timeout`]: crate::host::HostConfig::handshake_timeout

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::WebPkiClientVerifier;
use rustls::RootCertStore;

use super::{Io, SecuredStream};
use crate::core::error::{Error, Kind};

/// The escape hatch to rustls, for what keel's own TLS settings do not cover (custom
/// certificate verifiers, key logging, session stores, ...).
///
/// **Not covered by keel's semver guarantees**: these items name rustls types, and follow the
/// rustls version keel uses (0.23 today), which a minor release of keel may change. Everything
/// else in [`crate::tls`] is keel's own and stays stable.
pub mod rustls_unstable {
    use std::sync::Arc;

    use super::{ClientTls, ServerTls};

    /// The rustls that keel uses (a config from another version of rustls does not fit).
    pub use rustls;

    /// Host settings from a rustls config. keel replaces its ALPN protocols per binding
    /// (`keel/1` on `tcps`; `h2` and `http/1.1` on `https`); everything else is used as given.
    /// [`ServerTls::require_client_certs`] is not available on such settings: configure client
    /// authentication on the rustls config instead.
    pub fn server_tls(config: Arc<rustls::ServerConfig>) -> ServerTls {
        ServerTls::from_rustls(config)
    }

    /// Client settings from a rustls config. keel replaces its ALPN protocols per binding;
    /// everything else is used as given. [`ClientTls::with_identity`] is not available on
    /// such settings: configure the client certificate on the rustls config instead.
    pub fn client_tls(config: Arc<rustls::ClientConfig>) -> ClientTls {
        ClientTls::from_rustls(config)
    }
}

/// The crypto provider used everywhere: `ring`, passed explicitly so that no process-wide
/// default provider needs installing.
fn provider() -> Arc<CryptoProvider> {
    static PROVIDER: OnceLock<Arc<CryptoProvider>> = OnceLock::new();
    PROVIDER
        .get_or_init(|| Arc::new(rustls::crypto::ring::default_provider()))
        .clone()
}

fn config_err(message: impl Into<String>) -> Error {
    Error::new(Kind::Config, message)
}

fn rustls_err(what: &str, e: rustls::Error) -> Error {
    config_err(format!("{what}: {e}")).with_source(e)
}

fn read_file(what: &str, path: &Path) -> Result<Vec<u8>, Error> {
    std::fs::read(path).map_err(|e| {
        config_err(format!("cannot read the {what} {}: {e}", path.display())).with_source(e)
    })
}

/// Every certificate in `pem`, in order; an error if there is none or the PEM is malformed.
fn certs_from_pem(pem: &[u8], what: &str) -> Result<Vec<CertificateDer<'static>>, Error> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| config_err(format!("{what}: invalid PEM: {e}")).with_source(e))?;
    if certs.is_empty() {
        return Err(config_err(format!(
            "{what}: no certificate found in PEM (expected a -----BEGIN CERTIFICATE----- block)"
        )));
    }
    Ok(certs)
}

/// The first private key in `pem` (PKCS#8, PKCS#1 or SEC1).
fn key_from_pem(pem: &[u8], what: &str) -> Result<PrivateKeyDer<'static>, Error> {
    PrivateKeyDer::from_pem_slice(pem).map_err(|e| match e {
        rustls::pki_types::pem::Error::NoItemsFound => config_err(format!(
            "{what}: no private key found in PEM (expected a -----BEGIN PRIVATE KEY----- block, \
             or an RSA or EC one)"
        )),
        e => config_err(format!("{what}: invalid PEM: {e}")).with_source(e),
    })
}

fn roots_from_pem(pem: &[u8], what: &str) -> Result<Arc<RootCertStore>, Error> {
    let mut roots = RootCertStore::empty();
    for cert in certs_from_pem(pem, what)? {
        roots
            .add(cert)
            .map_err(|e| rustls_err(&format!("{what}: unusable root certificate"), e))?;
    }
    Ok(Arc::new(roots))
}

/// A certificate chain and its private key, kept to rebuild a config with other settings.
struct Identity {
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
}

impl Identity {
    fn from_pem(cert_chain_pem: &[u8], key_pem: &[u8], whose: &str) -> Result<Identity, Error> {
        Ok(Identity {
            chain: certs_from_pem(cert_chain_pem, &format!("{whose} certificate chain"))?,
            key: key_from_pem(key_pem, &format!("{whose} key"))?,
        })
    }
}

/// A host's TLS settings: its certificate chain and key, and whether clients must present a
/// certificate. Give it to [`HostBuilder::tls`](crate::host::HostBuilder::tls).
///
/// Cheap to clone. Its `Debug` output shows no key material.
#[derive(Clone)]
pub struct ServerTls {
    config: Arc<rustls::ServerConfig>,
    /// `None` for [`rustls_unstable::server_tls`], which cannot be rebuilt.
    identity: Option<Arc<Identity>>,
    /// Meaningful only with `identity` (rustls does not tell for a config from elsewhere).
    client_certs_required: bool,
    /// The files [`ServerTls::from_pem_files`] read, and the client roots
    /// [`ServerTls::require_client_certs`] was given: what a host watching the files needs to
    /// make the settings again from their new contents.
    files: Option<Arc<PemFiles>>,
}

/// Where a [`ServerTls`] read its certificate chain and key, and what they held then.
#[derive(Debug)]
struct PemFiles {
    chain: PathBuf,
    key: PathBuf,
    client_roots_pem: Option<Vec<u8>>,
    /// What the settings were made from: a watcher compares the files with it, so a change
    /// made before it first looks is not missed.
    made_from: PemContents,
}

/// The contents of a [`ServerTls`]'s files as last read: compared to tell a change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PemContents {
    chain: Vec<u8>,
    key: Vec<u8>,
}

impl fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("ServerTls");
        match &self.identity {
            Some(id) => d
                .field("certificates", &id.chain.len())
                .field("client_certs_required", &self.client_certs_required),
            None => d.field("rustls_unstable", &true),
        };
        d.finish_non_exhaustive()
    }
}

impl ServerTls {
    /// Settings from a PEM certificate chain (the host's certificate first, then any
    /// intermediates) and a PEM private key (PKCS#8, PKCS#1 or SEC1).
    ///
    /// Fails with a configuration error if there is no certificate or no key, if the PEM is
    /// malformed, or if the key does not belong to the first certificate.
    ///
    /// ```
    /// let cert = keel::tls::self_signed(&["localhost"])?;
    /// let tls = keel::tls::ServerTls::from_pem(cert.cert_pem.as_bytes(), cert.key_pem.as_bytes())?;
    ///
    /// let err = keel::tls::ServerTls::from_pem(b"not pem", cert.key_pem.as_bytes()).unwrap_err();
    /// assert!(err.to_string().contains("no certificate found in PEM"), "{err}");
    /// # Ok::<(), keel::Error>(())
    /// ```
    pub fn from_pem(cert_chain_pem: &[u8], key_pem: &[u8]) -> Result<ServerTls, Error> {
        let identity = Arc::new(Identity::from_pem(cert_chain_pem, key_pem, "server")?);
        ServerTls::build(identity, None)
    }

    /// [`ServerTls::from_pem`] with the chain and the key read from files (which may be the
    /// same file). A host given these settings can watch the files and take a renewed
    /// certificate without a restart ([`HostBuilder::watch_tls_files`](crate::host::HostBuilder::watch_tls_files)).
    pub fn from_pem_files(
        cert_chain: impl AsRef<Path>,
        key: impl AsRef<Path>,
    ) -> Result<ServerTls, Error> {
        let (chain, key) = (cert_chain.as_ref(), key.as_ref());
        let made_from = PemContents::read(chain, key)?;
        let mut tls = ServerTls::from_pem(&made_from.chain, &made_from.key)?;
        tls.files = Some(Arc::new(PemFiles {
            chain: chain.to_path_buf(),
            key: key.to_path_buf(),
            client_roots_pem: None,
            made_from,
        }));
        Ok(tls)
    }

    /// What the files of settings made by [`ServerTls::from_pem_files`] held when these
    /// settings were made from them.
    pub(crate) fn made_from(&self) -> Option<&PemContents> {
        self.files.as_ref().map(|f| &f.made_from)
    }

    /// What the files of settings made by [`ServerTls::from_pem_files`] hold now (`None` for
    /// other settings).
    pub(crate) fn read_files(&self) -> Option<Result<PemContents, Error>> {
        self.files
            .as_ref()
            .map(|f| PemContents::read(&f.chain, &f.key))
    }

    /// These settings made again from `contents` of their files: the same client
    /// authentication, the certificate chain and key the files hold now.
    pub(crate) fn remake(&self, contents: &PemContents) -> Result<ServerTls, Error> {
        let files = self.files.as_ref().ok_or_else(|| {
            config_err("only settings read by ServerTls::from_pem_files can be read again")
        })?;
        let tls = ServerTls::from_pem(&contents.chain, &contents.key)?;
        let mut tls = match &files.client_roots_pem {
            Some(roots) => tls.require_client_certs(roots)?,
            None => tls,
        };
        tls.files = Some(Arc::new(PemFiles {
            chain: files.chain.clone(),
            key: files.key.clone(),
            client_roots_pem: files.client_roots_pem.clone(),
            made_from: contents.clone(),
        }));
        Ok(tls)
    }

    /// Requires every client to present a certificate signed by one of `trusted_roots_pem`
    /// (mutual TLS). Clients without one, or with one from another CA, fail their handshake.
    ///
    /// Not available for [`rustls_unstable::server_tls`] settings: configure client authentication
    /// on the rustls config instead.
    ///
    /// ```
    /// let server = keel::tls::self_signed(&["localhost"])?;
    /// let client = keel::tls::self_signed(&["my-client"])?;
    /// let tls = server
    ///     .server_tls()?
    ///     .require_client_certs(client.cert_pem.as_bytes())?;
    /// // Clients then need `with_identity(client.cert_pem.as_bytes(), client.key_pem.as_bytes())`.
    /// # Ok::<(), keel::Error>(())
    /// ```
    pub fn require_client_certs(self, trusted_roots_pem: &[u8]) -> Result<ServerTls, Error> {
        let identity = self.identity.ok_or_else(|| {
            config_err(
                "require_client_certs needs ServerTls settings made from PEM; with \
                 rustls_unstable::server_tls, configure client authentication on the rustls \
                 config",
            )
        })?;
        let roots = roots_from_pem(trusted_roots_pem, "trusted client roots")?;
        let verifier = WebPkiClientVerifier::builder_with_provider(roots, provider())
            .build()
            .map_err(|e| {
                config_err(format!("cannot verify client certificates: {e}")).with_source(e)
            })?;
        let mut tls = ServerTls::build(identity, Some(verifier))?;
        tls.files = self.files.map(|f| {
            Arc::new(PemFiles {
                chain: f.chain.clone(),
                key: f.key.clone(),
                client_roots_pem: Some(trusted_roots_pem.to_vec()),
                made_from: f.made_from.clone(),
            })
        });
        Ok(tls)
    }

    /// Settings from a rustls config (see [`rustls_unstable::server_tls`]).
    fn from_rustls(config: Arc<rustls::ServerConfig>) -> ServerTls {
        ServerTls {
            config,
            identity: None,
            client_certs_required: false,
            files: None,
        }
    }

    fn build(
        identity: Arc<Identity>,
        verifier: Option<Arc<dyn rustls::server::danger::ClientCertVerifier>>,
    ) -> Result<ServerTls, Error> {
        let builder = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| rustls_err("TLS protocol versions", e))?;
        let client_certs_required = verifier.is_some();
        let builder = match verifier {
            Some(v) => builder.with_client_cert_verifier(v),
            None => builder.with_no_client_auth(),
        };
        let config = builder
            .with_single_cert(identity.chain.clone(), identity.key.clone_key())
            .map_err(|e| match e {
                rustls::Error::InconsistentKeys(_) => config_err(format!(
                    "the private key does not match the server certificate \
                     (the first certificate of the chain): {e}"
                ))
                .with_source(e),
                e => rustls_err("unusable server certificate or key", e),
            })?;
        Ok(ServerTls {
            config: Arc::new(config),
            identity: Some(identity),
            client_certs_required,
            files: None,
        })
    }

    /// An acceptor that agrees on one of `alpn` (the binding's protocols).
    pub(crate) fn acceptor(&self, alpn: &[&[u8]]) -> tokio_rustls::TlsAcceptor {
        let mut config = (*self.config).clone();
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        tokio_rustls::TlsAcceptor::from(Arc::new(config))
    }
}

#[cfg(feature = "quic")]
impl ServerTls {
    /// Whether a `quic://` endpoint with these settings accepts 0-RTT data (see
    /// [`quic_config`](ServerTls::quic_config)).
    pub(crate) fn quic_accepts_0rtt(&self) -> bool {
        match self.identity {
            Some(_) => !self.client_certs_required,
            None => self.config.max_early_data_size == u32::MAX,
        }
    }

    /// The TLS settings of a `quic://` endpoint speaking `alpn`: TLS 1.3 only (QUIC has no
    /// other), and 0-RTT accepted on resumption unless clients must present a certificate (a
    /// call's context carries the verified client certificate, which 0-RTT data arrives before).
    /// A config from [`rustls_unstable::server_tls`] keeps its own `max_early_data_size`.
    pub(crate) fn quic_config(
        &self,
        alpn: &[&[u8]],
    ) -> Result<quinn::crypto::rustls::QuicServerConfig, Error> {
        let mut config = (*self.config).clone();
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        if self.identity.is_some() {
            // QUIC allows only 0 (no 0-RTT) or u32::MAX here (RFC 9001, section 4.6.1).
            config.max_early_data_size = if self.client_certs_required {
                0
            } else {
                u32::MAX
            };
        }
        quinn::crypto::rustls::QuicServerConfig::try_from(config).map_err(|e| {
            config_err(format!(
                "these TLS settings cannot serve QUIC (it needs TLS 1.3 with an AES-128-GCM \
                 suite): {e}"
            ))
        })
    }
}

/// TLS sessions (tickets) one [`ClientTls`] keeps for `quic://` resumption.
#[cfg(feature = "quic")]
const QUIC_SESSIONS: usize = 32;

#[cfg(feature = "quic")]
impl ClientTls {
    /// The TLS settings of a `quic://` connection to `host` offering `alpn`, resuming sessions
    /// from (and storing new tickets in) these settings' QUIC session cache, with 0-RTT
    /// enabled: the binding decides which calls may go as 0-RTT data. Returns the config and
    /// the server name to check.
    pub(crate) fn quic_config(
        &self,
        host: &str,
        alpn: &[&[u8]],
    ) -> Result<(quinn::crypto::rustls::QuicClientConfig, String), Error> {
        let name = self.server_name.as_deref().unwrap_or(host).to_string();
        ServerName::try_from(name.clone()).map_err(|e| {
            config_err(format!(
                "`{name}` is not a valid TLS server name (a DNS name or an IP address): {e}"
            ))
        })?;
        let made = self.made.read().clone();
        let mut config = (*made.config).clone();
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        config.resumption = made.quic_sessions;
        config.enable_early_data = true;
        let config = quinn::crypto::rustls::QuicClientConfig::try_from(config).map_err(|e| {
            config_err(format!(
                "these TLS settings cannot speak QUIC (it needs TLS 1.3 with an AES-128-GCM \
                 suite): {e}"
            ))
        })?;
        Ok((config, name))
    }
}

impl PemContents {
    fn read(chain: &Path, key: &Path) -> Result<PemContents, Error> {
        Ok(PemContents {
            chain: read_file("certificate chain", chain)?,
            key: read_file("private key", key)?,
        })
    }
}

/// A TLS endpoint's acceptor, replaced while the host runs when its certificate is
/// ([`Host::reload_tls`](crate::Host::reload_tls)): each handshake takes the one current when
/// it starts, so connections already open keep theirs.
pub(crate) struct AcceptorSlot {
    alpn: &'static [&'static [u8]],
    current: parking_lot::RwLock<tokio_rustls::TlsAcceptor>,
}

impl fmt::Debug for AcceptorSlot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AcceptorSlot").finish_non_exhaustive()
    }
}

impl AcceptorSlot {
    /// The slot of an endpoint speaking `alpn`, holding `tls`'s acceptor.
    pub(crate) fn new(tls: &ServerTls, alpn: &'static [&'static [u8]]) -> Arc<AcceptorSlot> {
        Arc::new(AcceptorSlot {
            alpn,
            current: parking_lot::RwLock::new(tls.acceptor(alpn)),
        })
    }

    /// The acceptor for a handshake starting now.
    pub(crate) fn current(&self) -> tokio_rustls::TlsAcceptor {
        self.current.read().clone()
    }

    /// Handshakes from now on use `tls`.
    pub(crate) fn replace(&self, tls: &ServerTls) {
        let acceptor = tls.acceptor(self.alpn);
        *self.current.write() = acceptor;
    }
}

/// A client's TLS settings: which certificates it trusts, its own certificate for mutual TLS,
/// and the server name it checks. Give it to [`ChannelBuilder::tls`](crate::client::ChannelBuilder::tls).
///
/// Without one, a client trusts the system's root certificates.
///
/// Cheap to clone. Its `Debug` output shows no key material.
#[derive(Clone)]
pub struct ClientTls {
    /// Shared by every clone, so that [`ClientTls::reload`] reaches every channel given one.
    made: Arc<parking_lot::RwLock<MadeClient>>,
    server_name: Option<String>,
}

/// What a [`ClientTls`] trusts and presents.
#[derive(Clone)]
struct MadeClient {
    config: Arc<rustls::ClientConfig>,
    /// `None` for [`rustls_unstable::client_tls`], which cannot be rebuilt.
    roots: Option<Arc<RootCertStore>>,
    identity: bool,
    /// The TLS sessions of `quic://` connections (tickets for resumption and 0-RTT), shared
    /// by every clone as the TCP connections' sessions are (in `config`): a channel given a
    /// clone of settings another channel used resumes. Kept apart from TCP's, whose tickets
    /// carry no early data. Replaced with the rest by [`ClientTls::reload`], so no session made
    /// under the old trust or identity is resumed (resumption does not check certificates
    /// again).
    #[cfg(feature = "quic")]
    quic_sessions: rustls::client::Resumption,
}

impl fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let made = self.made.read();
        let mut d = f.debug_struct("ClientTls");
        match &made.roots {
            Some(roots) => d.field("roots", &roots.len()),
            None => d.field("rustls_unstable", &true),
        };
        d.field("identity", &made.identity)
            .field("server_name", &self.server_name)
            .finish_non_exhaustive()
    }
}

impl ClientTls {
    /// Trusts exactly the CA (or self-signed) certificates in `pem`, and nothing else.
    ///
    /// ```
    /// let cert = keel::tls::self_signed(&["localhost"])?;
    /// let tls = keel::tls::ClientTls::from_roots_pem(cert.cert_pem.as_bytes())?;
    /// let channel = keel::Channel::builder("tcps://localhost:7000").tls(tls).build()?;
    /// # Ok::<(), keel::Error>(())
    /// ```
    pub fn from_roots_pem(pem: &[u8]) -> Result<ClientTls, Error> {
        ClientTls::build(roots_from_pem(pem, "trusted roots")?, None)
    }

    /// [`ClientTls::from_roots_pem`] with the certificates read from a file.
    pub fn from_roots_pem_file(path: impl AsRef<Path>) -> Result<ClientTls, Error> {
        ClientTls::from_roots_pem(&read_file("trusted roots", path.as_ref())?)
    }

    /// Trusts the operating system's root certificates (what a client without TLS settings
    /// uses). Fails if none can be loaded.
    pub fn system_roots() -> Result<ClientTls, Error> {
        let loaded = rustls_native_certs::load_native_certs();
        let mut roots = RootCertStore::empty();
        let (added, _unusable) = roots.add_parsable_certificates(loaded.certs);
        if added == 0 {
            let why = if loaded.errors.is_empty() {
                "none found".to_string()
            } else {
                loaded
                    .errors
                    .iter()
                    .map(|e| e.to_string())
                    .collect::<Vec<_>>()
                    .join("; ")
            };
            return Err(config_err(format!(
                "no system root certificates could be loaded ({why}); give the client its own \
                 trusted roots with ChannelBuilder::tls(ClientTls::from_roots_pem(..))"
            )));
        }
        ClientTls::build(Arc::new(roots), None)
    }

    /// Presents this certificate chain and key to hosts that require client certificates
    /// (mutual TLS, see [`ServerTls::require_client_certs`]).
    ///
    /// Not available for [`rustls_unstable::client_tls`] settings: configure the client certificate
    /// on the rustls config instead.
    pub fn with_identity(self, cert_chain_pem: &[u8], key_pem: &[u8]) -> Result<ClientTls, Error> {
        let roots = self.made.read().roots.clone().ok_or_else(|| {
            config_err(
                "with_identity needs ClientTls settings made by keel; with \
                 rustls_unstable::client_tls, configure the client certificate on the rustls \
                 config",
            )
        })?;
        let identity = Identity::from_pem(cert_chain_pem, key_pem, "client")?;
        let mut tls = ClientTls::build(roots, Some(identity))?;
        tls.server_name = self.server_name;
        Ok(tls)
    }

    /// Replaces what these settings trust and present with `new`'s (its roots and client
    /// certificate; the server name checked stays this one's), for every channel given these
    /// settings or a clone of them: connections they open from now on use the new ones, while
    /// connections already open keep theirs. For a renewed client certificate, or a CA being
    /// rotated (trust both the old and the new CA while hosts move over).
    ///
    /// ```
    /// let old_ca = keel::tls::self_signed(&["localhost"])?;
    /// let tls = keel::tls::ClientTls::from_roots_pem(old_ca.cert_pem.as_bytes())?;
    /// let channel = keel::Channel::builder("tcps://localhost:7000").tls(tls.clone()).build()?;
    /// // Later: the host moves to a certificate from a new CA.
    /// let new_ca = keel::tls::self_signed(&["localhost"])?;
    /// tls.reload(&keel::tls::ClientTls::from_roots_pem(new_ca.cert_pem.as_bytes())?);
    /// // `channel`'s next connection trusts the new CA (and no longer the old one).
    /// # drop(channel);
    /// # Ok::<(), keel::Error>(())
    /// ```
    pub fn reload(&self, new: &ClientTls) {
        let made = new.made.read().clone();
        *self.made.write() = made;
    }

    /// This configuration checking certificates against `name`, unless it already names one
    /// (a balanced channel reaches a URL's addresses one by one, and checks the URL's name).
    pub(crate) fn with_server_name_if_unset(self, name: &str) -> ClientTls {
        if self.server_name.is_some() {
            return self;
        }
        self.with_server_name(name)
    }

    /// Checks the host's certificate against `name` instead of the host part of the URL. For
    /// example, connect to `tcps://10.0.0.7:4000` and verify the certificate for
    /// `api.example.com`. `name` may be a DNS name or an IP address; it is checked when
    /// connecting.
    pub fn with_server_name(mut self, name: &str) -> ClientTls {
        self.server_name = Some(name.to_string());
        self
    }

    /// The name [`ClientTls::with_server_name`] set, if any.
    pub(crate) fn server_name(&self) -> Option<&str> {
        self.server_name.as_deref()
    }

    /// Settings from a rustls config (see [`rustls_unstable::client_tls`]).
    fn from_rustls(config: Arc<rustls::ClientConfig>) -> ClientTls {
        ClientTls::made(MadeClient {
            identity: config.client_auth_cert_resolver.has_certs(),
            config,
            roots: None,
            #[cfg(feature = "quic")]
            quic_sessions: rustls::client::Resumption::in_memory_sessions(QUIC_SESSIONS),
        })
    }

    fn made(made: MadeClient) -> ClientTls {
        ClientTls {
            made: Arc::new(parking_lot::RwLock::new(made)),
            server_name: None,
        }
    }

    fn build(roots: Arc<RootCertStore>, identity: Option<Identity>) -> Result<ClientTls, Error> {
        let builder = rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| rustls_err("TLS protocol versions", e))?
            .with_root_certificates(roots.clone());
        let has_identity = identity.is_some();
        let config = match identity {
            Some(id) => builder
                .with_client_auth_cert(id.chain, id.key)
                .map_err(|e| match e {
                    rustls::Error::InconsistentKeys(_) => config_err(format!(
                        "the private key does not match the client certificate \
                         (the first certificate of the chain): {e}"
                    ))
                    .with_source(e),
                    e => rustls_err("unusable client certificate or key", e),
                })?,
            None => builder.with_no_client_auth(),
        };
        Ok(ClientTls::made(MadeClient {
            config: Arc::new(config),
            roots: Some(roots),
            identity: has_identity,
            #[cfg(feature = "quic")]
            quic_sessions: rustls::client::Resumption::in_memory_sessions(QUIC_SESSIONS),
        }))
    }

    /// The settings a client without its own uses: the system roots, loaded once per process
    /// (off the runtime's workers, as it reads files) on the first TLS connection.
    pub(crate) async fn default_for_process() -> Result<ClientTls, Error> {
        static SYSTEM: OnceLock<ClientTls> = OnceLock::new();
        if let Some(tls) = SYSTEM.get() {
            return Ok(tls.clone());
        }
        let loaded = tokio::task::spawn_blocking(ClientTls::system_roots)
            .await
            .map_err(|e| config_err(format!("loading the system root certificates: {e}")))??;
        Ok(SYSTEM.get_or_init(|| loaded).clone())
    }

    /// Runs the client handshake over `io` with the host at `host` (the URL's host part),
    /// offering `alpn`. Returns the secured stream and the protocol agreed, if any.
    pub(crate) async fn connect(
        &self,
        io: Box<dyn Io>,
        host: &str,
        alpn: &[&[u8]],
    ) -> Result<(Box<dyn Io>, Option<Vec<u8>>), TlsConnectError> {
        let name = self.server_name.as_deref().unwrap_or(host);
        let server_name = ServerName::try_from(name.to_string()).map_err(|e| {
            TlsConnectError::Config(config_err(format!(
                "`{name}` is not a valid TLS server name (a DNS name or an IP address): {e}"
            )))
        })?;
        let mut config = (*self.made.read().config).clone();
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
        let stream = connector
            .connect(server_name, io)
            .await
            .map_err(TlsConnectError::Handshake)?;
        let agreed = stream.get_ref().1.alpn_protocol().map(<[u8]>::to_vec);
        Ok((Box::new(stream), agreed))
    }
}

/// Why a client handshake did not happen.
#[derive(Debug)]
pub(crate) enum TlsConnectError {
    /// The settings cannot be used for this host (e.g. an invalid server name).
    Config(Error),
    /// The handshake failed: rustls's reason (untrusted certificate, alert from the host, ...).
    Handshake(std::io::Error),
}

/// Runs the server handshake over an accepted connection.
pub(crate) async fn accept(
    acceptor: &tokio_rustls::TlsAcceptor,
    io: Box<dyn Io>,
) -> std::io::Result<SecuredStream> {
    let stream = acceptor.accept(io).await?;
    let session = stream.get_ref().1;
    let alpn = session.alpn_protocol().map(<[u8]>::to_vec);
    let peer_certificates = session.peer_certificates().map(|chain| {
        chain
            .iter()
            .map(|c| bytes::Bytes::copy_from_slice(c.as_ref()))
            .collect()
    });
    Ok(SecuredStream {
        io: Box::new(stream),
        alpn,
        peer_certificates,
    })
}

/// A certificate and its private key, in PEM, from [`self_signed`] (feature `dev-cert`).
///
/// For development and tests only: nothing vouches for a self-signed certificate, so every
/// client must be told to trust it ([`SelfSigned::client_tls`]).
#[cfg(feature = "dev-cert")]
#[derive(Clone)]
#[non_exhaustive]
pub struct SelfSigned {
    /// The certificate, PEM-encoded.
    pub cert_pem: String,
    /// The certificate's private key, PEM-encoded (PKCS#8).
    pub key_pem: String,
}

#[cfg(feature = "dev-cert")]
impl fmt::Debug for SelfSigned {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SelfSigned")
            .field("cert_pem", &self.cert_pem)
            .field("key_pem", &"<redacted>")
            .finish()
    }
}

#[cfg(feature = "dev-cert")]
impl SelfSigned {
    /// Host settings serving this certificate.
    pub fn server_tls(&self) -> Result<ServerTls, Error> {
        ServerTls::from_pem(self.cert_pem.as_bytes(), self.key_pem.as_bytes())
    }

    /// Client settings trusting exactly this certificate.
    pub fn client_tls(&self) -> Result<ClientTls, Error> {
        ClientTls::from_roots_pem(self.cert_pem.as_bytes())
    }
}

/// Makes a self-signed certificate valid for `names`, each a DNS name (`localhost`) or an IP
/// address (`127.0.0.1`, `::1`). For development and tests only: feature `dev-cert` (off by
/// default; in a test-only build, `[dev-dependencies] keel = { ..., features = ["dev-cert"] }`).
///
/// ```
/// let cert = keel::tls::self_signed(&["localhost", "127.0.0.1"])?;
/// assert!(cert.cert_pem.starts_with("-----BEGIN CERTIFICATE-----"));
/// let host_settings = cert.server_tls()?;
/// let client_settings = cert.client_tls()?;
/// # Ok::<(), keel::Error>(())
/// ```
#[cfg(feature = "dev-cert")]
pub fn self_signed(names: &[&str]) -> Result<SelfSigned, Error> {
    if names.is_empty() {
        return Err(config_err(
            "self_signed needs at least one DNS name or IP address",
        ));
    }
    let make = || -> Result<SelfSigned, rcgen::Error> {
        // rcgen makes an IP address SAN for every name that parses as one, else a DNS name SAN.
        let mut params =
            rcgen::CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())?;
        // A subject of its own: two self-signed certificates with the same subject look like
        // issuer and issued to a verifier, which then reports a bad signature instead of an
        // unknown issuer.
        let unique = crate::core::random::random();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params.distinguished_name.push(
            rcgen::DnType::CommonName,
            format!("{} (keel self-signed {unique:016x})", names[0]),
        );
        let key = rcgen::KeyPair::generate()?;
        let cert = params.self_signed(&key)?;
        Ok(SelfSigned {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    };
    make().map_err(|e| {
        config_err(format!("cannot make a certificate for {names:?}: {e}")).with_source(e)
    })
}

// Every test makes its certificates with `self_signed`.
#[cfg(all(test, feature = "dev-cert"))]
mod tests {
    use super::*;

    #[test]
    fn pem_errors_are_clear_config_errors() {
        let a = self_signed(&["localhost"]).unwrap();
        let b = self_signed(&["localhost"]).unwrap();
        let cases: [(&[u8], &[u8], &str); 4] = [
            (
                b"garbage",
                a.key_pem.as_bytes(),
                "no certificate found in PEM",
            ),
            (a.cert_pem.as_bytes(), b"garbage", "no private key"),
            (
                a.cert_pem.as_bytes(),
                a.cert_pem.as_bytes(),
                "no private key",
            ),
            (
                a.cert_pem.as_bytes(),
                b.key_pem.as_bytes(),
                "does not match the server certificate",
            ),
        ];
        for (cert, key, expected) in cases {
            let e = ServerTls::from_pem(cert, key).unwrap_err();
            assert_eq!(e.kind(), Kind::Config, "{e}");
            assert!(e.to_string().contains(expected), "{e}");
        }
        let e = ClientTls::from_roots_pem(b"").unwrap_err();
        assert!(e.to_string().contains("no certificate found"), "{e}");
        let e = ClientTls::from_roots_pem(a.cert_pem.as_bytes())
            .unwrap()
            .with_identity(a.cert_pem.as_bytes(), b.key_pem.as_bytes())
            .unwrap_err();
        assert!(e.to_string().contains("does not match the client"), "{e}");
    }

    #[test]
    fn one_file_may_hold_both_chain_and_key() {
        let a = self_signed(&["localhost"]).unwrap();
        let both = format!("{}{}", a.key_pem, a.cert_pem);
        ServerTls::from_pem(both.as_bytes(), both.as_bytes()).unwrap();
    }

    #[test]
    fn debug_output_shows_no_key_material() {
        let a = self_signed(&["localhost", "127.0.0.1"]).unwrap();
        let key_body = a.key_pem.lines().nth(1).unwrap().to_string();
        let server = a
            .server_tls()
            .unwrap()
            .require_client_certs(a.cert_pem.as_bytes())
            .unwrap();
        let client = a
            .client_tls()
            .unwrap()
            .with_identity(a.cert_pem.as_bytes(), a.key_pem.as_bytes())
            .unwrap()
            .with_server_name("localhost");
        for shown in [
            format!("{server:?}"),
            format!("{client:?}"),
            format!("{a:?}"),
        ] {
            assert!(!shown.contains(&key_body), "{shown}");
            assert!(!shown.contains("PRIVATE KEY"), "{shown}");
        }
        assert!(format!("{server:?}").contains("client_certs_required: true"));
        assert!(format!("{client:?}").contains("identity: true"));
    }

    #[test]
    fn rebuilding_from_rustls_settings_is_refused_clearly() {
        let a = self_signed(&["localhost"]).unwrap();
        let server = ServerTls::from_rustls(a.server_tls().unwrap().config);
        let e = server
            .require_client_certs(a.cert_pem.as_bytes())
            .unwrap_err();
        assert!(e.to_string().contains("rustls_unstable"), "{e}");
        let client = ClientTls::from_rustls(a.client_tls().unwrap().made.read().config.clone());
        let e = client
            .with_identity(a.cert_pem.as_bytes(), a.key_pem.as_bytes())
            .unwrap_err();
        assert!(e.to_string().contains("rustls_unstable"), "{e}");
    }

    /// What `ClientTls::connect` does per connection (clone the config, set ALPN) keeps one
    /// session store for all of a client's connections: the second handshake resumes.
    #[tokio::test]
    async fn a_clients_second_connection_resumes_its_tls_session() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let cert = self_signed(&["localhost"]).unwrap();
        let acceptor = cert.server_tls().unwrap().acceptor(&[b"keel/1"]);
        let client = cert.client_tls().unwrap();
        let mut kinds = Vec::new();
        for _ in 0..2 {
            let (a, b) = tokio::io::duplex(64 * 1024);
            let acceptor = acceptor.clone();
            let server = tokio::spawn(async move {
                let mut tls = acceptor.accept(a).await.unwrap();
                tls.write_all(b"hi").await.unwrap();
                tls.flush().await.unwrap();
                let mut end = Vec::new();
                let _ = tls.read_to_end(&mut end).await;
            });
            let mut config = (*client.made.read().config).clone();
            config.alpn_protocols = vec![b"keel/1".to_vec()];
            let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
            let name = ServerName::try_from("localhost").unwrap();
            let mut tls = connector.connect(name, b).await.unwrap();
            // Reading takes the session tickets the host sent after its handshake.
            let mut hi = [0u8; 2];
            tls.read_exact(&mut hi).await.unwrap();
            kinds.push(tls.get_ref().1.handshake_kind());
            tls.shutdown().await.unwrap();
            drop(tls);
            server.await.unwrap();
        }
        assert_eq!(
            kinds,
            [
                Some(rustls::HandshakeKind::Full),
                Some(rustls::HandshakeKind::Resumed)
            ]
        );
    }

    #[test]
    fn self_signed_needs_a_name() {
        assert!(self_signed(&[]).is_err());
    }
}
