//! The seed experiments, and what they share: the binding, host settings, latency summaries,
//! progress bars.
//!
//! Every experiment starts a real keel host (its own runtime and pool) and real clients over
//! real sockets in this process: blocking clients run on plain threads with keel's client
//! runtime, async clients on a runtime of the lab's own.

pub(crate) mod burst;
pub(crate) mod concurrent;
pub(crate) mod fire;
pub(crate) mod first_call;
pub(crate) mod frozen;
pub(crate) mod hedge;
pub(crate) mod idle;
pub(crate) mod isolation;
pub(crate) mod overload;
pub(crate) mod phases;
pub(crate) mod soak;
pub(crate) mod thread_server;

use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

pub(crate) use crate::dist::{round1, Dist, Latencies};

/// The transport the host listens on and the clients connect over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Binding {
    /// keel-wire over TCP on loopback.
    Tcp,
    /// keel-wire over TLS (wan experiments only so far).
    Tcps,
    /// `http://` spoken as HTTP/1.1 (wan experiments only so far).
    Http1,
    /// `http://` spoken as HTTP/2 with prior knowledge (wan experiments only so far).
    H2c,
    /// `https://` with HTTP/1.1 (wan experiments only so far).
    HttpsH1,
    /// `https://` with HTTP/2 (wan experiments only so far).
    HttpsH2,
    /// keel-wire over QUIC, one stream per call (wan experiments only, on the TUN link).
    Quic,
}

impl Binding {
    /// The endpoint URL a host binds for this binding (port 0: a free port).
    pub(crate) fn listen_url(self) -> &'static str {
        match self {
            Binding::Tcp => "tcp://127.0.0.1:0",
            Binding::Tcps => "tcps://127.0.0.1:0",
            Binding::Http1 | Binding::H2c => "http://127.0.0.1:0",
            Binding::HttpsH1 | Binding::HttpsH2 => "https://127.0.0.1:0",
            Binding::Quic => "quic://127.0.0.1:0",
        }
    }

    /// The binding's name as given on the command line.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Binding::Tcp => "tcp",
            Binding::Tcps => "tcps",
            Binding::Http1 => "http1",
            Binding::H2c => "h2c",
            Binding::HttpsH1 => "https-h1",
            Binding::HttpsH2 => "https-h2",
            Binding::Quic => "quic",
        }
    }
}

/// Host settings an experiment varies.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct HostSettings {
    /// Pool keep-alive (None: keel-pool's default).
    pub(crate) keep_alive: Option<Duration>,
    /// Clients that may call at once: pool `max_threads` and throttle `max_concurrent_calls`
    /// are raised to cover them (with headroom).
    pub(crate) clients: usize,
}

impl HostSettings {
    /// Pool threads and running calls that cover the clients, with headroom.
    fn room(&self) -> usize {
        (self.clients + self.clients / 10 + 16).max(1024)
    }

    /// `builder` with these settings.
    fn apply(&self, builder: keel::host::HostBuilder) -> keel::host::HostBuilder {
        let room = self.room();
        let builder = builder
            .max_threads(room)
            .max_concurrent_calls(room)
            .max_queued_calls(1024);
        match self.keep_alive {
            Some(keep_alive) => builder.thread_keep_alive(keep_alive),
            None => builder,
        }
    }
}

/// Starts a host serving seed 000's Calculator and seed 002's Service1 on `binding`.
pub(crate) fn start_host(binding: Binding, settings: HostSettings) -> anyhow::Result<keel::Host> {
    Ok(host_builder(binding, settings).start()?)
}

/// The builder of [`start_host`]'s host, for an experiment that adds to it (an admin
/// endpoint).
pub(crate) fn host_builder(binding: Binding, settings: HostSettings) -> keel::host::HostBuilder {
    use keel_examples::calculator::{Calc, CalculatorServer};
    use keel_examples::service1::{Service1Impl, Service1Server};
    settings.apply(
        keel::Host::builder()
            .service(CalculatorServer::new(Calc))
            .service(Service1Server::new(Service1Impl))
            .endpoint(binding.listen_url()),
    )
}

