//! Moves packets between the two TUN devices: per direction, a reader thread takes each packet
//! as the kernel hands it over and asks the direction's [`Direction`] what happens to it, and a
//! deliverer thread writes the survivors to the other device at their delivery time.
//!
//! Between the two is an unbounded channel: it is the wire, holding what is in flight for
//! half an RTT (on a capped direction, at most rate × delay bytes; the queue in front of the
//! cap is bounded by the model and drops tail). Threads, not tokio tasks, for the same reason as
//! the proxy: tokio's timer rounds deadlines up to whole milliseconds.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::{self, JoinHandle};
use std::time::Instant;

use tun_tap::Iface;

use super::link::{Direction, Fate, MTU};
use crate::wan::proxy::Clock;

/// The UDP port the stop signal is sent to (discard): packets to it are never forwarded or
/// counted.
pub(crate) const WAKE_PORT: u16 = 9;

/// What one direction counted.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    /// IPv4 packets read from the device.
    pub(crate) packets: AtomicU64,
    /// Dropped at random.
    pub(crate) lost: AtomicU64,
    /// Dropped by the full queue in front of the cap.
    pub(crate) queue_full: AtomicU64,
    /// Written to the other device.
    pub(crate) delivered: AtomicU64,
    /// Distinct flows (protocol, source and destination port) seen: connections.
    pub(crate) flows: AtomicU64,
}

/// One direction's two threads.
#[derive(Debug)]
pub(crate) struct Pump {
    reader: Option<JoinHandle<()>>,
    deliverer: Option<JoinHandle<()>>,
}

impl Pump {
    /// Starts moving packets from `from` to `to` through `dir`.
    pub(crate) fn start(
        name: &str,
        from: Arc<Iface>,
        to: Arc<Iface>,
        dir: Direction,
        counters: Arc<Counters>,
        stop: Arc<AtomicBool>,
    ) -> std::io::Result<Pump> {
        let (tx, rx) = mpsc::channel::<(Instant, Vec<u8>)>();
        let c = counters.clone();
        let reader = thread::Builder::new()
            .name(format!("wan-{name}-read"))
            .spawn(move || read(&from, dir, &c, &stop, tx))?;
        let deliverer = thread::Builder::new()
            .name(format!("wan-{name}-send"))
            .spawn(move || {
                let mut clock = Clock::default();
                for (at, packet) in rx {
                    clock.wait_until(at);
                    if to.send(&packet).is_ok() {
                        counters.delivered.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })?;
        Ok(Pump {
            reader: Some(reader),
            deliverer: Some(deliverer),
        })
    }

    /// Waits for both threads (the reader ends at the first packet after the stop flag).
    pub(crate) fn join(&mut self) {
        for h in [self.reader.take(), self.deliverer.take()]
            .into_iter()
            .flatten()
        {
            let _ = h.join();
        }
    }
}

fn read(
    from: &Iface,
    mut dir: Direction,
    c: &Counters,
    stop: &AtomicBool,
    tx: mpsc::Sender<(Instant, Vec<u8>)>,
) {
    let mut buf = vec![0u8; MTU + 64];
    let mut flows = HashSet::new();
    loop {
        let Ok(n) = from.recv(&mut buf) else { return };
        if stop.load(Ordering::SeqCst) {
            return;
        }
        let now = Instant::now();
        let packet = &buf[..n];
        // IPv4 only: the kernel's own IPv6 chatter (router solicitations) is not the link's.
        let Some(flow) = flow_of(packet) else {
            continue;
        };
        if flow.2 == WAKE_PORT {
            continue;
        }
        c.packets.fetch_add(1, Ordering::Relaxed);
        if flows.insert(flow) {
            c.flows.store(flows.len() as u64, Ordering::Relaxed);
        }
        match dir.offer(now, n) {
            Fate::Deliver(at) => {
                if tx.send((at, packet.to_vec())).is_err() {
                    return;
                }
            }
            Fate::Lost => {
                c.lost.fetch_add(1, Ordering::Relaxed);
            }
            Fate::QueueFull => {
                c.queue_full.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// An IPv4 packet's protocol and ports (0 for protocols without ports); `None` for anything
/// else.
pub(crate) fn flow_of(p: &[u8]) -> Option<(u8, u16, u16)> {
    if p.len() < 20 || p[0] >> 4 != 4 {
        return None;
    }
    let ihl = usize::from(p[0] & 0x0f) * 4;
    let proto = p[9];
    let ports = match proto {
        // TCP, UDP: the ports open the header.
        6 | 17 if p.len() >= ihl + 4 => (
            u16::from_be_bytes([p[ihl], p[ihl + 1]]),
            u16::from_be_bytes([p[ihl + 2], p[ihl + 3]]),
        ),
        _ => (0, 0),
    };
    Some((proto, ports.0, ports.1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flows() {
        let mut udp = vec![0u8; 28];
        udp[0] = 0x45;
        udp[9] = 17;
        udp[20..24].copy_from_slice(&[0x30, 0x39, 0x00, 0x09]);
        assert_eq!(flow_of(&udp), Some((17, 12345, 9)));
        let mut v6 = udp.clone();
        v6[0] = 0x60;
        assert_eq!(flow_of(&v6), None);
        assert_eq!(flow_of(&udp[..10]), None);
        let mut icmp = udp.clone();
        icmp[9] = 1;
        assert_eq!(flow_of(&icmp), Some((1, 0, 0)));
    }
}
