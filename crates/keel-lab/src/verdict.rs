//! The bars of `../shared/design.md`, as pure functions of measured numbers.
//!
//! Nothing here measures or sleeps: every function takes numbers and returns a [`Verdict`], so
//! the bars are unit-tested without depending on timing.

use serde::Serialize;

/// Bar of seed 000: every timed call on an opened client stays under this, on loopback.
pub(crate) const FIRST_CALL_MAX_US: f64 = 1000.0;
/// Bar of seed 000: the first async call is at most this many steady-state p50s.
pub(crate) const FIRST_ASYNC_P50_RATIO: f64 = 3.0;
/// Bar of seed 001: the slowest concurrent call is at most this many times the work.
pub(crate) const CONCURRENT_WORK_RATIO: f64 = 1.01;
/// Bar of seed 002 for bursts of up to [`BURST_SMALL_CLIENTS`] clients: work + this.
pub(crate) const BURST_SLACK_MS: f64 = 20.0;
/// Bar of seed 002 for bursts of more clients (1,000 × 2 s ≤ 2.1 s): work + this, or
/// [`BURST_BASELINE_RATIO`] × the thread-per-connection baseline's burst when that is more.
pub(crate) const BURST_LARGE_SLACK_MS: f64 = 100.0;
/// Bar of seed 002 for bursts of more than [`BURST_SMALL_CLIENTS`] clients: at most this many
/// times the thread-per-connection server's burst in the same run (the machine's own cost of
/// as many threads), when that is above work + [`BURST_LARGE_SLACK_MS`].
pub(crate) const BURST_BASELINE_RATIO: f64 = 1.01;
/// The seed's burst size; larger bursts get [`BURST_LARGE_SLACK_MS`].
pub(crate) const BURST_SMALL_CLIENTS: usize = 100;
/// Bar of seed 003: the first call after idle may take this many steady-state p50s, or raw
/// TCP's own after-idle ratio in the same run when that is higher.
pub(crate) const IDLE_P50_RATIO: f64 = 2.0;
/// Overload bar: admitted calls' p99 (and the recovery calls') at most this many unloaded p99s.
pub(crate) const OVERLOAD_P99_RATIO: f64 = 2.0;
/// Overload bar: Busy answers' p99, ms.
pub(crate) const BUSY_P99_MAX_MS: f64 = 1.0;
/// Overload validity: the load generator must offer at least this share of the target rate, or
/// the overload was not measured.
pub(crate) const OFFERED_MIN_SHARE: f64 = 0.9;
/// Overload validity: in the unloaded phase, calls must start within this of their schedule
/// (p99, ms). A late generator inflates the baseline and so loosens every 2 × bar: such a run
/// fails as not measured rather than passing on a noisy baseline.
pub(crate) const UNLOADED_LAG_MAX_MS: f64 = 1.0;
/// Soak bar: the share of its RSS at the end of warm-up that the host's RSS may grow by and still
/// count as flat. (A fixed 8 MiB would be more than the whole host, ~8 MiB, is.)
pub(crate) const SOAK_RSS_GROWTH_SHARE: f64 = 0.10;
/// Bar of seed 003: the first call after idle stays under this, µs.
pub(crate) const IDLE_MAX_US: f64 = 1000.0;
/// Bar of seed 003: the fewest idle gaps the medians are taken over.
pub(crate) const IDLE_MIN_GAPS: usize = 5;

/// The outcome of checking one experiment against its bar.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Verdict {
    /// Whether the bar was met.
    pub(crate) pass: bool,
    /// The bar, in words with the numbers it was computed from.
    pub(crate) bar: String,
    /// Why it failed, empty when it passed.
    pub(crate) reasons: Vec<String>,
}

impl Verdict {
    fn new(bar: String, reasons: Vec<String>) -> Verdict {
        Verdict {
            pass: reasons.is_empty(),
            bar,
            reasons,
        }
    }

    /// `PASS` or `FAIL`.
    pub(crate) fn word(&self) -> &'static str {
        if self.pass {
            "PASS"
        } else {
            "FAIL"
        }
    }
}

