//! One cell of seed 004: a binding and mode, an RTT, a payload, on one emulated link (the proxy,
//! or the TUN link with random loss). A fresh client makes its first call (connect included),
//! then calls for a while, `concurrency` of them in flight on its one connection; the link
//! counts its connections. Over TLS, a second client sharing the first one's TLS settings then
//! makes a first call that may resume the session. Raw TCP makes the same calls, one at a time,
//! through a link with the same settings in the same run.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use keel::ByteStream;
use keel_examples::wan::{WanClient, SMALL};
use serde::Serialize;

use super::netem::NetemStats;
use super::path::{LinkKind, LinkSpec, Wan};
use super::proxy::{LinkConfig, Proxy};
use super::raw::{self, RawServer};
use super::{Mode, Payload, Variant};
use crate::experiments::Binding;
use crate::verdict::{self, Verdict, WanMeasured};

/// Chunks of a streamed upload (a file read 64 KiB at a time).
const STREAM_CHUNK: usize = 64 * 1024;

/// The settings of one cell.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Params {
    /// Binding and mode.
    pub(crate) variant: Variant,
    /// The link's round-trip time, ms.
    pub(crate) rtt_ms: f64,
    /// Small or large.
    pub(crate) payload: Payload,
    /// The link's cap each way, bytes/s (`None`: uncapped).
    pub(crate) bytes_per_sec: Option<u64>,
    /// How long the timed calls run, s.
    pub(crate) seconds: f64,
    /// The fewest timed calls, however long they take.
    pub(crate) min_calls: u64,
    /// Which emulator carries the calls.
    pub(crate) link: LinkKind,
    /// Random loss each way, percent (TUN link only).
    pub(crate) loss_pct: f64,
    /// Seeds the loss generator.
    pub(crate) seed: u64,
    /// Calls in flight at once on the client's one connection.
    pub(crate) concurrency: usize,
    /// quic: the congestion controller of both ends (each for what it sends).
    pub(crate) congestion: keel::client::QuicCongestion,
}

impl Params {
    /// Seed 004's own setting, for the fields the matrix does not vary: the proxy, no loss, one
    /// call at a time (the binding, RTT and payload are placeholders to override).
    pub(crate) fn seed_004() -> Params {
        Params {
            variant: Variant {
                binding: Binding::Tcp,
                mode: super::Mode::Buffered,
            },
            rtt_ms: 200.0,
            payload: Payload::Small,
            bytes_per_sec: None,
            seconds: 10.0,
            min_calls: 5,
            link: LinkKind::Proxy,
            loss_pct: 0.0,
            seed: 0,
            concurrency: 1,
            congestion: keel::client::QuicCongestion::Bbr,
        }
    }

    /// The emulated link.
    pub(crate) fn link_spec(&self) -> LinkSpec {
        LinkSpec {
            kind: self.link,
            rtt: Duration::from_secs_f64(self.rtt_ms / 1000.0),
            bytes_per_sec: self.bytes_per_sec,
            loss_pct: self.loss_pct,
            seed: self.seed,
        }
    }

    /// Whether seed 004's bar applies: one call at a time on a lossless link (the bar's
    /// limits are for that; other settings are measured and reported, with no bar).
    pub(crate) fn has_bar(&self) -> bool {
        self.loss_pct == 0.0 && self.concurrency == 1
    }
}

/// Raw TCP on the same link: the limit, and the first call the bar is relative to.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub(crate) struct RawRef {
    /// Sequential calls per second.
    pub(crate) calls_per_sec: f64,
    /// The first call of a fresh connection, connect included, ms.
    pub(crate) first_call_ms: f64,
}

/// Measures raw TCP through a link with `p`'s settings, with `p`'s payload and timing.
pub(crate) fn measure_raw(p: &Params) -> anyhow::Result<RawRef> {
    anyhow::ensure!(p.rtt_ms > 0.0, "the RTT must be positive");
    let mut wan = Wan::start(p.link_spec())?;
    let server = wan.serve(RawServer::start_at)??;
    let addr = wan.front(server.addr())?;
    let r = raw::run(addr, &p.payload.bytes(), p.seconds, p.min_calls)?;
    Ok(RawRef {
        calls_per_sec: r.calls_per_sec(),
        first_call_ms: crate::experiments::ms(r.first_call),
    })
}

