//! The network namespace and the two TUN devices of one emulated link, set up with `ip` and torn
//! down by [`Setup`]'s `Drop`; namespaces left by a killed run are removed at the next start,
//! and Ctrl-C (SIGINT, SIGTERM) removes this process's before it exits.
//!
//! Addresses come from 198.18.0.0/15, the range RFC 2544 sets aside for benchmarking, so they
//! never collide with a network the machine is on; every packet stays on the two devices.

use std::fs::File;
use std::io;
use std::net::Ipv4Addr;
use std::os::fd::AsFd;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Once};
use std::thread;

use tun_tap::{Iface, Mode};

use super::link::MTU;

/// The prefix of every namespace keel-lab makes: `keel-lab-wan-<pid>-<n>`.
const NS_PREFIX: &str = "keel-lab-wan-";

/// Namespaces this process made and has not removed yet (for the signal handler).
static LIVE: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// A namespace with a TUN device in it, and its peer device in the root namespace.
#[derive(Debug)]
pub(crate) struct Setup {
    /// The namespace's name (under /run/netns).
    pub(crate) ns: String,
    /// The client's side: in the root namespace, `local`, peer `remote`.
    pub(crate) outside: Arc<Iface>,
    /// The host's side: in the namespace, `remote`, peer `local`.
    pub(crate) inside: Arc<Iface>,
    /// The root namespace's address on the link.
    pub(crate) local: Ipv4Addr,
    /// The namespace's address: where hosts under test bind.
    pub(crate) remote: Ipv4Addr,
}

/// Why the TUN path cannot run without privileges, for every error that says so.
pub(crate) const NEEDS_ROOT: &str = "the emulated link with packet loss needs root or \
    CAP_NET_ADMIN: it creates TUN devices and a network namespace, and loss must be applied to \
    packets (a userland TCP proxy sees bytes, and TCP's own retransmission is what loss is \
    meant to measure); run keel-lab as root, or without --loss-pct to use the userland proxy";

impl Setup {
    /// Makes the namespace and the devices, addressed and up.
    pub(crate) fn create() -> anyhow::Result<Setup> {
        static N: AtomicU64 = AtomicU64::new(0);
        static CLEAN: Once = Once::new();
        CLEAN.call_once(|| {
            remove_stale();
            install_signal_cleanup();
        });
        let pid = std::process::id();
        let n = N.fetch_add(1, Ordering::Relaxed);
        // A /24 of 198.18.0.0/16 no device has yet (another keel-lab may be running).
        let taken = Command::new("ip")
            .args(["-o", "-4", "addr", "show"])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default();
        let first = u64::from(pid) * 31 + n;
        let subnet = (0..254)
            .map(|i| ((first + i) % 254 + 1) as u8)
            .find(|s| !taken.contains(&format!(" 198.18.{s}.1 ")))
            .ok_or_else(|| anyhow::anyhow!("every 198.18.x.0/24 is in use"))?;
        let (local, remote) = (
            Ipv4Addr::new(198, 18, subnet, 1),
            Ipv4Addr::new(198, 18, subnet, 2),
        );
        // Device names: at most 15 bytes ("kw" + 7-digit pid + side + n).
        let outside = Arc::new(tun(&format!("kw{pid}a{n}"))?);
        let inside = Arc::new(tun(&format!("kw{pid}b{n}"))?);
        let ns = format!("{NS_PREFIX}{pid}-{n}");
        ip(&["netns", "add", &ns])?;
        LIVE.lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(ns.clone());
        // From here on, a failure drops the setup, which removes the namespace.
        let setup = Setup {
            ns,
            outside,
            inside,
            local,
            remote,
        };
        setup.configure()?;
        Ok(setup)
    }

    fn configure(&self) -> anyhow::Result<()> {
        let (a, b, ns) = (self.outside.name(), self.inside.name(), self.ns.as_str());
        let (local, remote) = (self.local.to_string(), self.remote.to_string());
        let mtu = MTU.to_string();
        ip(&["link", "set", "dev", b, "netns", ns])?;
        ip(&["addr", "add", &local, "peer", &remote, "dev", a])?;
        ip(&["link", "set", "dev", a, "mtu", &mtu, "up"])?;
        ip(&["-n", ns, "addr", "add", &remote, "peer", &local, "dev", b])?;
        ip(&["-n", ns, "link", "set", "dev", b, "mtu", &mtu, "up"])?;
        ip(&["-n", ns, "link", "set", "dev", "lo", "up"])?;
        Ok(())
    }