/// Seed 000, judged on `rounds` fresh processes: the median over rounds of the slowest timed
/// call is under [`FIRST_CALL_MAX_US`], and the median of the first async call ÷ the steady p50
/// is at most [`FIRST_ASYNC_P50_RATIO`].
pub(crate) fn first_call(rounds: usize, median_slowest_us: f64, median_ratio: f64) -> Verdict {
    let bar = format!(
        "median of {rounds} fresh processes: slowest call < {FIRST_CALL_MAX_US:.0} µs; first async ≤ {FIRST_ASYNC_P50_RATIO} × p50"
    );
    let mut reasons = Vec::new();
    if rounds == 0 {
        reasons.push("no rounds".to_string());
    }
    if median_slowest_us.is_nan() || median_slowest_us >= FIRST_CALL_MAX_US {
        reasons.push(format!(
            "the median round's slowest call took {median_slowest_us:.1} µs"
        ));
    }
    if median_ratio.is_nan() || median_ratio > FIRST_ASYNC_P50_RATIO {
        reasons.push(format!(
            "the median first async call is {median_ratio:.2} × p50 > {FIRST_ASYNC_P50_RATIO}"
        ));
    }
    Verdict::new(bar, reasons)
}

/// The seed-001 limit for `work_ms` of work, in ms.
pub(crate) fn concurrent_limit_ms(work_ms: u64) -> f64 {
    CONCURRENT_WORK_RATIO * work_ms as f64
}

/// Seed 001: the slowest of the concurrent calls at most 1.01 × work.
pub(crate) fn concurrent(latencies_ms: &[f64], work_ms: u64) -> Verdict {
    let limit = concurrent_limit_ms(work_ms);
    let bar = format!("max ≤ {CONCURRENT_WORK_RATIO} × {work_ms} ms = {limit:.0} ms");
    let mut reasons = Vec::new();
    if latencies_ms.is_empty() {
        reasons.push("no calls".to_string());
    }
    let max = max_of(latencies_ms);
    if max.is_nan() || max > limit {
        reasons.push(format!("slowest call {max:.1} ms > {limit:.1} ms"));
    }
    Verdict::new(bar, reasons)
}

/// The seed-002 limit for a burst of `clients` calls of `work_ms`, in ms: work + 20 ms for up
/// to 100 clients; beyond, max(work + 100 ms, 1.01 × `baseline_ms`), the thread-per-connection
/// server's burst in the same run (1,000 × 2 s ≤ max(2.1 s, baseline + 1 %); `None` or NaN:
/// work + 100 ms alone).
pub(crate) fn burst_limit_ms(clients: usize, work_ms: u64, baseline_ms: Option<f64>) -> f64 {
    if clients <= BURST_SMALL_CLIENTS {
        return work_ms as f64 + BURST_SLACK_MS;
    }
    let floor = work_ms as f64 + BURST_LARGE_SLACK_MS;
    match baseline_ms {
        Some(b) if b.is_finite() => floor.max(BURST_BASELINE_RATIO * b),
        _ => floor,
    }
}

/// Seed 002: every burst (release to last reply, ms) within [`burst_limit_ms`].
pub(crate) fn burst(
    round_totals_ms: &[f64],
    clients: usize,
    work_ms: u64,
    baseline_ms: Option<f64>,
) -> Verdict {
    let limit = burst_limit_ms(clients, work_ms, baseline_ms);
    let bar = match baseline_ms {
        Some(b) if clients > BURST_SMALL_CLIENTS && b.is_finite() => format!(
            "every burst ≤ max({:.0}, thread-per-connection {b:.1} + 1 %) = {limit:.0} ms",
            work_ms as f64 + BURST_LARGE_SLACK_MS
        ),
        _ => format!("every burst ≤ {limit:.0} ms"),
    };
    let mut reasons = Vec::new();
    if round_totals_ms.is_empty() {
        reasons.push("no bursts".to_string());
    }
    for (i, &ms) in round_totals_ms.iter().enumerate() {
        if ms.is_nan() || ms > limit {
            reasons.push(format!("burst {} took {ms:.1} ms > {limit:.0} ms", i + 1));
        }
    }
    Verdict::new(bar, reasons)
}

