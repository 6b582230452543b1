//! "netem in userland": an emulated link made of two TUN devices, one in the root network
//! namespace (the client's side) and one in a namespace of its own (the host's side), with
//! keel-lab moving every IP packet between them after a per-direction delay, through a
//! per-direction bandwidth cap with a bounded drop-tail queue, and dropping each packet with a
//! seeded random loss rate. Unlike the userland proxy ([`super::proxy`]) it acts on packets, so
//! TCP's own handshake, slow start and retransmission are what is measured, and UDP (QUIC)
//! crosses the same impairments as TCP.
//!
//! - [`link`]: one direction as a pure model (loss, cap and queue, delay).
//! - [`pump`]: the threads that read, judge and deliver packets.
//! - [`ns`]: the namespace and the devices (`ip`), their teardown, and stale ones removed.
//!
//! Needs root or CAP_NET_ADMIN, `/dev/net/tun` and `ip` (iproute2).

pub(crate) mod link;
pub(crate) mod ns;
pub(crate) mod pump;

use std::net::{Ipv4Addr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use serde::Serialize;

use link::{Direction, Impairments};
use pump::{Counters, Pump, WAKE_PORT};

/// A running emulated link. The host under test binds [`Netem::host_ip`] inside the namespace
/// ([`Netem::run_in`]); clients in the root namespace connect to it. Dropping it stops the
/// threads and removes the devices and the namespace.
#[derive(Debug)]
pub(crate) struct Netem {
    stop: Arc<AtomicBool>,
    up: Arc<Counters>,
    down: Arc<Counters>,
    pumps: Vec<Pump>,
    /// A socket inside the namespace, to wake the reader of the inside device at the end.
    wake_inside: UdpSocket,
    // Last: removed after the pumps have stopped.
    setup: ns::Setup,
}

/// What the link did, each way (`up`: towards the host).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub(crate) struct NetemStats {
    /// Packets towards the host.
    pub(crate) up_packets: u64,
    /// Of those, dropped at random.
    pub(crate) up_lost: u64,
    /// Of those, dropped by the full queue.
    pub(crate) up_queue_full: u64,
    /// Packets back to the client.
    pub(crate) down_packets: u64,
    /// Of those, dropped at random.
    pub(crate) down_lost: u64,
    /// Of those, dropped by the full queue.
    pub(crate) down_queue_full: u64,
    /// Distinct flows the client opened towards the host (TCP connections, UDP sockets).
    pub(crate) connections: u64,
}

impl Netem {
    /// Creates the devices and the namespace and starts moving packets.
    pub(crate) fn start(imp: Impairments) -> anyhow::Result<Netem> {
        let setup = ns::Setup::create()?;
        let local = setup.local;
        let wake_inside = setup.run_in(move || {
            let s = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0))?;
            s.connect((local, WAKE_PORT))?;
            Ok::<_, std::io::Error>(s)
        })??;
        let stop = Arc::new(AtomicBool::new(false));
        let (up, down) = (Arc::new(Counters::default()), Arc::new(Counters::default()));
        let (outside, inside) = (setup.outside.clone(), setup.inside.clone());
        let mut netem = Netem {
            stop: stop.clone(),
            up: up.clone(),
            down: down.clone(),
            pumps: Vec::new(),
            wake_inside,
            setup,
        };
        netem.pumps.push(Pump::start(
            "up",
            outside.clone(),
            inside.clone(),
            Direction::new(&imp, 0),
            up,
            stop.clone(),
        )?);
        netem.pumps.push(Pump::start(
            "down",
            inside,
            outside,
            Direction::new(&imp, 1),
            down,
            stop,
        )?);
        Ok(netem)
    }

    /// The host's address (inside the namespace).
    pub(crate) fn host_ip(&self) -> Ipv4Addr {
        self.setup.remote
    }

    /// The client's address on the link (root namespace).
    pub(crate) fn client_ip(&self) -> Ipv4Addr {
        self.setup.local
    }

    /// Runs `f` on a thread inside the namespace (see [`ns::Setup::run_in`]).
    pub(crate) fn run_in<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> anyhow::Result<T> {
        self.setup.run_in(f)
    }

    /// What the link has done so far.
    pub(crate) fn stats(&self) -> NetemStats {
        let get = |c: &Counters| {
            (
                c.packets.load(Ordering::Relaxed),
                c.lost.load(Ordering::Relaxed),
                c.queue_full.load(Ordering::Relaxed),
            )
        };
        let (up_packets, up_lost, up_queue_full) = get(&self.up);
        let (down_packets, down_lost, down_queue_full) = get(&self.down);
        NetemStats {
            up_packets,
            up_lost,
            up_queue_full,
            down_packets,
            down_lost,
            down_queue_full,
            connections: self.up.flows.load(Ordering::Relaxed),
        }
    }
}