/// Pays the process's one-time costs before anything is timed: thread and buffer start-up of the
/// proxy and the raw peer, and each binding's first connection (TLS set-up, lazy statics), with
/// one call of each kind straight to a host, no proxy.
pub(crate) fn warm_up(rt: &tokio::runtime::Runtime, bindings: &[Binding]) -> anyhow::Result<()> {
    let server = RawServer::start()?;
    let proxy = Proxy::start(server.addr(), LinkConfig::new(Duration::ZERO))?;
    raw::run(proxy.addr(), &Payload::Small.bytes(), 0.0, 1)?;
    for &binding in bindings {
        let host = super::start_host(binding)?;
        let client = WanClient::new(binding.channel_builder(host.url())?.build()?);
        rt.block_on(async {
            for mode in [Mode::Buffered, Mode::Streamed] {
                for payload in [Payload::Small, Payload::Large] {
                    one_call(&client, mode, &payload.bytes()).await?;
                }
            }
            client.close().await;
            Ok::<_, anyhow::Error>(())
        })?;
        host.shutdown();
    }
    Ok(())
}

/// What keel did in one cell.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub(crate) struct KeelRun {
    /// The fresh client's first call, connect included.
    pub(crate) first_call: Duration,
    /// Timed calls after the first.
    pub(crate) calls: u64,
    /// Their duration.
    pub(crate) elapsed: Duration,
    /// Connections the link saw the client open (before the resumed client's).
    pub(crate) connections: u64,
    /// The timed calls' 99th percentile latency.
    pub(crate) p99: Duration,
    /// Over TLS: the first call of a second fresh client sharing the first one's TLS settings
    /// (and so its session cache), connect included. `None` for plain bindings.
    pub(crate) resumed_first_call: Option<Duration>,
    /// The same for a third such client whose first call is not idempotent (`echo_once`, the
    /// small payload): on `quic://` it may not go as 0-RTT data.
    pub(crate) resumed_non_idempotent_first_call: Option<Duration>,
    /// What the TUN link counted (`None` on the proxy).
    pub(crate) link: Option<NetemStats>,
}