/// Seed 003, over at least [`IDLE_MIN_GAPS`] gaps: the median first call after idle (µs) at
/// most max(2, `raw_ratio`) × the steady-state p50 (same client kind), where `raw_ratio` is raw
/// TCP's after-idle ratio around the same gaps (`None`: not measured, the floor of 2 alone);
/// under 1 ms; and no thread created for the calls after the gaps.
pub(crate) fn idle(
    after_us: f64,
    steady_p50_us: f64,
    raw_ratio: Option<f64>,
    gaps: usize,
    threads_created: u64,
) -> Verdict {
    let allowed = raw_ratio.map_or(IDLE_P50_RATIO, |r| r.max(IDLE_P50_RATIO));
    let ratio = after_us / steady_p50_us;
    let raw = raw_ratio.map_or("raw TCP not measured".to_string(), |r| {
        format!("raw TCP {r:.2}")
    });
    let bar = format!(
        "median over ≥ {IDLE_MIN_GAPS} gaps: after / p50 ≤ max({IDLE_P50_RATIO}, {raw}) = {allowed:.2}; after < {IDLE_MAX_US:.0} µs; no thread created"
    );
    let mut reasons = Vec::new();
    if gaps < IDLE_MIN_GAPS {
        reasons.push(format!("{gaps} gaps measured, fewer than {IDLE_MIN_GAPS}"));
    }
    if ratio.is_nan() || allowed.is_nan() || ratio > allowed {
        reasons.push(format!(
            "after idle {after_us:.1} µs = {ratio:.2} × p50 {steady_p50_us:.1} µs > {allowed:.2} ×"
        ));
    }
    if after_us.is_nan() || after_us >= IDLE_MAX_US {
        reasons.push(format!("after idle {after_us:.1} µs ≥ {IDLE_MAX_US:.0} µs"));
    }
    if threads_created > 0 {
        reasons.push(format!(
            "{threads_created} thread(s) created for the calls after the gaps"
        ));
    }
    Verdict::new(bar, reasons)
}

/// Bar of seed 004: a small call's calls/s at least this share of 1/RTT; a large call's at
/// least this share of raw TCP's on the same link.
pub(crate) const WAN_CALLS_RATIO: f64 = 0.95;
/// Bar of seed 004: the connections one client opens for all its calls.
pub(crate) const WAN_CONNECTIONS: u64 = 1;
/// Bar of seed 004: round trips TLS 1.3 may add to a fresh client's first call.
pub(crate) const WAN_TLS_RTTS: f64 = 1.0;
/// Slack on the first call, in RTTs: the bar counts round trips, so half of one.
pub(crate) const WAN_FIRST_CALL_SLACK_RTTS: f64 = 0.5;
/// Slack on the first call for computation (keys, connection setup), ms: matters at 1 ms RTT.
pub(crate) const WAN_FIRST_CALL_SLACK_MS: f64 = 1.0;
/// Round trips a first upload larger than its protocol's initial flow-control window may add:
/// the credit for the rest is granted by the host, which can only send it once the connection
/// reached it, so it arrives at the earliest one round trip after the client's first byte.
/// HTTP/2 fixes that window at 64 KiB until the host's SETTINGS and WINDOW_UPDATE (RFC 9113
/// §6.9.2); a keel-wire stream starts with 256 KiB (PROTOCOL.md). On a real link TCP's slow
/// start (a fresh connection sends ~14 KB in its first round trip, then doubles) spends those
/// round trips anyway, for raw TCP too; the proxy does not emulate it, so here it shows.
pub(crate) const WAN_FLOW_CONTROL_RTTS: f64 = 1.0;

/// What one wan cell measured, for its bar.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct WanMeasured {
    /// keel's sequential calls per second.
    pub(crate) calls_per_sec: f64,
    /// The limit: 1/RTT for the small payload, raw TCP's calls/s on the same link for the large.
    pub(crate) limit_calls_per_sec: f64,
    /// Connections the client opened (counted by the proxy).
    pub(crate) connections: u64,
    /// A fresh client's first call, connect included, ms.
    pub(crate) first_call_ms: f64,
    /// Raw TCP's first call on a fresh connection (TCP connect + 1 RTT + transfer), ms.
    pub(crate) raw_first_call_ms: f64,
    /// The link's RTT, ms.
    pub(crate) rtt_ms: f64,
    /// Whether the binding adds a TLS handshake.
    pub(crate) tls: bool,
    /// Whether the first call uploads more than its protocol's initial flow-control window
    /// (see [`WAN_FLOW_CONTROL_RTTS`]).
    pub(crate) beyond_initial_window: bool,
}

