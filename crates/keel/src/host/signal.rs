//! Serving until the process is told to stop: SIGINT (Ctrl-C) or SIGTERM (what systemd,
//! Kubernetes and `docker stop` send), then the drain.

use super::{Host, ShutdownReport};
use crate::core::error::{Error, Kind};

impl Host {
    /// Serves until the process gets SIGINT (Ctrl-C) or SIGTERM, then shuts down as
    /// [`Host::shutdown`] does: not ready at once (`/readyz` answers 503), serving on for
    /// [`drain_grace`](super::HostBuilder::drain_grace), then GoAway and the drain of calls in
    /// flight within [`close_timeout`](super::HostBuilder::close_timeout). A second signal
    /// during the drain ends the process at once (exit status 130), as someone pressing Ctrl-C
    /// twice expects. Blocks; from async code use [`Host::serve_until_signal_async`].
    ///
    /// Fails only if the signal handlers cannot be installed (the host is shut down then). On
    /// platforms without Unix signals it waits for Ctrl-C.
    ///
    /// ```no_run
    /// # #[keel::contract] pub trait Echo { fn echo(&self, s: String) -> String; }
    /// # struct E;
    /// # impl Echo for E { fn echo(&self, s: String) -> String { s } }
    /// fn main() -> Result<(), keel::Error> {
    ///     let host = keel::Host::builder()
    ///         .service(EchoServer::new(E))
    ///         .endpoint("tcp://0.0.0.0:7000")
    ///         .drain_grace(std::time::Duration::from_secs(5))
    ///         .start()?;
    ///     let report = host.serve_until_signal()?;
    ///     eprintln!("stopped; {} calls abandoned", report.abandoned_calls);
    ///     Ok(())
    /// }
    /// ```
    ///
    /// # Panics
    ///
    /// When called from async code (it would block a runtime's thread until the signal).
    pub fn serve_until_signal(self) -> Result<ShutdownReport, Error> {
        if tokio::runtime::Handle::try_current().is_ok() {
            panic!(
                "keel: Host::serve_until_signal called from async code; \
                 use Host::serve_until_signal_async"
            );
        }
        let Some(handle) = self.runtime.handle() else {
            return Ok(ShutdownReport { abandoned_calls: 0 });
        };
        match handle.block_on(first_signal(handle.clone())) {
            Ok(()) => Ok(self.shutdown()),
            Err(e) => {
                self.shutdown();
                Err(e)
            }
        }
    }

    /// [`Host::serve_until_signal`] for async callers (a host on the caller's runtime, say):
    /// waits for SIGINT or SIGTERM without blocking a thread, then drains with
    /// [`Host::shutdown_async`].
    pub async fn serve_until_signal_async(self) -> Result<ShutdownReport, Error> {
        // The handlers and the second-signal task belong to the host's runtime (the caller's,
        // for a host on it), which outlives the drain.
        let signal = match self.runtime.handle() {
            Some(handle) => match handle.spawn(first_signal(handle.clone())).await {
                Ok(got) => got,
                Err(e) => Err(Error::new(
                    Kind::Config,
                    format!("the signal task failed: {e}"),
                )),
            },
            None => Ok(()),
        };
        match signal {
            Ok(()) => Ok(self.shutdown_async().await),
            Err(e) => {
                self.shutdown_async().await;
                Err(e)
            }
        }
    }
}

/// The stop signals, registered once: the first one starts the drain, and the same handlers
/// (so no signal can fall between two registrations) then wait for a second one.
struct StopSignals {
    #[cfg(unix)]
    interrupt: tokio::signal::unix::Signal,
    #[cfg(unix)]
    terminate: tokio::signal::unix::Signal,
}

impl StopSignals {
    /// Installs the handlers (in a runtime's context).
    fn install() -> Result<StopSignals, Error> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            Ok(StopSignals {
                interrupt: signal(SignalKind::interrupt()).map_err(install_failed)?,
                terminate: signal(SignalKind::terminate()).map_err(install_failed)?,
            })
        }
        #[cfg(not(unix))]
        Ok(StopSignals {})
    }

    /// The next signal's name.
    async fn next(&mut self) -> Result<&'static str, Error> {
        #[cfg(unix)]
        {
            Ok(tokio::select! {
                _ = self.interrupt.recv() => "SIGINT",
                _ = self.terminate.recv() => "SIGTERM",
            })
        }
        #[cfg(not(unix))]
        {
            tokio::signal::ctrl_c().await.map_err(install_failed)?;
            Ok("Ctrl-C")
        }
    }
}

fn install_failed(e: std::io::Error) -> Error {
    Error::new(
        Kind::Config,
        format!("cannot install the SIGINT/SIGTERM handlers: {e}"),
    )
    .with_source(e)
}

/// Waits for the first stop signal, then leaves a task on `handle` that ends the process at
/// the second.
async fn first_signal(handle: tokio::runtime::Handle) -> Result<(), Error> {
    let mut signals = StopSignals::install()?;
    let got = signals.next().await?;
    log::info!(target: "keel::host", "{got}: shutting down (a second signal exits at once)");
    handle.spawn(async move {
        if let Ok(got) = signals.next().await {
            eprintln!("keel: {got} during the drain: exiting now");
            std::process::exit(130);
        }
    });
    Ok(())
}