/// One cell's result (`keel-lab wan --json` prints it).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct WanCell {
    /// `wan`.
    pub(crate) experiment: &'static str,
    /// The binding.
    pub(crate) binding: Binding,
    /// Buffered or streamed.
    pub(crate) mode: Mode,
    /// Small or large.
    pub(crate) payload: Payload,
    /// Bytes sent up per call.
    pub(crate) payload_bytes: usize,
    /// The link's RTT, ms.
    pub(crate) rtt_ms: f64,
    /// The link's cap each way, bytes/s (null: uncapped).
    pub(crate) bandwidth_bytes_per_sec: Option<u64>,
    /// The emulator: `proxy` or `tun`.
    pub(crate) link: LinkKind,
    /// Random loss each way, percent.
    pub(crate) loss_pct: f64,
    /// The loss generator's seed (null on a lossless link).
    pub(crate) seed: Option<u64>,
    /// Calls in flight at once on the one connection.
    pub(crate) concurrency: usize,
    /// quic: the congestion controller of both ends, `bbr` or `cubic` (null for the other
    /// bindings: the kernel's TCP).
    pub(crate) quic_congestion: Option<&'static str>,
    /// Timed calls (after the first).
    pub(crate) calls: u64,
    /// keel's sequential calls per second.
    pub(crate) calls_per_sec: f64,
    /// The timed calls' 99th percentile latency, ms.
    pub(crate) p99_ms: f64,
    /// The limit: for the small payload 1000/RTT, or raw TCP through the same link in the same
    /// run where that is less; raw TCP in the same run for the large. With N calls in flight,
    /// N times that (for the large payload, at most what the cap carries).
    pub(crate) limit_calls_per_sec: f64,
    /// `1/RTT`, `raw TCP`, `N × 1/RTT`, `N × raw TCP` or `the cap`.
    pub(crate) limit: String,
    /// Raw TCP's calls/s on the same link in the same run (for both payloads).
    pub(crate) raw_calls_per_sec: f64,
    /// `calls_per_sec / limit_calls_per_sec`.
    pub(crate) ratio: f64,
    /// A fresh client's first call, connect included, ms.
    pub(crate) first_call_ms: f64,
    /// The same in RTTs.
    pub(crate) first_call_rtts: f64,
    /// Over TLS, a client that talked to the host before (a second client sharing the first
    /// one's TLS settings, so it can resume the TLS session): its first call, connect included,
    /// ms. Null for plain bindings, which have nothing to resume.
    pub(crate) resumed_first_call_ms: Option<f64>,
    /// The same in RTTs.
    pub(crate) resumed_first_call_rtts: Option<f64>,
    /// The same for a first call that is not `#[keel(idempotent)]` (`echo_once`, the small
    /// payload, whatever the cell's), ms: on `quic://` it waits for the handshake.
    pub(crate) resumed_non_idempotent_first_call_ms: Option<f64>,
    /// The same in RTTs.
    pub(crate) resumed_non_idempotent_first_call_rtts: Option<f64>,
    /// Raw TCP's first call (connect + 1 RTT + transfer), ms.
    pub(crate) raw_first_call_ms: f64,
    /// Connections the client opened, counted by the link (the proxy's accepts, or the TUN
    /// link's distinct flows).
    pub(crate) connections_opened: u64,
    /// The same as `connections_opened` (the key issue 36 names).
    pub(crate) connections: u64,
    /// What the TUN link counted: packets each way, dropped at random, dropped by the queue.
    pub(crate) link_stats: Option<NetemStats>,
    /// The error that stopped keel's calls, if one did (the cell then fails; numbers are null).
    pub(crate) error: Option<String>,
    /// Whether the bar was met.
    pub(crate) pass: bool,
    /// The bar and any reasons it was missed.
    pub(crate) verdict: Verdict,
}

/// Runs keel's side of a cell on `rt` (the lab's client runtime) and evaluates it against
/// `raw`, measured before on the same link. A call that fails makes a failed cell, not an error:
/// the other cells still run.
pub(crate) fn run(rt: &tokio::runtime::Runtime, p: &Params, raw: &RawRef) -> WanCell {
    match run_keel(rt, p) {
        Ok(k) => evaluate(p, &k, raw),
        Err(e) => failed(p, raw, &format!("{e:#}")),
    }
}

