//! The emulated link a wan cell runs on, either kind behind one type: the userland TCP proxy
//! ([`super::proxy`]: delay and cap, no root needed, TCP only) or the TUN link
//! ([`super::netem`]: delay, cap and random loss on packets, for TCP and UDP alike; root).
//!
//! A cell starts the link, starts its server where the link wants it ([`Wan::serve`]: on
//! loopback, or inside the TUN link's namespace), puts the link in front of it
//! ([`Wan::front`]), and reads the connections the client opened ([`Wan::connections`]).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use serde::Serialize;

use super::netem::link::Impairments;
use super::netem::ns::NEEDS_ROOT;
use super::netem::{Netem, NetemStats};
use super::proxy::{LinkConfig, Proxy};

/// Which emulator carries a cell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum LinkKind {
    /// The userland TCP proxy: delay and bandwidth on bytes. No loss, TCP only, no root.
    Proxy,
    /// TUN devices and a network namespace: delay, bandwidth and loss on packets. Root.
    Tun,
}

impl LinkKind {
    /// `--link`'s default: the TUN link when there is loss to emulate, the proxy otherwise
    /// (so that `keel-lab all` and the seed-004 matrix run without root, with the numbers the
    /// bars were set on).
    /// A binding over UDP (QUIC) always takes the TUN link: the proxy carries TCP only.
    pub(crate) fn default_for(loss_pct: f64, udp: bool) -> LinkKind {
        if loss_pct > 0.0 || udp {
            LinkKind::Tun
        } else {
            LinkKind::Proxy
        }
    }
}

/// Everything a link is set to.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct LinkSpec {
    /// Which emulator.
    pub(crate) kind: LinkKind,
    /// Round-trip time.
    pub(crate) rtt: Duration,
    /// Cap each way, bytes/s (`None`: none).
    pub(crate) bytes_per_sec: Option<u64>,
    /// Random loss each way, percent (TUN link only).
    pub(crate) loss_pct: f64,
    /// Seeds the loss generator.
    pub(crate) seed: u64,
}

impl LinkSpec {
    /// Fails for what the kind cannot do: loss on the proxy.
    pub(crate) fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(
            (0.0..=100.0).contains(&self.loss_pct),
            "--loss-pct must be between 0 and 100"
        );
        if self.kind == LinkKind::Proxy && self.loss_pct > 0.0 {
            anyhow::bail!(
                "--loss-pct needs --link tun: a userland TCP proxy sees bytes, not packets, so it \
                 cannot drop one honestly ({NEEDS_ROOT})"
            );
        }
        Ok(())
    }
}

/// A running link and what sits in front of the server.
#[derive(Debug)]
pub(crate) struct Wan {
    spec: LinkSpec,
    netem: Option<Netem>,
    proxies: Vec<Proxy>,
}

impl Wan {
    /// Starts the link (the proxy itself starts in [`Wan::front`], once the server is known).
    pub(crate) fn start(spec: LinkSpec) -> anyhow::Result<Wan> {
        spec.validate()?;
        let netem = match spec.kind {
            LinkKind::Proxy => None,
            LinkKind::Tun => Some(Netem::start(Impairments {
                rtt: spec.rtt,
                bytes_per_sec: spec.bytes_per_sec,
                loss_pct: spec.loss_pct,
                seed: spec.seed,
            })?),
        };
        Ok(Wan {
            spec,
            netem,
            proxies: Vec::new(),
        })
    }

    /// Where a server binds: loopback behind the proxy, the namespace's address on the TUN link.
    pub(crate) fn server_ip(&self) -> IpAddr {
        match &self.netem {
            Some(n) => IpAddr::V4(n.host_ip()),
            None => IpAddr::V4(Ipv4Addr::LOCALHOST),
        }
    }

    /// Runs `f(server_ip)` where a server must start: on this thread for the proxy, on a thread
    /// inside the namespace for the TUN link (its sockets and threads stay there).
    pub(crate) fn serve<T: Send + 'static>(
        &self,
        f: impl FnOnce(IpAddr) -> T + Send + 'static,
    ) -> anyhow::Result<T> {
        let ip = self.server_ip();
        match &self.netem {
            Some(n) => n.run_in(move || f(ip)),
            None => Ok(f(ip)),
        }
    }

    /// Where clients connect to reach `server` through the link: a proxy in front of it, or the
    /// server itself across the TUN link.
    pub(crate) fn front(&mut self, server: SocketAddr) -> anyhow::Result<SocketAddr> {
        if self.netem.is_some() {
            return Ok(server);
        }
        let link = LinkConfig::new(self.spec.rtt).with_cap(self.spec.bytes_per_sec);
        let proxy = Proxy::start(server, link)?;
        let addr = proxy.addr();
        self.proxies.push(proxy);
        Ok(addr)
    }

    /// Connections clients opened so far (accepted by the proxies, or distinct flows towards
    /// the host on the TUN link).
    pub(crate) fn connections(&self) -> u64 {
        match &self.netem {
            Some(n) => n.stats().connections,
            None => self.proxies.iter().map(Proxy::accepted).sum(),
        }
    }

    /// What the TUN link counted (`None` on the proxy).
    pub(crate) fn stats(&self) -> Option<NetemStats> {
        self.netem.as_ref().map(Netem::stats)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loss_needs_the_tun_link() {
        let spec = LinkSpec {
            kind: LinkKind::Proxy,
            rtt: Duration::from_millis(200),
            bytes_per_sec: None,
            loss_pct: 1.0,
            seed: 0,
        };
        let e = spec.validate().unwrap_err().to_string();
        assert!(
            e.contains("--link tun") && e.contains("CAP_NET_ADMIN"),
            "{e}"
        );
        assert!(LinkSpec {
            loss_pct: 0.0,
            ..spec
        }
        .validate()
        .is_ok());
        assert!(LinkSpec {
            kind: LinkKind::Tun,
            ..spec
        }
        .validate()
        .is_ok());
        assert!(LinkSpec {
            kind: LinkKind::Tun,
            loss_pct: 101.0,
            ..spec
        }
        .validate()
        .is_err());
        assert_eq!(LinkKind::default_for(0.0, false), LinkKind::Proxy);
        assert_eq!(LinkKind::default_for(0.5, false), LinkKind::Tun);
        assert_eq!(LinkKind::default_for(0.0, true), LinkKind::Tun);
    }
}