    /// Runs `f` on a thread inside the namespace and returns what it returns. Sockets it opens
    /// stay in the namespace, and so do threads it starts (a host's runtime and pool).
    pub(crate) fn run_in<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> anyhow::Result<T> {
        let path = format!("/run/netns/{}", self.ns);
        let p = path.clone();
        thread::Builder::new()
            .name("wan-netns".into())
            .spawn(move || {
                let ns = File::open(&p)?;
                rustix::thread::move_into_link_name_space(
                    ns.as_fd(),
                    Some(rustix::thread::LinkNameSpaceType::Network),
                )?;
                Ok::<_, io::Error>(f())
            })?
            .join()
            .map_err(|_| anyhow::anyhow!("the thread in the namespace panicked"))?
            .map_err(|e| anyhow::anyhow!("cannot enter the namespace {path}: {e}"))
    }
}

impl Drop for Setup {
    fn drop(&mut self) {
        // The devices go with their file descriptors (closed after this); the namespace is a
        // mount under /run/netns and must be removed.
        let _ = ip(&["netns", "del", &self.ns]);
        LIVE.lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|n| n != &self.ns);
    }
}

fn tun(name: &str) -> anyhow::Result<Iface> {
    Iface::without_packet_info(name, Mode::Tun).map_err(|e| match e.kind() {
        io::ErrorKind::PermissionDenied => anyhow::anyhow!("{NEEDS_ROOT} ({e})"),
        _ if !std::path::Path::new("/dev/net/tun").exists() => {
            anyhow::anyhow!("no /dev/net/tun on this machine: the emulated link with packet loss needs TUN devices ({e})")
        }
        _ => anyhow::anyhow!("cannot create the TUN device {name}: {e}"),
    })
}

/// Runs `ip ARGS`, failing with its stderr.
fn ip(args: &[&str]) -> anyhow::Result<()> {
    let out = Command::new("ip").args(args).output().map_err(|e| {
        anyhow::anyhow!("cannot run `ip` (iproute2), which the emulated link needs: {e}")
    })?;
    if out.status.success() {
        return Ok(());
    }
    let err = String::from_utf8_lossy(&out.stderr);
    if err.contains("Operation not permitted") || err.contains("Permission denied") {
        anyhow::bail!("{NEEDS_ROOT} (`ip {}`: {})", args.join(" "), err.trim());
    }
    anyhow::bail!("`ip {}` failed: {}", args.join(" "), err.trim())
}

/// Removes the namespaces of keel-lab processes that no longer run (a run that was killed).
pub(crate) fn remove_stale() {
    let Ok(out) = Command::new("ip").args(["netns", "list"]).output() else {
        return;
    };
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let name = line.split_whitespace().next().unwrap_or("");
        if let Some(pid) = stale_pid(name) {
            if !running(pid) {
                eprintln!("removing {name}, left by keel-lab process {pid} that no longer runs");
                let _ = ip(&["netns", "del", name]);
            }
        }
    }
}

/// Whether process `pid` runs (a zombie, killed and not yet reaped, does not).
fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/status")).is_ok_and(|s| {
        !s.lines()
            .any(|l| l.starts_with("State:") && l.contains('Z'))
    })
}

/// The process id in one of keel-lab's namespace names.
fn stale_pid(name: &str) -> Option<u32> {
    let rest = name.strip_prefix(NS_PREFIX)?;
    rest.split('-').next()?.parse().ok()
}

/// On SIGINT or SIGTERM, removes this process's namespaces and exits (130 / 143), since `Drop`
/// does not run when a signal ends the process.
fn install_signal_cleanup() {
    let _ = thread::Builder::new().name("wan-signals".into()).spawn(|| {
        use tokio::signal::unix::{signal, SignalKind};
        let Ok(rt) = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        else {
            return;
        };
        let code = rt.block_on(async {
            let (Ok(mut int), Ok(mut term)) = (
                signal(SignalKind::interrupt()),
                signal(SignalKind::terminate()),
            ) else {
                return None;
            };
            tokio::select! {
                _ = int.recv() => Some(130),
                _ = term.recv() => Some(143),
            }
        });
        let Some(code) = code else { return };
        for ns in LIVE.lock().unwrap_or_else(|e| e.into_inner()).drain(..) {
            let _ = ip(&["netns", "del", &ns]);
        }
        std::process::exit(code);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_names() {
        assert_eq!(stale_pid("keel-lab-wan-4242-3"), Some(4242));
        assert_eq!(stale_pid("keel-lab-wan-x-3"), None);
        assert_eq!(stale_pid("other-4242-3"), None);
        assert!(running(std::process::id()));
    }
}