/// keel's calls through a fresh link in front of a fresh host.
pub(crate) fn run_keel(rt: &tokio::runtime::Runtime, p: &Params) -> anyhow::Result<KeelRun> {
    anyhow::ensure!(p.rtt_ms > 0.0, "the RTT must be positive");
    anyhow::ensure!(p.concurrency >= 1, "--concurrency must be at least 1");
    let binding = p.variant.binding;
    anyhow::ensure!(
        !(binding.over_udp() && p.link == LinkKind::Proxy),
        "{} runs over UDP, which the proxy does not carry: use --link tun (root)",
        binding.name()
    );
    let mut wan = Wan::start(p.link_spec())?;
    let congestion = p.congestion;
    let host = wan.serve(move |ip| super::start_host_at(binding, ip, congestion))??;
    let addr = wan.front(super::addr_of(host.url())?)?;
    let url = super::via(host.url(), addr)?;
    // One TLS configuration for both clients: the second finds the first one's session.
    let tls = if binding.is_tls() {
        Some(super::client_tls_for(&url)?)
    } else {
        None
    };
    let channel = |tls| {
        binding
            .channel_builder_with(&url, tls)
            .quic_congestion(congestion)
            .build()
    };
    let client = WanClient::new(channel(tls.clone())?);
    let payload = p.payload.bytes();
    let mode = p.variant.mode;
    let result = rt.block_on(async {
        let t = Instant::now();
        one_call(&client, mode, &payload).await?;
        let first_call = t.elapsed();
        let start = Instant::now();
        let until = start + Duration::from_secs_f64(p.seconds);
        if p.concurrency == 1 {
            // Seed 004's loop, on this task as before the concurrency option: nothing between
            // one call and the next.
            let mut latencies = Vec::new();
            while (latencies.len() as u64) < p.min_calls || Instant::now() < until {
                let t = Instant::now();
                one_call(&client, mode, &payload).await?;
                latencies.push(t.elapsed());
            }
            return Ok((first_call, latencies, start.elapsed()));
        }
        let done = Arc::new(AtomicU64::new(0));
        let workers = (0..p.concurrency).map(|_| {
            let (client, payload, done) = (client.clone(), payload.clone(), done.clone());
            let min_calls = p.min_calls;
            tokio::spawn(async move {
                let mut latencies = Vec::new();
                while done.load(Ordering::Relaxed) < min_calls || Instant::now() < until {
                    let t = Instant::now();
                    one_call(&client, mode, &payload).await?;
                    latencies.push(t.elapsed());
                    done.fetch_add(1, Ordering::Relaxed);
                }
                Ok::<_, anyhow::Error>(latencies)
            })
        });
        let mut latencies = Vec::new();
        for w in workers.collect::<Vec<_>>() {
            latencies.extend(w.await??);
        }
        let elapsed = start.elapsed();
        Ok::<_, anyhow::Error>((first_call, latencies, elapsed))
    });
    let (first_call, latencies, elapsed) = result?;
    let connections = wan.connections();
    rt.block_on(client.close());
    let (resumed_first_call, resumed_non_idempotent_first_call) = match tls {
        Some(tls) => {
            let again = WanClient::new(channel(Some(tls.clone()))?);
            let t = Instant::now();
            rt.block_on(one_call(&again, mode, &payload))?;
            let d = t.elapsed();
            rt.block_on(again.close());
            let third = WanClient::new(channel(Some(tls))?);
            let t = Instant::now();
            let r = rt.block_on(third.echo_once(SMALL.to_string()))?;
            anyhow::ensure!(r == SMALL, "wrong echo {r:?}");
            let once = t.elapsed();
            rt.block_on(third.close());
            (Some(d), Some(once))
        }
        None => (None, None),
    };
    let link = wan.stats();
    host.shutdown();
    drop(wan);
    Ok(KeelRun {
        first_call,
        calls: latencies.len() as u64,
        elapsed,
        connections,
        p99: percentile(&latencies, 0.99),
        resumed_first_call,
        resumed_non_idempotent_first_call,
        link,
    })
}

/// The `q` quantile of `d` (nearest rank; zero for none).
fn percentile(d: &[Duration], q: f64) -> Duration {
    let mut v = d.to_vec();
    v.sort_unstable();
    match v.len() {
        0 => Duration::ZERO,
        n => v[((q * n as f64).ceil() as usize).clamp(1, n) - 1],
    }
}

/// One call of the seed's: the small payload echoed, or the large one uploaded.
async fn one_call(client: &WanClient, mode: Mode, payload: &keel::Bytes) -> anyhow::Result<()> {
    let small = payload.len() <= raw::ECHO_MAX;
    match (mode, small) {
        (Mode::Buffered, true) => {
            let r = client.echo(SMALL.to_string()).await?;
            anyhow::ensure!(r == SMALL, "wrong echo {r:?}");
        }
        (Mode::Streamed, true) => {
            let mut s = client
                .echo_stream(ByteStream::from_bytes(payload.clone()))
                .await?;
            let mut back = Vec::new();
            while let Some(chunk) = s.next().await {
                back.extend_from_slice(&chunk?);
            }
            anyhow::ensure!(back == payload[..], "wrong streamed echo");
        }
        (Mode::Buffered, false) => {
            let n = client.upload(payload.to_vec()).await?;
            anyhow::ensure!(n == payload.len() as u64, "{n} bytes arrived");
        }
        (Mode::Streamed, false) => {
            let n = client.upload_stream(chunked(payload.clone())).await?;
            anyhow::ensure!(n == payload.len() as u64, "{n} bytes arrived");
        }
    }
    Ok(())
}

/// `b` as a stream of [`STREAM_CHUNK`]-byte slices (no copies).
fn chunked(b: keel::Bytes) -> ByteStream {
    let n = b.len();
    ByteStream::from_iter(
        (0..n.div_ceil(STREAM_CHUNK))
            .map(move |i| b.slice(i * STREAM_CHUNK..((i + 1) * STREAM_CHUNK).min(n))),
    )
}