/// The most a fresh client's first call may take: raw TCP's first call (connect, then one round
/// trip), one more RTT for TLS, one for an upload beyond the initial flow-control window, and
/// the slack.
pub(crate) fn wan_first_call_limit_ms(
    raw_first_call_ms: f64,
    rtt_ms: f64,
    tls: bool,
    beyond_initial_window: bool,
) -> f64 {
    let tls_rtts = if tls { WAN_TLS_RTTS } else { 0.0 };
    let flow_rtts = if beyond_initial_window {
        WAN_FLOW_CONTROL_RTTS
    } else {
        0.0
    };
    raw_first_call_ms
        + (tls_rtts + flow_rtts + WAN_FIRST_CALL_SLACK_RTTS) * rtt_ms
        + WAN_FIRST_CALL_SLACK_MS
}

/// Seed 004, one cell: calls/s ≥ 0.95 × the limit, one connection, and the first call within
/// [`wan_first_call_limit_ms`].
pub(crate) fn wan(m: &WanMeasured) -> Verdict {
    let min_rate = WAN_CALLS_RATIO * m.limit_calls_per_sec;
    let first_limit = wan_first_call_limit_ms(
        m.raw_first_call_ms,
        m.rtt_ms,
        m.tls,
        m.beyond_initial_window,
    );
    let bar = format!(
        "≥ {WAN_CALLS_RATIO} × {:.2} = {min_rate:.2} calls/s; {WAN_CONNECTIONS} connection; first call ≤ {first_limit:.1} ms (raw {:.1}{}{} + ½ RTT + 1 ms)",
        m.limit_calls_per_sec,
        m.raw_first_call_ms,
        if m.tls { " + 1 RTT for TLS" } else { "" },
        if m.beyond_initial_window {
            " + 1 RTT for the initial window"
        } else {
            ""
        }
    );
    let mut reasons = Vec::new();
    if m.calls_per_sec.is_nan() || m.limit_calls_per_sec.is_nan() || m.calls_per_sec < min_rate {
        reasons.push(format!(
            "{:.2} calls/s = {:.2} × the limit {:.2}",
            m.calls_per_sec,
            m.calls_per_sec / m.limit_calls_per_sec,
            m.limit_calls_per_sec
        ));
    }
    if m.connections != WAN_CONNECTIONS {
        reasons.push(format!("{} connections opened", m.connections));
    }
    if m.first_call_ms.is_nan() || m.raw_first_call_ms.is_nan() || m.first_call_ms > first_limit {
        reasons.push(format!(
            "first call {:.1} ms = {:.1} RTT (raw {:.1} RTT) > {first_limit:.1} ms",
            m.first_call_ms,
            m.first_call_ms / m.rtt_ms,
            m.raw_first_call_ms / m.rtt_ms
        ));
    }
    Verdict::new(bar, reasons)
}

/// What the overload experiment measured that its bar looks at (latencies in ms).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct OverloadNumbers {
    /// p99 of the calls of the unloaded phase.
    pub(crate) unloaded_p99_ms: f64,
    /// How late the unloaded phase's calls started against their schedule, p99.
    pub(crate) unloaded_lag_p99_ms: f64,
    /// p99 of the calls admitted (answered by the operation) under overload.
    pub(crate) admitted_p99_ms: f64,
    /// p99 of the Busy answers under overload; `None` when no call was answered Busy.
    pub(crate) busy_p99_ms: Option<f64>,
    /// The first call after the load stopped.
    pub(crate) recovery_first_ms: f64,
    /// p99 of the calls after the load stopped.
    pub(crate) recovery_p99_ms: f64,
    /// Answers other than a result or Busy, in every phase.
    pub(crate) errors: u64,
    /// Busy answers in the unloaded and recovery phases (there should be none).
    pub(crate) busy_when_unloaded: u64,
    /// The overload rate the generator was asked for, calls/s.
    pub(crate) target_per_sec: f64,
    /// The rate it managed, calls/s.
    pub(crate) offered_per_sec: f64,
}

