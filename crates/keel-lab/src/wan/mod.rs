//! Seed 004 on an emulated WAN: sequential calls from one client through a latency proxy, on
//! every binding and in both transfer modes, against the limit of the same link.
//!
//! - [`proxy`]: the latency-emulating TCP proxy (delay, bandwidth cap, handshake RTT, count).
//! - [`raw`]: the same bytes over plain TCP through the same proxy: the limit.
//! - [`cell`]: one binding, mode, RTT and payload (`keel-lab wan`).
//! - [`matrix`]: every cell, beside the seed's XP and Vista figures (`keel-lab wan-matrix`).
//! - [`html`]: the report's section and its two charts.
//! - [`netem`]: the TUN link: delay, cap and random loss on packets, TCP and UDP alike (root).
//! - [`path`]: either link behind one type, as a cell uses it (`--link proxy|tun`).
//! - [`check`]: the proxy measured against its settings (`keel-lab wan-proxy-check`).
//! - [`netem_check`]: the TUN link measured against its settings (`keel-lab wan-netem-check`).
//! - [`cli`]: the subcommands' options.
//!
//! A variant is a binding (tcp, tcps, http1, h2c, https-h1, https-h2) and a mode: `buffered`
//! sends the payload as an ordinary argument, `streamed` as a [`keel::ByteStream`].

pub(crate) mod cell;
pub(crate) mod check;
pub(crate) mod cli;
pub(crate) mod html;
pub(crate) mod matrix;
pub(crate) mod netem;
pub(crate) mod netem_check;
pub(crate) mod path;
pub(crate) mod proxy;
pub(crate) mod raw;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Mutex, OnceLock};

use keel_examples::wan::{WanImpl, WanServer, LARGE_BYTES, SMALL};
use serde::Serialize;

use crate::experiments::Binding;

/// The bandwidth for the large payload, each way: 2,500 KB/s (20 Mbit/s).
pub(crate) const LARGE_CAP_BYTES_PER_SEC: u64 = 2_500_000;

/// The seed's round-trip times, ms.
pub(crate) const SEED_RTTS_MS: [f64; 4] = [1.0, 50.0, 100.0, 200.0];

/// How the payload travels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Mode {
    /// An ordinary argument (`String`, `Vec<u8>`), encoded whole.
    Buffered,
    /// A `ByteStream`, sent in chunks as it is produced.
    Streamed,
}

impl Mode {
    /// `buffered` or `streamed`.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Mode::Buffered => "buffered",
            Mode::Streamed => "streamed",
        }
    }
}

/// The seed's two payloads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Payload {
    /// "hi mom", echoed.
    Small,
    /// 277 KiB of incompressible bytes up, their length back.
    Large,
}

impl Payload {
    /// `small` or `large`.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Payload::Small => "small",
            Payload::Large => "large",
        }
    }

    /// The bytes sent up (shared: cloning is free).
    pub(crate) fn bytes(self) -> keel::Bytes {
        static LARGE: OnceLock<keel::Bytes> = OnceLock::new();
        match self {
            Payload::Small => keel::Bytes::from_static(SMALL.as_bytes()),
            Payload::Large => LARGE
                .get_or_init(|| keel::Bytes::from(incompressible(LARGE_BYTES)))
                .clone(),
        }
    }

    /// The default bandwidth cap: the 2,500 KB/s for the large payload, none for the
    /// small one.
    pub(crate) fn default_cap(self) -> Option<u64> {
        match self {
            Payload::Small => None,
            Payload::Large => Some(LARGE_CAP_BYTES_PER_SEC),
        }
    }
}

/// `n` bytes that no compressor can shrink (xorshift64*), like the seed's JPEG.
pub(crate) fn incompressible(n: usize) -> Vec<u8> {
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    let mut out = Vec::with_capacity(n + 8);
    while out.len() < n {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        out.extend_from_slice(&x.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes());
    }
    out.truncate(n);
    out
}

/// A binding and a transfer mode: one row of the matrix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub(crate) struct Variant {
    /// The binding.
    pub(crate) binding: Binding,
    /// The transfer mode.
    pub(crate) mode: Mode,
}