/// A short name for how a call failed, for counting errors by kind.
pub(crate) fn error_kind(e: &keel::Error) -> String {
    let kind = if e.is_busy() {
        "busy"
    } else if e.is_timeout() {
        "timeout"
    } else if e.is_connection() {
        "connection"
    } else if e.is_shutting_down() {
        "shutting_down"
    } else if e.is_protocol() {
        "protocol"
    } else if e.is_fault() {
        "fault"
    } else if e.is_handler_panic() {
        "handler_panic"
    } else if e.is_cancelled() {
        "cancelled"
    } else if e.is_too_large() {
        "too_large"
    } else if e.is_bad_request() {
        "bad_request"
    } else if e.is_unknown_operation() {
        "unknown_operation"
    } else if let Some(code) = e.status_code() {
        return format!("status_{code:?}").to_lowercase();
    } else {
        "other"
    };
    kind.to_string()
}

/// Microseconds in `d`, to 0.1 µs.
pub(crate) fn us(d: Duration) -> f64 {
    round1(d.as_nanos() as f64 / 1000.0)
}

/// Milliseconds in `d`, to 0.1 ms.
pub(crate) fn ms(d: Duration) -> f64 {
    round1(d.as_nanos() as f64 / 1e6)
}

/// A progress bar on stderr (hidden when stderr is not a terminal) of `len` steps.
pub(crate) fn bar(len: u64, msg: impl Into<String>) -> ProgressBar {
    let pb = ProgressBar::new(len);
    pb.set_style(
        ProgressStyle::with_template("{spinner} {msg:<32} [{bar:30}] {pos}/{len} {elapsed}")
            .expect("valid template")
            .progress_chars("=> "),
    );
    pb.set_message(msg.into());
    pb
}

/// A spinner on stderr with `msg`, ticking on its own.
pub(crate) fn spinner(msg: impl Into<String>) -> ProgressBar {
    let pb = ProgressBar::new_spinner();
    pb.set_style(
        ProgressStyle::with_template("{spinner} {msg} {elapsed}").expect("valid template"),
    );
    pb.set_message(msg.into());
    pb.enable_steady_tick(Duration::from_millis(100));
    pb
}

/// Sleeps `d` while showing a progress bar (in 100 ms steps), cleared before returning so that
/// nothing draws while the caller measures.
pub(crate) fn idle_with_progress(d: Duration, msg: &str) {
    let until = Instant::now() + d;
    let pb = bar(d.as_millis() as u64, msg);
    loop {
        let now = Instant::now();
        if now >= until {
            break;
        }
        std::thread::sleep((until - now).min(Duration::from_millis(100)));
        pb.set_position(
            d.saturating_sub(until.saturating_duration_since(Instant::now()))
                .as_millis() as u64,
        );
    }
    pb.finish_and_clear();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dist_of_known_values() {
        let mut l = Latencies::new();
        for i in 1..=100u64 {
            l.record(Duration::from_micros(i));
        }
        let d = l.dist();
        assert_eq!(d.count, 100);
        assert_eq!(d.min_us, 1.0);
        assert!((d.p50_us - 50.0).abs() < 0.1, "{d:?}");
        assert!((d.p99_us - 99.0).abs() < 0.1, "{d:?}");
        assert!((d.max_us - 100.0).abs() < 0.1, "{d:?}");
    }

    #[test]
    fn host_config_covers_the_clients() {
        let settings = HostSettings {
            keep_alive: Some(Duration::from_secs(1)),
            clients: 1000,
        };
        let host = settings
            .apply(keel::Host::builder().worker_threads(1))
            .start()
            .unwrap();
        let cfg = host.config().clone();
        host.shutdown();
        assert!(cfg.pool.max_threads.unwrap() >= 1100);
        assert!(cfg.throttle.max_concurrent_calls >= 1100);
        assert_eq!(cfg.pool.keep_alive, Some(Duration::from_secs(1)));
    }

    #[test]
    fn units() {
        assert_eq!(us(Duration::from_nanos(13_549)), 13.5);
        assert_eq!(ms(Duration::from_micros(2_003_460)), 2003.5);
    }
}