/// Overload (issue 10): admitted p99 ≤ 2 × unloaded p99, Busy p99 ≤ 1 ms, no error but Busy,
/// and after the load stops the first call and the p99 ≤ 2 × unloaded p99. Also fails, as not
/// measured, when the generator offered less than 90 % of the target rate or nothing was Busy.
pub(crate) fn overload(n: &OverloadNumbers) -> Verdict {
    let limit = OVERLOAD_P99_RATIO * n.unloaded_p99_ms;
    let bar = format!(
        "admitted and recovery p99 ≤ {OVERLOAD_P99_RATIO} × unloaded p99 = {limit:.3} ms; Busy p99 ≤ {BUSY_P99_MAX_MS} ms; no error but Busy"
    );
    let mut reasons = Vec::new();
    let over = |x: f64| x.is_nan() || limit.is_nan() || x > limit;
    if over(n.admitted_p99_ms) {
        reasons.push(format!(
            "admitted p99 {:.3} ms > {limit:.3} ms",
            n.admitted_p99_ms
        ));
    }
    match n.busy_p99_ms {
        None => reasons
            .push("no call was answered Busy: the load never exceeded the throttle".to_string()),
        Some(b) if b.is_nan() || b > BUSY_P99_MAX_MS => {
            reasons.push(format!("Busy p99 {b:.3} ms > {BUSY_P99_MAX_MS} ms"))
        }
        Some(_) => {}
    }
    if n.errors > 0 {
        reasons.push(format!("{} errors other than Busy", n.errors));
    }
    if n.busy_when_unloaded > 0 {
        reasons.push(format!(
            "{} calls answered Busy without overload",
            n.busy_when_unloaded
        ));
    }
    if over(n.recovery_first_ms) {
        reasons.push(format!(
            "first call after the load stopped {:.3} ms > {limit:.3} ms",
            n.recovery_first_ms
        ));
    }
    if over(n.recovery_p99_ms) {
        reasons.push(format!(
            "recovery p99 {:.3} ms > {limit:.3} ms",
            n.recovery_p99_ms
        ));
    }
    if n.unloaded_lag_p99_ms.is_nan() || n.unloaded_lag_p99_ms > UNLOADED_LAG_MAX_MS {
        reasons.push(format!(
            "unloaded calls started {:.3} ms late (p99) > {UNLOADED_LAG_MAX_MS} ms: the generator was busy, the baseline was not measured",
            n.unloaded_lag_p99_ms
        ));
    }
    if n.offered_per_sec.is_nan() || n.offered_per_sec < OFFERED_MIN_SHARE * n.target_per_sec {
        reasons.push(format!(
            "the generator offered {:.0} calls/s of {:.0}: the overload was not measured",
            n.offered_per_sec, n.target_per_sec
        ));
    }
    Verdict::new(bar, reasons)
}

/// The largest RSS growth (KiB) after warm-up that still counts as flat for a warm-up RSS of
/// `warm_kib`: 10 % of it.
pub(crate) fn soak_rss_limit_kib(warm_kib: u64) -> u64 {
    (SOAK_RSS_GROWTH_SHARE * warm_kib as f64) as u64
}

/// Soak: no unexplained error (deliberate faults are not errors), and the host's RSS at the end
/// at most [`soak_rss_limit_kib`] above its RSS at the end of warm-up.
pub(crate) fn soak(errors: u64, warm_kib: u64, end_kib: u64) -> Verdict {
    let limit = soak_rss_limit_kib(warm_kib);
    let bar = format!(
        "no error; RSS growth after warm-up ≤ 10 % of {:.1} MiB = {:.1} MiB",
        warm_kib as f64 / 1024.0,
        limit as f64 / 1024.0
    );
    let mut reasons = Vec::new();
    if errors > 0 {
        reasons.push(format!("{errors} unexplained errors"));
    }
    let growth = end_kib.saturating_sub(warm_kib);
    if growth > limit {
        reasons.push(format!(
            "host RSS grew {:.1} MiB ({:.1} → {:.1} MiB) > {:.1} MiB",
            growth as f64 / 1024.0,
            warm_kib as f64 / 1024.0,
            end_kib as f64 / 1024.0,
            limit as f64 / 1024.0
        ));
    }
    Verdict::new(bar, reasons)
}

/// The median (the mean of the middle two for an even count), NaN for none.
pub(crate) fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// The largest value, NaN for an empty slice (NaN inputs make the result NaN).
pub(crate) fn max_of(values: &[f64]) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    values.iter().copied().fold(f64::NEG_INFINITY, |a, b| {
        if a.is_nan() || b.is_nan() {
            f64::NAN
        } else {
            a.max(b)
        }
    })
}