impl Variant {
    /// E.g. `tcp streamed`.
    pub(crate) fn name(self) -> String {
        format!("{} {}", self.binding.name(), self.mode.name())
    }

    /// Every binding the wan experiment takes, each buffered then streamed.
    pub(crate) fn all() -> Vec<Variant> {
        use Binding::*;
        [Tcp, Tcps, Http1, H2c, HttpsH1, HttpsH2]
            .into_iter()
            .flat_map(|binding| {
                [Mode::Buffered, Mode::Streamed].map(|mode| Variant { binding, mode })
            })
            .collect()
    }
}

impl Binding {
    /// Whether the binding runs over TLS.
    pub(crate) fn is_tls(self) -> bool {
        matches!(
            self,
            Binding::Tcps | Binding::HttpsH1 | Binding::HttpsH2 | Binding::Quic
        )
    }

    /// The flow-control window a fresh connection's first upload in `mode` may fill before the
    /// host grants more: HTTP/2's 64 KiB (RFC 9113 §6.9.2), a keel-wire stream's 256 KiB
    /// (`keel_wire::DEFAULT_INITIAL_WINDOW`); a buffered keel-wire call and HTTP/1.1 are not
    /// flow-controlled above TCP (`usize::MAX`).
    pub(crate) fn initial_window(self, mode: Mode) -> usize {
        match (self, mode) {
            (Binding::H2c | Binding::HttpsH2, _) => 65_535,
            (Binding::Tcp | Binding::Tcps | Binding::Quic, Mode::Streamed) => {
                keel_wire::DEFAULT_INITIAL_WINDOW as usize
            }
            _ => usize::MAX,
        }
    }

    /// A channel builder for `url` on this binding: the HTTP version it speaks and, over TLS,
    /// trust in the lab's self-signed certificate for the URL's address.
    pub(crate) fn channel_builder(self, url: &str) -> anyhow::Result<keel::client::ChannelBuilder> {
        let tls = if self.is_tls() {
            Some(client_tls_for(url)?)
        } else {
            None
        };
        Ok(self.channel_builder_with(url, tls))
    }

    /// [`Binding::channel_builder`] with these TLS settings (ignored by a plain binding): two
    /// clients given clones of one `ClientTls` share its session cache, so the second resumes.
    pub(crate) fn channel_builder_with(
        self,
        url: &str,
        tls: Option<keel::tls::ClientTls>,
    ) -> keel::client::ChannelBuilder {
        let b = keel::Channel::builder(url);
        let b = match self {
            Binding::Http1 | Binding::HttpsH1 => b.http_version(keel::client::HttpVersion::Http1),
            Binding::H2c | Binding::HttpsH2 => b.http_version(keel::client::HttpVersion::Http2),
            Binding::Tcp | Binding::Tcps | Binding::Quic => b,
        };
        match tls {
            Some(tls) if self.is_tls() => b.tls(tls),
            _ => b,
        }
    }

    /// Whether the binding runs over UDP (a `quic://` one), so only the TUN link carries it.
    /// Follows from [`Binding::listen_url`]: a new binding needs no arm here.
    pub(crate) fn over_udp(self) -> bool {
        self.listen_url().starts_with("quic://")
    }

    /// The endpoint URL a host binds at `ip` (port 0).
    pub(crate) fn listen_url_at(self, ip: IpAddr) -> String {
        self.listen_url().replace("127.0.0.1", &ip.to_string())
    }
}

/// Client TLS settings trusting the lab's certificate for `url`'s address.
pub(crate) fn client_tls_for(url: &str) -> anyhow::Result<keel::tls::ClientTls> {
    Ok(cert_for(addr_of(url)?.ip())?.client_tls()?)
}

/// The lab's self-signed certificate for `ip` (127.0.0.1: [`cert`]; the TUN link's addresses:
/// one each, made once per process).
fn cert_for(ip: IpAddr) -> anyhow::Result<&'static keel::tls::SelfSigned> {
    if ip == IpAddr::V4(Ipv4Addr::LOCALHOST) {
        return cert();
    }
    static CERTS: Mutex<Vec<(IpAddr, &'static keel::tls::SelfSigned)>> = Mutex::new(Vec::new());
    let mut certs = CERTS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, c)) = certs.iter().find(|(i, _)| *i == ip) {
        return Ok(c);
    }
    // Leaked: at most one per address of the TUN link's range (254), for the process's life.
    let c: &'static keel::tls::SelfSigned =
        Box::leak(Box::new(keel::tls::self_signed(&[&ip.to_string()])?));
    certs.push((ip, c));
    Ok(c)
}

