//! The table's rows, one per experiment (the HTML page shows them too), and the table as plain
//! text.

use super::All;
use crate::experiments::burst::Burst;
use crate::verdict::Row;

fn secs(ms: f64) -> String {
    format!("{:.3} s", ms / 1000.0)
}

/// The table rows for `all`.
pub(crate) fn rows(all: &All) -> Vec<Row> {
    let fc = &all.first_call;
    let c = &all.concurrent;
    let burst_row = |b: &Burst, broken: &str, fixed: &str| Row {
        experiment: format!(
            "burst {} × {} s (002)",
            b.clients,
            b.work_ms as f64 / 1000.0
        ),
        wcf_broken: broken.to_string(),
        wcf_fixed: fixed.to_string(),
        keel: format!(
            "max {} over {} bursts{}; threads {}→{}",
            secs(b.max_total_ms),
            b.rounds.len(),
            b.baseline_max_ms.map_or(String::new(), |ms| format!(
                " (thread-per-connection server, same run: {})",
                secs(ms)
            )),
            b.min_threads,
            b.rounds.iter().map(|r| r.peak_threads).max().unwrap_or(0)
        ),
        bar: b.verdict.bar.clone(),
        verdict: b.verdict.word().to_string(),
    };
    let i = &all.idle;
    let o = &all.overload;
    let mut rows = vec![
        Row {
            experiment: "first async call (000)".to_string(),
            wcf_broken: "1005 ms".to_string(),
            wcf_fixed: "189 ms (fixed runtime, under a profiler)".to_string(),
            keel: format!(
                "{:.1} µs (p50 {:.1}); median of {} processes: {:.2} × p50, slowest call {:.1} µs (raw TCP, same run: {:.2} ×, {:.1} µs)",
                fc.first_async_us,
                fc.steady_p50_us,
                fc.rounds.len(),
                fc.median_ratio,
                fc.median_slowest_us,
                fc.raw_median_ratio,
                fc.raw_median_slowest_us
            ),
            bar: fc.verdict.bar.clone(),
            verdict: fc.verdict.word().to_string(),
        },
        Row {
            experiment: format!(
                "{} concurrent × {} s (001)",
                c.clients,
                c.work_ms as f64 / 1000.0
            ),
            wcf_broken: "1.0–3.3 s".to_string(),
            wcf_fixed: "1.02–1.15 s (QFE)".to_string(),
            keel: format!("{}–{}", secs(c.min_ms), secs(c.max_ms)),
            bar: c.verdict.bar.clone(),
            verdict: c.verdict.word().to_string(),
        },
        burst_row(
            &all.burst,
            "14.0 s",
            "2.2 s (min IO threads 101), slow again after idle; worker pool < 2.5 s",
        ),
        burst_row(&all.burst_large, "not measured", "not measured"),
        Row {
            experiment: format!(
                "call after {} s idle, {} gaps (003)",
                i.idle_ms as f64 / 1000.0,
                i.gaps
            ),
            wcf_broken: "418 ms (after 15 s)".to_string(),
            wcf_fixed: "3 ms (keep an I/O thread busy)".to_string(),
            keel: format!(
                "median {:.1} µs = {:.2} × p50 {:.1}{}; {} threads retired, {} created after the gaps",
                i.after_us,
                i.ratio,
                i.steady_p50_us,
                i.raw_tcp.as_ref().map_or(String::new(), |r| format!(
                    "; raw TCP {:.1} µs = {:.2} × its p50 {:.1}",
                    r.after_us, r.ratio, r.steady_p50_us
                )),
                i.retired_during_idle,
                i.threads_created_after_gap
            ),
            bar: i.verdict.bar.clone(),
            verdict: i.verdict.word().to_string(),
        },
        Row {
            experiment: format!("overload {} × throttle (issue 10)", o.params.factor),
            wcf_broken: "not in the seeds".to_string(),
            wcf_fixed: "not in the seeds".to_string(),
            keel: format!(
                "admitted p99 {:.2} ms (unloaded {:.2}){}; Busy p99 {}, {:.0} % Busy; recovery p99 {:.2} ms; {} errors",
                o.admitted_p99_ms,
                o.unloaded_p99_ms,
                match (o.host_admitted_p99_ms, o.host_unloaded_p99_ms) {
                    (Some(a), Some(u)) => format!(", at the host {a:.2} ({u:.2})"),
                    _ => String::new(),
                },
                o.busy_p99_ms
                    .map_or("-".to_string(), |b| format!("{b:.3} ms")),
                o.busy_fraction * 100.0,
                o.recovery_p99_ms,
                o.errors
            ),
            bar: o.verdict.bar.clone(),
            verdict: o.verdict.word().to_string(),
        },
    ];
    if let Some(w) = &all.wan {
        rows.push(crate::wan::matrix::row(w));
    }
    rows
}

/// Pads `s` to `w` characters (not bytes: the table has µ, ×, –, →).
fn pad(s: &str, w: usize) -> String {
    let n = s.chars().count();
    format!("{s}{}", " ".repeat(w.saturating_sub(n)))
}

/// The table as plain text, with a header line and the overall verdict.
pub(crate) fn table(all: &All) -> String {
    let header = [
        "experiment",
        "WCF as reported (broken)",
        "WCF fixed / worked around",
        "keel",
        "bar",
        "verdict",
    ];
    let cells: Vec<[String; 6]> = all
        .rows
        .iter()
        .map(|r| {
            [
                r.experiment.clone(),
                r.wcf_broken.clone(),
                r.wcf_fixed.clone(),
                r.keel.clone(),
                r.bar.clone(),
                r.verdict.clone(),
            ]
        })
        .collect();
    let mut widths = header.map(|h| h.chars().count());
    for row in &cells {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cols: Vec<&str>| {
        let parts: Vec<String> = cols.iter().zip(widths).map(|(c, w)| pad(c, w)).collect();
        format!("| {} |\n", parts.join(" | ")).replace(" \n", "\n")
    };
    let mut out = format!(
        "keel-lab all ({} profile, binding {})\n\n",
        all.profile.name,
        all.binding.name()
    );
    out.push_str(&line(header.to_vec()));
    let rule: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
    out.push_str(&format!("|-{}-|\n", rule.join("-|-")));
    for row in &cells {
        out.push_str(&line(row.iter().map(String::as_str).collect()));
    }
    let failed: Vec<&str> = all
        .rows
        .iter()
        .filter(|r| r.verdict != "PASS")
        .map(|r| r.experiment.as_str())
        .collect();
    if failed.is_empty() {
        out.push_str("\nall bars met\n");
    } else {
        out.push_str(&format!("\nbars missed: {}\n", failed.join(", ")));
    }
    out
}