/// One line of the table.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Row {
    /// The experiment and its seed.
    pub(crate) experiment: String,
    /// What WCF did, as the seed reports it.
    pub(crate) wcf_broken: String,
    /// WCF with the seed's fix or workaround.
    pub(crate) wcf_fixed: String,
    /// keel's number in this run.
    pub(crate) keel: String,
    /// The bar.
    pub(crate) bar: String,
    /// PASS or FAIL.
    pub(crate) verdict: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_even_and_none() {
        assert_eq!(median(&[5.0, 1.0, 3.0]), 3.0);
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
        assert!(median(&[]).is_nan());
    }

    #[test]
    fn first_call_bar() {
        assert!(first_call(5, 400.0, 2.0).pass);
        // Exactly 3 × p50 passes; above it fails.
        assert!(first_call(5, 400.0, 3.0).pass);
        let v = first_call(5, 400.0, 3.01);
        assert!(!v.pass);
        assert_eq!(v.reasons.len(), 1);
        // A median round with a call of 1 ms fails, even when the first async call is fine.
        let v = first_call(5, 1000.0, 1.0);
        assert!(!v.pass);
        assert!(v.reasons[0].contains("slowest call"), "{:?}", v.reasons);
        assert!(!first_call(0, 10.0, 1.0).pass);
        assert!(!first_call(5, 10.0, f64::NAN).pass);
        assert_eq!(v.word(), "FAIL");
    }

    #[test]
    fn concurrent_bar() {
        assert_eq!(concurrent_limit_ms(1000), 1010.0);
        assert!(concurrent(&[1001.0, 1009.9, 1010.0], 1000).pass);
        assert!(!concurrent(&[1001.0, 1010.1], 1000).pass);
        assert!(!concurrent(&[], 1000).pass);
        // The seed's broken and fixed numbers both miss the bar.
        assert!(!concurrent(&[1009.0, 3315.0], 1000).pass);
        assert!(!concurrent(&[1021.0, 1154.0], 1000).pass);
    }

    #[test]
    fn burst_bar() {
        assert_eq!(burst_limit_ms(100, 2000, None), 2020.0);
        assert_eq!(burst_limit_ms(20, 200, None), 220.0);
        assert_eq!(burst_limit_ms(1000, 2000, None), 2100.0);
        // The baseline never moves the small bursts' bar.
        assert_eq!(burst_limit_ms(100, 2000, Some(2500.0)), 2020.0);
        assert!(burst(&[2003.0, 2019.0, 2020.0], 100, 2000, None).pass);
        let v = burst(&[2003.0, 2200.0, 2004.0], 100, 2000, None);
        assert!(!v.pass);
        assert!(v.reasons[0].starts_with("burst 2"), "{:?}", v.reasons);
        assert!(burst(&[2090.0], 1000, 2000, None).pass);
        assert!(!burst(&[2101.0], 1000, 2000, None).pass);
        assert!(!burst(&[], 100, 2000, None).pass);
        // WCF: 14.0 s broken, 2.2 s with min threads 101.
        assert!(!burst(&[14_000.0], 100, 2000, None).pass);
        assert!(!burst(&[2200.0], 100, 2000, None).pass);
    }

    #[test]
    fn large_burst_bar_follows_the_baseline() {
        // A quick baseline leaves the 2.1 s floor.
        assert_eq!(burst_limit_ms(1000, 2000, Some(2040.0)), 2100.0);
        let v = burst(&[2099.0], 1000, 2000, Some(2040.0));
        assert!(v.pass);
        assert!(
            v.bar
                .contains("max(2100, thread-per-connection 2040.0 + 1 %) = 2100 ms"),
            "{}",
            v.bar
        );
        // A slow machine: the baseline + 1 %.
        assert_eq!(burst_limit_ms(1000, 2000, Some(2200.0)), 2222.0);
        assert!(burst(&[2150.0, 2222.0], 1000, 2000, Some(2200.0)).pass);
        let v = burst(&[2150.0, 2223.0], 1000, 2000, Some(2200.0));
        assert!(!v.pass);
        assert!(
            v.reasons[0].starts_with("burst 2 took 2223.0 ms > 2222 ms"),
            "{:?}",
            v.reasons
        );
        // A baseline that was not measured: the floor alone.
        assert_eq!(burst_limit_ms(1000, 2000, Some(f64::NAN)), 2100.0);
        assert!(!burst(&[2101.0], 1000, 2000, Some(f64::NAN)).pass);
    }

    #[test]
    fn idle_bar() {
        // The floor: 2 × p50, whatever raw TCP did.
        assert!(idle(60.0, 30.0, Some(1.2), 5, 0).pass);
        assert!(!idle(60.1, 30.0, Some(1.2), 5, 0).pass);
        assert!(idle(60.0, 30.0, None, 5, 0).pass);
        assert!(!idle(60.1, 30.0, None, 5, 0).pass);
        // Raw TCP's ratio in the same run, when higher.
        assert!(idle(150.0, 30.0, Some(5.0), 5, 0).pass);
        let v = idle(151.0, 30.0, Some(5.0), 5, 0);
        assert!(!v.pass);
        assert!(v.bar.contains("raw TCP 5.00"), "{}", v.bar);
        // Under 1 ms, even when raw TCP is slower still.
        assert!(!idle(1000.0, 300.0, Some(10.0), 5, 0).pass);
        // At least five gaps; no thread created.
        assert!(!idle(40.0, 30.0, Some(2.0), 4, 0).pass);
        let v = idle(40.0, 30.0, Some(2.0), 5, 2);
        assert_eq!(v.reasons.len(), 1);
        assert!(v.reasons[0].contains("2 thread(s)"), "{v:?}");
        assert!(!idle(f64::NAN, 30.0, Some(2.0), 5, 0).pass);
        // A raw ratio that is not a number leaves the floor of 2.
        assert!(idle(40.0, 30.0, Some(f64::NAN), 5, 0).pass);
        // WCF: 418 ms after idle against 3 ms before.
        assert!(!idle(418_000.0, 3_000.0, Some(5.0), 5, 0).pass);
    }

    #[test]
    fn wan_bar() {
        let good = WanMeasured {
            calls_per_sec: 4.8,
            limit_calls_per_sec: 5.0,
            connections: 1,
            first_call_ms: 401.0,
            raw_first_call_ms: 400.5,
            rtt_ms: 200.0,
            tls: false,
            beyond_initial_window: false,
        };
        assert!(wan(&good).pass, "{:?}", wan(&good));
        // Exactly 0.95 × the limit passes; below fails.
        assert!(
            wan(&WanMeasured {
                calls_per_sec: 4.75,
                ..good
            })
            .pass
        );
        let v = wan(&WanMeasured {
            calls_per_sec: 4.74,
            ..good
        });
        assert_eq!(v.reasons.len(), 1, "{v:?}");
        // WCF at 200 ms: netTcp buffered 4.86 passes the rate; HTTP (2 round trips) does not.
        assert!(
            wan(&WanMeasured {
                calls_per_sec: 4.86,
                ..good
            })
            .pass
        );
        assert!(
            !wan(&WanMeasured {
                calls_per_sec: 2.5,
                ..good
            })
            .pass
        );
        // A second connection fails.
        let v = wan(&WanMeasured {
            connections: 2,
            ..good
        });
        assert!(v.reasons[0].contains("2 connections"), "{v:?}");
        // The first call: raw's, plus half an RTT and 1 ms; TLS adds one RTT, and so does an
        // upload beyond the initial flow-control window.
        assert_eq!(wan_first_call_limit_ms(400.0, 200.0, false, false), 501.0);
        assert_eq!(wan_first_call_limit_ms(400.0, 200.0, true, false), 701.0);
        assert_eq!(wan_first_call_limit_ms(400.0, 200.0, true, true), 901.0);
        assert!(
            wan(&WanMeasured {
                first_call_ms: 601.0,
                beyond_initial_window: true,
                ..good
            })
            .pass
        );
        assert!(
            !wan(&WanMeasured {
                first_call_ms: 702.0,
                beyond_initial_window: true,
                ..good
            })
            .pass
        );
        assert!(
            !wan(&WanMeasured {
                first_call_ms: 601.0,
                ..good
            })
            .pass
        );
        assert!(
            wan(&WanMeasured {
                first_call_ms: 601.0,
                tls: true,
                ..good
            })
            .pass
        );
        // One RTT more than TLS allows (the handshake not pipelined) fails.
        assert!(
            !wan(&WanMeasured {
                first_call_ms: 801.0,
                tls: true,
                ..good
            })
            .pass
        );
        assert!(
            !wan(&WanMeasured {
                first_call_ms: f64::NAN,
                ..good
            })
            .pass
        );
        assert!(
            !wan(&WanMeasured {
                limit_calls_per_sec: f64::NAN,
                ..good
            })
            .pass
        );
    }

    fn overload_numbers() -> OverloadNumbers {
        OverloadNumbers {
            unloaded_p99_ms: 2.2,
            unloaded_lag_p99_ms: 0.2,
            admitted_p99_ms: 3.3,
            busy_p99_ms: Some(0.2),
            recovery_first_ms: 2.1,
            recovery_p99_ms: 2.3,
            errors: 0,
            busy_when_unloaded: 0,
            target_per_sec: 40_000.0,
            offered_per_sec: 39_900.0,
        }
    }

    #[test]
    fn overload_bar() {
        let ok = overload_numbers();
        assert!(overload(&ok).pass, "{:?}", overload(&ok));
        // Exactly 2 × passes.
        assert!(
            overload(&OverloadNumbers {
                admitted_p99_ms: 4.4,
                ..ok
            })
            .pass
        );
        let v = overload(&OverloadNumbers {
            admitted_p99_ms: 4.41,
            ..ok
        });
        assert!(!v.pass);
        assert!(v.reasons[0].starts_with("admitted p99"), "{:?}", v.reasons);
        assert!(
            overload(&OverloadNumbers {
                busy_p99_ms: Some(1.0),
                ..ok
            })
            .pass
        );
        assert!(
            !overload(&OverloadNumbers {
                busy_p99_ms: Some(1.01),
                ..ok
            })
            .pass
        );
        assert!(
            !overload(&OverloadNumbers {
                busy_p99_ms: None,
                ..ok
            })
            .pass
        );
        assert!(!overload(&OverloadNumbers { errors: 1, ..ok }).pass);
        assert!(
            !overload(&OverloadNumbers {
                busy_when_unloaded: 1,
                ..ok
            })
            .pass
        );
        assert!(
            !overload(&OverloadNumbers {
                recovery_first_ms: 5.0,
                ..ok
            })
            .pass
        );
        assert!(
            !overload(&OverloadNumbers {
                recovery_p99_ms: 5.0,
                ..ok
            })
            .pass
        );
        assert!(
            !overload(&OverloadNumbers {
                unloaded_p99_ms: f64::NAN,
                ..ok
            })
            .pass
        );
        // A generator that could not offer the load measured nothing.
        let v = overload(&OverloadNumbers {
            offered_per_sec: 30_000.0,
            ..ok
        });
        assert!(!v.pass);
        assert!(v.reasons[0].contains("not measured"), "{:?}", v.reasons);
        assert!(
            overload(&OverloadNumbers {
                offered_per_sec: 36_000.0,
                ..ok
            })
            .pass
        );
        // Nor did a generator that ran late while measuring the baseline.
        assert!(
            overload(&OverloadNumbers {
                unloaded_lag_p99_ms: 1.0,
                ..ok
            })
            .pass
        );
        let v = overload(&OverloadNumbers {
            unloaded_lag_p99_ms: 17.6,
            ..ok
        });
        assert!(!v.pass);
        assert!(
            v.reasons[0].contains("baseline was not measured"),
            "{:?}",
            v.reasons
        );
    }

    #[test]
    fn soak_bar() {
        assert_eq!(soak_rss_limit_kib(20 * 1024), 2048);
        assert_eq!(soak_rss_limit_kib(200 * 1024), 20 * 1024);
        assert!(soak(0, 20 * 1024, 22 * 1024).pass);
        assert!(soak(0, 20 * 1024, 10 * 1024).pass);
        let v = soak(0, 20 * 1024, 22 * 1024 + 1);
        assert!(!v.pass);
        assert!(v.reasons[0].contains("RSS grew"), "{:?}", v.reasons);
        assert!(!soak(1, 20 * 1024, 20 * 1024).pass);
        assert_eq!(soak(3, 20 * 1024, 40 * 1024).reasons.len(), 2);
    }

    #[test]
    fn max_handles_empty_and_nan() {
        assert!(max_of(&[]).is_nan());
        assert!(max_of(&[1.0, f64::NAN]).is_nan());
        assert_eq!(max_of(&[1.0, 3.0, 2.0]), 3.0);
    }
}
