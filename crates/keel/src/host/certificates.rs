//! Certificate rotation: a host's TLS settings replaced while it runs, by
//! [`Host::reload_tls`](super::Host::reload_tls) or by watching the files they were read from
//! ([`HostBuilder::watch_tls_files`](super::HostBuilder::watch_tls_files)). New handshakes
//! take the new certificate at once; connections already open keep the one they agreed on.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::tls::ServerTls;
use crate::transport::tls::{AcceptorSlot, PemContents};

/// The TLS endpoints of a host, and what reloading them did.
#[derive(Debug, Default)]
pub(crate) struct Certificates {
    slots: Vec<Arc<AcceptorSlot>>,
    /// The `quic://` endpoints' (bound after the others' slots are made).
    #[cfg(feature = "quic")]
    quic: parking_lot::Mutex<Vec<crate::bindings::quic::server::QuicTlsSlot>>,
    reloads: AtomicU64,
    failures: AtomicU64,
}

impl Certificates {
    /// The reloadable acceptors of a host's TLS endpoints.
    pub(crate) fn new(slots: Vec<Arc<AcceptorSlot>>) -> Certificates {
        Certificates {
            slots,
            ..Certificates::default()
        }
    }

    /// Every TLS endpoint's handshakes use `tls` from now on.
    pub(crate) fn replace(&self, tls: &ServerTls) {
        for slot in &self.slots {
            slot.replace(tls);
        }
        #[cfg(feature = "quic")]
        for slot in self.quic.lock().iter() {
            // Checked by `check` first; settings it refuses keep the current certificate.
            if let Err(e) = slot.replace(tls) {
                log::warn!("keel: the quic:// endpoint keeps its certificate: {e}");
            }
        }
        self.reloads.fetch_add(1, Ordering::Relaxed);
    }

    /// A `quic://` endpoint's slot, replaced with the others from now on.
    #[cfg(feature = "quic")]
    pub(crate) fn add_quic(&self, slot: crate::bindings::quic::server::QuicTlsSlot) {
        self.quic.lock().push(slot);
    }

    /// Whether `tls` can serve every endpoint (QUIC needs TLS 1.3 with its cipher suites).
    pub(crate) fn check(&self, tls: &ServerTls) -> Result<(), crate::Error> {
        #[cfg(feature = "quic")]
        for slot in self.quic.lock().iter() {
            slot.check(tls)?;
        }
        let _ = tls;
        Ok(())
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Settings replaced since start.
    pub(crate) fn reloads(&self) -> u64 {
        self.reloads.load(Ordering::Relaxed)
    }

    /// Files refused since start (unreadable, malformed, or a key that does not match).
    pub(crate) fn failures(&self) -> u64 {
        self.failures.load(Ordering::Relaxed)
    }

    /// Reads `tls`'s files every `every`; when their contents change, makes the settings
    /// again and replaces the endpoints' (or, if the new files are refused, logs why and keeps
    /// the current certificate, trying again when the files change again). Runs until the
    /// host's runtime stops it.
    pub(crate) async fn watch(self: Arc<Self>, tls: ServerTls, every: Duration) {
        // What the host's settings were made from, read before it started: a change made
        // since is seen at the first tick.
        let mut last: Option<PemContents> = tls.made_from().cloned();
        // The last read that failed, logged once while it lasts (a file still missing).
        let mut unreadable: Option<String> = None;
        let mut ticks = tokio::time::interval(every);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticks.tick().await;
        loop {
            ticks.tick().await;
            // Files are read off the runtime's workers.
            let reader = tls.clone();
            let read = match tokio::task::spawn_blocking(move || reader.read_files()).await {
                Ok(Some(read)) => read,
                Ok(None) | Err(_) => return,
            };
            let contents = match read {
                Ok(contents) => {
                    unreadable = None;
                    contents
                }
                Err(e) => {
                    let text = e.to_string();
                    if unreadable.as_deref() != Some(text.as_str()) {
                        self.refused(&text);
                        unreadable = Some(text);
                    }
                    continue;
                }
            };
            if last.as_ref() == Some(&contents) {
                continue;
            }
            // Each new content is tried once: refused, it is not tried (nor counted) again
            // until the files change.
            match tls
                .remake(&contents)
                .and_then(|new| self.check(&new).map(|()| new))
            {
                Ok(new) => {
                    self.replace(&new);
                    log::info!("keel: TLS certificate reloaded from its files");
                }
                Err(e) => self.refused(&e.to_string()),
            }
            last = Some(contents);
        }
    }

    /// New files were refused: counted and logged; the current certificate stays.
    fn refused(&self, why: &str) {
        self.failures.fetch_add(1, Ordering::Relaxed);
        log::warn!(
            "keel: new TLS certificate files refused, the current certificate is kept: {why}"
        );
    }
}