/// Builds the result and its verdict from the measurements.
pub(crate) fn evaluate(p: &Params, k: &KeelRun, raw: &RawRef) -> WanCell {
    let calls_per_sec = k.calls as f64 / k.elapsed.as_secs_f64();
    let (one, one_name) = match p.payload {
        // The link's own limit: 1/RTT, or what raw TCP makes through the same proxy if that
        // is less (at 1 ms the proxy's and this VM's thread wake-ups cost ~10 %).
        Payload::Small if raw.calls_per_sec < 1000.0 / p.rtt_ms => (raw.calls_per_sec, "raw TCP"),
        Payload::Small => (1000.0 / p.rtt_ms, "1/RTT"),
        Payload::Large => (raw.calls_per_sec, "raw TCP"),
    };
    let n = p.concurrency.max(1);
    let (limit_calls_per_sec, limit) = match (n, p.bytes_per_sec) {
        (1, _) => (one, one_name.to_string()),
        (n, Some(cap)) if cap as f64 / p.payload.bytes().len() as f64 <= n as f64 * one => (
            cap as f64 / p.payload.bytes().len() as f64,
            "the cap".to_string(),
        ),
        (n, _) => (n as f64 * one, format!("{n} × {one_name}")),
    };
    let first_call_ms = crate::experiments::ms(k.first_call);
    let resumed_first_call_ms = k.resumed_first_call.map(crate::experiments::ms);
    let resumed_once_ms = k
        .resumed_non_idempotent_first_call
        .map(crate::experiments::ms);
    let verdict = verdict::wan(&WanMeasured {
        calls_per_sec,
        limit_calls_per_sec,
        connections: k.connections,
        first_call_ms,
        raw_first_call_ms: raw.first_call_ms,
        rtt_ms: p.rtt_ms,
        tls: p.variant.binding.is_tls(),
        beyond_initial_window: p.payload == Payload::Large
            && p.variant.binding.initial_window(p.variant.mode) < p.payload.bytes().len(),
    });
    let verdict = if p.has_bar() {
        verdict
    } else {
        Verdict {
            pass: true,
            bar: format!(
                "none at {} % loss with {n} in flight: measured (seed 004's bar is for one call \
                 at a time on a lossless link)",
                p.loss_pct
            ),
            reasons: Vec::new(),
        }
    };
    WanCell {
        experiment: "wan",
        binding: p.variant.binding,
        mode: p.variant.mode,
        payload: p.payload,
        payload_bytes: p.payload.bytes().len(),
        rtt_ms: p.rtt_ms,
        bandwidth_bytes_per_sec: p.bytes_per_sec,
        link: p.link,
        loss_pct: p.loss_pct,
        seed: (p.loss_pct > 0.0).then_some(p.seed),
        concurrency: n,
        quic_congestion: p.variant.binding.over_udp().then_some(match p.congestion {
            keel::client::QuicCongestion::Cubic => "cubic",
            _ => "bbr",
        }),
        calls: k.calls,
        calls_per_sec: round3(calls_per_sec),
        p99_ms: round3(crate::experiments::ms(k.p99)),
        limit_calls_per_sec: round3(limit_calls_per_sec),
        limit,
        raw_calls_per_sec: round3(raw.calls_per_sec),
        ratio: round3(calls_per_sec / limit_calls_per_sec),
        first_call_ms,
        first_call_rtts: round3(first_call_ms / p.rtt_ms),
        resumed_first_call_ms,
        resumed_first_call_rtts: resumed_first_call_ms.map(|ms| round3(ms / p.rtt_ms)),
        resumed_non_idempotent_first_call_ms: resumed_once_ms,
        resumed_non_idempotent_first_call_rtts: resumed_once_ms.map(|ms| round3(ms / p.rtt_ms)),
        raw_first_call_ms: raw.first_call_ms,
        connections_opened: k.connections,
        connections: k.connections,
        link_stats: k.link,
        error: None,
        pass: verdict.pass,
        verdict,
    }
}