/// The lab's self-signed certificate for 127.0.0.1 (one per process).
fn cert() -> anyhow::Result<&'static keel::tls::SelfSigned> {
    static CERT: OnceLock<keel::tls::SelfSigned> = OnceLock::new();
    if let Some(c) = CERT.get() {
        return Ok(c);
    }
    let c = keel::tls::self_signed(&["127.0.0.1", "localhost"])?;
    Ok(CERT.get_or_init(|| c))
}

/// A host serving the Wan contract on `binding` (127.0.0.1, port 0), with the lab's
/// certificate on TLS.
pub(crate) fn start_host(binding: Binding) -> anyhow::Result<keel::Host> {
    start_host_at(
        binding,
        IpAddr::V4(Ipv4Addr::LOCALHOST),
        keel::host::QuicCongestion::Bbr,
    )
}

/// [`start_host`] bound at `ip` (the TUN link's host address, from inside its namespace).
pub(crate) fn start_host_at(
    binding: Binding,
    ip: IpAddr,
    congestion: keel::host::QuicCongestion,
) -> anyhow::Result<keel::Host> {
    let b = keel::Host::builder()
        .service(WanServer::new(WanImpl))
        .endpoint(binding.listen_url_at(ip))
        .quic_congestion(congestion);
    let b = if binding.is_tls() {
        b.tls(cert_for(ip)?.server_tls()?)
    } else {
        b
    };
    Ok(b.start()?)
}

/// The loopback address of a host's endpoint URL (`scheme://127.0.0.1:PORT`).
pub(crate) fn addr_of(url: &str) -> anyhow::Result<SocketAddr> {
    let rest = url
        .split_once("://")
        .map(|(_, r)| r)
        .ok_or_else(|| anyhow::anyhow!("not an endpoint URL: {url}"))?;
    let hostport = rest.split('/').next().unwrap_or(rest);
    Ok(hostport.parse()?)
}

/// `url` with its address replaced by `addr` (the proxy's), same scheme.
pub(crate) fn via(url: &str, addr: SocketAddr) -> anyhow::Result<String> {
    let (scheme, _) = url
        .split_once("://")
        .ok_or_else(|| anyhow::anyhow!("not an endpoint URL: {url}"))?;
    Ok(format!("{scheme}://{addr}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_through_the_proxy() {
        let a = addr_of("tcps://127.0.0.1:4567").unwrap();
        assert_eq!(a, "127.0.0.1:4567".parse().unwrap());
        assert_eq!(addr_of("http://127.0.0.1:80/").unwrap().port(), 80);
        assert!(addr_of("nonsense").is_err());
        let p: SocketAddr = "127.0.0.1:9".parse().unwrap();
        assert_eq!(
            via("https://127.0.0.1:4567", p).unwrap(),
            "https://127.0.0.1:9"
        );
    }

    #[test]
    fn payloads() {
        assert_eq!(Payload::Small.bytes(), "hi mom".as_bytes());
        let large = Payload::Large.bytes();
        assert_eq!(large.len(), 277 * 1024);
        // Incompressible enough: no byte value dominates.
        let mut counts = [0usize; 256];
        for &b in large.iter() {
            counts[b as usize] += 1;
        }
        assert!(counts.iter().all(|&c| c < large.len() / 128), "{counts:?}");
        assert_eq!(Payload::Large.default_cap(), Some(2_500_000));
        assert_eq!(Payload::Small.default_cap(), None);
    }

    #[test]
    fn twelve_variants() {
        let all = Variant::all();
        assert_eq!(all.len(), 12);
        assert_eq!(all[1].name(), "tcp streamed");
        assert_eq!(all.iter().filter(|v| v.binding.is_tls()).count(), 6);
    }
}