impl Drop for Netem {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Each reader is blocked in a read: hand each device one packet.
        if let Ok(s) = UdpSocket::bind((self.setup.local, 0)) {
            let _ = s.send_to(b"stop", (self.setup.remote, WAKE_PORT));
        }
        let _ = self.wake_inside.send(b"stop");
        for p in &mut self.pumps {
            p.join();
        }
    }
}

#[cfg(test)]
mod tests {
    //! Needs root (TUN devices, namespaces): `ci-smoke` runs these with `--ignored`.

    use std::process::Command;
    use std::time::Duration;

    use super::*;

    fn namespaces() -> String {
        let out = Command::new("ip").args(["netns", "list"]).output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn links() -> String {
        let out = Command::new("ip").args(["-o", "link"]).output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    #[test]
    #[ignore = "needs root: TUN devices and a network namespace (ci-smoke runs it)"]
    fn carries_udp_then_removes_everything() {
        let imp = Impairments {
            rtt: Duration::from_millis(4),
            bytes_per_sec: None,
            loss_pct: 0.0,
            seed: 1,
        };
        let link = Netem::start(imp).unwrap();
        let ns = link.setup.ns.clone();
        let devices = [
            link.setup.outside.name().to_string(),
            link.setup.inside.name().to_string(),
        ];
        assert!(namespaces().contains(&ns));
        assert!(links().contains(&devices[0]));
        let ip = link.host_ip();
        let server = link
            .run_in(move || UdpSocket::bind((ip, 0)))
            .unwrap()
            .unwrap();
        let client = UdpSocket::bind((link.client_ip(), 0)).unwrap();
        client
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        server
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        client
            .send_to(b"ping", server.local_addr().unwrap())
            .unwrap();
        let mut buf = [0u8; 16];
        let (n, from) = server.recv_from(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"ping");
        assert_eq!(from.ip(), link.client_ip());
        server.send_to(b"pong", from).unwrap();
        assert_eq!(client.recv(&mut buf).unwrap(), 4);
        let s = link.stats();
        assert_eq!((s.up_packets, s.down_packets, s.connections), (1, 1, 1));
        drop((server, client));
        drop(link);
        assert!(!namespaces().contains(&ns), "{ns} left behind");
        let l = links();
        assert!(devices.iter().all(|d| !l.contains(d.as_str())), "{l}");
    }

    #[test]
    #[ignore = "needs root: network namespaces (ci-smoke runs it)"]
    fn removes_the_namespaces_of_a_killed_run() {
        // A pid that ran and ended.
        let mut child = Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let stale = format!("keel-lab-wan-{dead}-0");
        let ours = format!("keel-lab-wan-{}-999", std::process::id());
        for n in [&stale, &ours] {
            assert!(Command::new("ip")
                .args(["netns", "add", n])
                .status()
                .unwrap()
                .success());
        }
        ns::remove_stale();
        let left = namespaces();
        let _ = Command::new("ip").args(["netns", "del", &ours]).status();
        assert!(!left.contains(&stale), "{left}");
        // A running process's namespace stays.
        assert!(left.contains(&ours), "{left}");
    }
}