/// A cell whose calls failed with `error`.
pub(crate) fn failed(p: &Params, raw: &RawRef, error: &str) -> WanCell {
    let k = KeelRun::default();
    let mut c = evaluate(p, &k, raw);
    for x in [
        &mut c.calls_per_sec,
        &mut c.ratio,
        &mut c.first_call_ms,
        &mut c.first_call_rtts,
        &mut c.p99_ms,
    ] {
        *x = f64::NAN;
    }
    c.error = Some(error.to_string());
    c.verdict.reasons = vec![format!("error: {error}")];
    c.verdict.pass = false;
    c.pass = false;
    c
}

/// Three significant decimals for the JSON.
fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// The readable summary of one cell.
pub(crate) fn summary(c: &WanCell) -> String {
    let cap = c
        .bandwidth_bytes_per_sec
        .map_or("uncapped".to_string(), |b| {
            format!("{} KB/s each way", b / 1000)
        });
    let link = match c.seed {
        Some(seed) => format!("the TUN link, {} % loss each way (seed {seed})", c.loss_pct),
        None if c.link == LinkKind::Tun => "the TUN link, no loss".to_string(),
        None => "the proxy".to_string(),
    };
    let mut s = format!(
        "wan (seed 004): {} {}, {} payload ({} bytes), RTT {} ms, {cap}, {link}, {} in flight\n",
        c.binding.name(),
        c.mode.name(),
        c.payload.name(),
        c.payload_bytes,
        c.rtt_ms,
        c.concurrency
    );
    if let Some(e) = &c.error {
        s.push_str(&format!("  keel's calls failed: {e}\n"));
    }
    s.push_str(&format!(
        "  keel {:.2} calls/s ({} calls, p99 {:.1} ms); limit ({}) {:.2} calls/s: {:.3} × the limit; raw TCP {:.2} calls/s\n",
        c.calls_per_sec, c.calls, c.p99_ms, c.limit, c.limit_calls_per_sec, c.ratio, c.raw_calls_per_sec
    ));
    s.push_str(&format!(
        "  first call of a fresh client {:.1} ms = {:.2} RTT (raw TCP {:.1} ms = {:.2} RTT); {} connection(s) opened\n",
        c.first_call_ms,
        c.first_call_rtts,
        c.raw_first_call_ms,
        c.raw_first_call_ms / c.rtt_ms,
        c.connections_opened
    ));
    if let (Some(ms), Some(rtts)) = (c.resumed_first_call_ms, c.resumed_first_call_rtts) {
        s.push_str(&format!(
            "  first call of a client that talked to the host before (TLS session cache) {ms:.1} ms = {rtts:.2} RTT\n"
        ));
    }
    if let (Some(ms), Some(rtts)) = (
        c.resumed_non_idempotent_first_call_ms,
        c.resumed_non_idempotent_first_call_rtts,
    ) {
        s.push_str(&format!(
            "  the same, a call not marked idempotent {ms:.1} ms = {rtts:.2} RTT\n"
        ));
    }
    if let Some(l) = &c.link_stats {
        s.push_str(&format!(
            "  link: {} packets up ({} lost, {} queue drops), {} down ({} lost, {} queue drops)\n",
            l.up_packets,
            l.up_lost,
            l.up_queue_full,
            l.down_packets,
            l.down_lost,
            l.down_queue_full
        ));
    }
    s.push_str(&crate::experiments::first_call::verdict_line(&c.verdict));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(payload: Payload, binding: Binding) -> Params {
        Params {
            variant: Variant {
                binding,
                mode: Mode::Streamed,
            },
            rtt_ms: 200.0,
            payload,
            bytes_per_sec: payload.default_cap(),
            seconds: 10.0,
            min_calls: 5,
            ..Params::seed_004()
        }
    }

    fn keel(calls: u64, secs: f64, first_ms: u64, connections: u64) -> KeelRun {
        KeelRun {
            first_call: Duration::from_millis(first_ms),
            calls,
            elapsed: Duration::from_secs_f64(secs),
            connections,
            ..KeelRun::default()
        }
    }

    #[test]
    fn small_calls_are_held_to_one_over_rtt() {
        let raw = RawRef {
            calls_per_sec: 5.0,
            first_call_ms: 400.4,
        };
        let c = evaluate(
            &params(Payload::Small, Binding::Tcp),
            &keel(49, 10.0, 402, 1),
            &raw,
        );
        assert_eq!(c.limit_calls_per_sec, 5.0);
        assert_eq!(c.limit, "1/RTT");
        assert!(c.pass, "{:?}", c.verdict);
        assert_eq!(c.first_call_rtts, 2.01);
        // Where raw TCP through the same proxy makes less than 1/RTT, that is the limit.
        let slow = RawRef {
            calls_per_sec: 4.5,
            ..raw
        };
        let c = evaluate(
            &params(Payload::Small, Binding::Tcp),
            &keel(44, 10.0, 402, 1),
            &slow,
        );
        assert_eq!((c.limit.as_str(), c.limit_calls_per_sec), ("raw TCP", 4.5));
        assert!(c.pass, "{:?}", c.verdict);
        let c = evaluate(
            &params(Payload::Small, Binding::Tcp),
            &keel(42, 10.0, 402, 1),
            &slow,
        );
        assert!(!c.pass);
        // The seed's HTTP: two round trips per call.
        let c = evaluate(
            &params(Payload::Small, Binding::Http1),
            &keel(25, 10.0, 402, 1),
            &raw,
        );
        assert!(!c.pass);
        // An extra round trip before the first call (handshake not pipelined).
        let c = evaluate(
            &params(Payload::Small, Binding::Tcp),
            &keel(49, 10.0, 602, 1),
            &raw,
        );
        assert!(!c.pass);
        // TLS may take one more.
        let c = evaluate(
            &params(Payload::Small, Binding::Tcps),
            &keel(49, 10.0, 602, 1),
            &raw,
        );
        assert!(c.pass, "{:?}", c.verdict);
    }

    #[test]
    fn large_calls_are_held_to_raw_tcp() {
        let raw = RawRef {
            calls_per_sec: 3.0,
            first_call_ms: 520.0,
        };
        let p = params(Payload::Large, Binding::Tcp);
        let c = evaluate(&p, &keel(29, 10.0, 530, 1), &raw);
        assert_eq!(c.limit, "raw TCP");
        assert_eq!(c.limit_calls_per_sec, 3.0);
        assert!(c.pass, "{:?}", c.verdict);
        // The streamed tcp at 200 ms: 0.66 × raw.
        let c = evaluate(&p, &keel(20, 10.0, 530, 1), &raw);
        assert!(!c.pass);
        assert_eq!(c.ratio, 0.667);
        // Two connections.
        assert!(!evaluate(&p, &keel(29, 10.0, 530, 2), &raw).pass);
    }

    #[test]
    fn json_shape() {
        let raw = RawRef {
            calls_per_sec: 4.99,
            first_call_ms: 400.4,
        };
        let c = evaluate(
            &params(Payload::Small, Binding::HttpsH2),
            &keel(49, 10.0, 402, 1),
            &raw,
        );
        let v = serde_json::to_value(&c).unwrap();
        for k in [
            "binding",
            "rtt_ms",
            "payload_bytes",
            "calls_per_sec",
            "limit_calls_per_sec",
            "first_call_ms",
            "connections_opened",
            "pass",
        ] {
            assert!(v.get(k).is_some(), "missing {k}");
        }
        assert_eq!(v["binding"], "https-h2");
        assert_eq!(v["mode"], "streamed");
        assert_eq!(v["payload"], "small");
        assert_eq!(v["payload_bytes"], 6);
        assert!(v["bandwidth_bytes_per_sec"].is_null());
        assert!(summary(&c).contains("https-h2 streamed"));
        assert!(v["error"].is_null());
        let f = failed(&params(Payload::Small, Binding::H2c), &raw, "boom");
        assert!(!f.pass);
        assert_eq!(f.verdict.reasons, ["error: boom"]);
        let v = serde_json::to_value(&f).unwrap();
        assert!(v["calls_per_sec"].is_null());
        assert_eq!(v["error"], "boom");
        assert!(summary(&f).contains("failed: boom"));
    }
}
