//! One cell of seed 004: a binding and mode, an RTT, a payload. A fresh client makes its first
//! call (connect included), then sequential calls for a while; the proxy counts its connections.
//! Raw TCP makes the same calls through a proxy with the same settings in the same run.

use std::time::{Duration, Instant};

use keel::ByteStream;
use keel_examples::wan::{WanClient, SMALL};
use serde::Serialize;

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
}

impl Params {
    /// The emulated link.
    pub(crate) fn link(&self) -> LinkConfig {
        LinkConfig::new(Duration::from_secs_f64(self.rtt_ms / 1000.0)).with_cap(self.bytes_per_sec)
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

/// Measures raw TCP through a proxy with `p`'s link, with `p`'s payload and timing.
pub(crate) fn measure_raw(p: &Params) -> anyhow::Result<RawRef> {
    anyhow::ensure!(p.rtt_ms > 0.0, "the RTT must be positive");
    let server = RawServer::start()?;
    let proxy = Proxy::start(server.addr(), p.link())?;
    let r = raw::run(proxy.addr(), &p.payload.bytes(), p.seconds, p.min_calls)?;
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
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct KeelRun {
    /// The fresh client's first call, connect included.
    pub(crate) first_call: Duration,
    /// Timed calls after the first.
    pub(crate) calls: u64,
    /// Their duration.
    pub(crate) elapsed: Duration,
    /// Connections the proxy accepted from the client.
    pub(crate) connections: u64,
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
    /// Timed calls (after the first).
    pub(crate) calls: u64,
    /// keel's sequential calls per second.
    pub(crate) calls_per_sec: f64,
    /// The limit: for the small payload 1000/RTT, or raw TCP through the same proxy in the same
    /// run where that is less; raw TCP in the same run for the large.
    pub(crate) limit_calls_per_sec: f64,
    /// `1/RTT` or `raw TCP`.
    pub(crate) limit: &'static str,
    /// Raw TCP's calls/s on the same link in the same run (for both payloads).
    pub(crate) raw_calls_per_sec: f64,
    /// `calls_per_sec / limit_calls_per_sec`.
    pub(crate) ratio: f64,
    /// A fresh client's first call, connect included, ms.
    pub(crate) first_call_ms: f64,
    /// The same in RTTs.
    pub(crate) first_call_rtts: f64,
    /// Raw TCP's first call (connect + 1 RTT + transfer), ms.
    pub(crate) raw_first_call_ms: f64,
    /// Connections the client opened, counted by the proxy.
    pub(crate) connections_opened: u64,
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

/// keel's calls through a fresh proxy in front of a fresh host.
pub(crate) fn run_keel(rt: &tokio::runtime::Runtime, p: &Params) -> anyhow::Result<KeelRun> {
    anyhow::ensure!(p.rtt_ms > 0.0, "the RTT must be positive");
    let binding = p.variant.binding;
    let host = super::start_host(binding)?;
    let proxy = Proxy::start(super::addr_of(host.url())?, p.link())?;
    let url = super::via(host.url(), proxy.addr())?;
    let client = WanClient::new(binding.channel_builder(&url)?.build()?);
    let payload = p.payload.bytes();
    let mode = p.variant.mode;
    let (first_call, calls, elapsed) = rt.block_on(async {
        let t = Instant::now();
        one_call(&client, mode, &payload).await?;
        let first_call = t.elapsed();
        let start = Instant::now();
        let until = start + Duration::from_secs_f64(p.seconds);
        let mut calls = 0;
        while calls < p.min_calls || Instant::now() < until {
            one_call(&client, mode, &payload).await?;
            calls += 1;
        }
        Ok::<_, anyhow::Error>((first_call, calls, start.elapsed()))
    })?;
    let connections = proxy.accepted();
    rt.block_on(client.close());
    drop(proxy);
    host.shutdown();
    Ok(KeelRun {
        first_call,
        calls,
        elapsed,
        connections,
    })
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
    let (limit_calls_per_sec, limit) = match p.payload {
        // The link's own limit: 1/RTT, or what raw TCP makes through the same proxy if that
        // is less (at 1 ms the proxy's and this VM's thread wake-ups cost ~10 %).
        Payload::Small if raw.calls_per_sec < 1000.0 / p.rtt_ms => (raw.calls_per_sec, "raw TCP"),
        Payload::Small => (1000.0 / p.rtt_ms, "1/RTT"),
        Payload::Large => (raw.calls_per_sec, "raw TCP"),
    };
    let first_call_ms = crate::experiments::ms(k.first_call);
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
    WanCell {
        experiment: "wan",
        binding: p.variant.binding,
        mode: p.variant.mode,
        payload: p.payload,
        payload_bytes: p.payload.bytes().len(),
        rtt_ms: p.rtt_ms,
        bandwidth_bytes_per_sec: p.bytes_per_sec,
        calls: k.calls,
        calls_per_sec: round3(calls_per_sec),
        limit_calls_per_sec: round3(limit_calls_per_sec),
        limit,
        raw_calls_per_sec: round3(raw.calls_per_sec),
        ratio: round3(calls_per_sec / limit_calls_per_sec),
        first_call_ms,
        first_call_rtts: round3(first_call_ms / p.rtt_ms),
        raw_first_call_ms: raw.first_call_ms,
        connections_opened: k.connections,
        error: None,
        pass: verdict.pass,
        verdict,
    }
}

/// A cell whose calls failed with `error`.
pub(crate) fn failed(p: &Params, raw: &RawRef, error: &str) -> WanCell {
    let k = KeelRun {
        first_call: Duration::ZERO,
        calls: 0,
        elapsed: Duration::ZERO,
        connections: 0,
    };
    let mut c = evaluate(p, &k, raw);
    for x in [
        &mut c.calls_per_sec,
        &mut c.ratio,
        &mut c.first_call_ms,
        &mut c.first_call_rtts,
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
    let mut s = format!(
        "wan (seed 004): {} {}, {} payload ({} bytes), RTT {} ms, {cap}\n",
        c.binding.name(),
        c.mode.name(),
        c.payload.name(),
        c.payload_bytes,
        c.rtt_ms
    );
    if let Some(e) = &c.error {
        s.push_str(&format!("  keel's calls failed: {e}\n"));
    }
    s.push_str(&format!(
        "  keel {:.2} calls/s ({} calls); limit ({}) {:.2} calls/s: {:.3} × the limit; raw TCP {:.2} calls/s\n",
        c.calls_per_sec, c.calls, c.limit, c.limit_calls_per_sec, c.ratio, c.raw_calls_per_sec
    ));
    s.push_str(&format!(
        "  first call of a fresh client {:.1} ms = {:.2} RTT (raw TCP {:.1} ms = {:.2} RTT); {} connection(s) opened\n",
        c.first_call_ms,
        c.first_call_rtts,
        c.raw_first_call_ms,
        c.raw_first_call_ms / c.rtt_ms,
        c.connections_opened
    ));
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
        }
    }

    fn keel(calls: u64, secs: f64, first_ms: u64, connections: u64) -> KeelRun {
        KeelRun {
            first_call: Duration::from_millis(first_ms),
            calls,
            elapsed: Duration::from_secs_f64(secs),
            connections,
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
        assert_eq!((c.limit, c.limit_calls_per_sec), ("raw TCP", 4.5));
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
