//! The self-contained HTML report: the table, then a section per experiment.

use std::fmt::Write as _;

use super::bursts::{phases_section, threads_chart};
use super::charts::{first_call_chart, latency_chart};
use super::svg::esc;
use super::All;
use crate::experiments::idle::Idle;
use crate::experiments::overload::Overload;
use crate::style::CSS;

/// The self-contained HTML report.
pub(crate) fn html(all: &All) -> String {
    let mut s = String::new();
    let verdict = if all.pass {
        "all bars met"
    } else {
        "some bars missed"
    };
    let _ = write!(
        s,
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>keel-lab report</title><style>{CSS}</style></head><body>"
    );
    let _ = write!(
        s,
        "<h1>keel-lab: the seeds' experiments, replayed</h1><p>{} profile, binding <code>{}</code>: <span class=\"{}\">{verdict}</span>. Host and clients run in one process over real sockets on loopback, on separate runtimes.</p>",
        all.profile.name,
        all.binding.name(),
        if all.pass { "PASS" } else { "FAIL" }
    );
    s.push_str("<table><tr><th>experiment</th><th>WCF as reported (broken)</th><th>WCF fixed / worked around</th><th>keel</th><th>bar</th><th>verdict</th></tr>");
    for r in &all.rows {
        let _ = write!(
            s,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"{}\">{}</td></tr>",
            esc(&r.experiment),
            esc(&r.wcf_broken),
            esc(&r.wcf_fixed),
            esc(&r.keel),
            esc(&r.bar),
            esc(&r.verdict),
            esc(&r.verdict)
        );
    }
    s.push_str("</table>");
    let reasons: Vec<&String> = [
        &all.first_call.verdict,
        &all.concurrent.verdict,
        &all.burst.verdict,
        &all.burst_large.verdict,
        &all.idle.verdict,
        &all.overload.verdict,
    ]
    .iter()
    .flat_map(|v| v.reasons.iter())
    .chain(all.wan.iter().flat_map(|w| w.missed.iter()))
    .collect();
    if !reasons.is_empty() {
        s.push_str("<p class=\"FAIL\">Missed:</p><ul>");
        for r in reasons {
            let _ = write!(s, "<li>{}</li>", esc(r));
        }
        s.push_str("</ul>");
    }

    for b in [&all.burst, &all.burst_large] {
        let _ = write!(
            s,
            "<h2 id=\"burst-threads-{}\">Seed 002: pool threads during bursts of {} × {} ms</h2><p class=\"note\">Pool threads as a Prometheus user sees them: the <code>keel_pool_threads</code> gauges, scraped from the host's admin endpoint (<code>GET /metrics</code> over HTTP) every 50 ms (the seed's perfmon graph); red: every state, dashed blue: busy. Shaded: each burst, release to last reply. {} bursts, {} ms idle between them, keep-alive {} ms: the threads above the warm floor ({}) retire in each gap ({} retired in all) and come back at once for the next burst. WCF took 14.0 s per burst, adding one thread per 500 ms.</p>",
            b.clients,
            b.clients,
            b.work_ms,
            b.rounds.len(),
            b.idle_ms,
            b.keep_alive_ms,
            b.min_threads,
            b.retired_total
        );
        if let Some(base) = &b.baseline {
            let _ = write!(
                s,
                "<p class=\"note\">Baseline, in the same run (grey, before keel's bursts): a plain thread-per-connection TCP server (<code>std::net::TcpListener</code>, one OS thread per connection, created when it connects) answering the same {} client threads after the same {} ms sleep: {:.1} ms from release to last reply. It is the machine's own cost of waking that many threads; the bar for more than {} clients is max(work + {} ms, the baseline + 1 %).</p>",
                b.clients,
                b.work_ms,
                base.total_ms,
                crate::verdict::BURST_SMALL_CLIENTS,
                crate::verdict::BURST_LARGE_SLACK_MS
            );
        }
        s.push_str(&threads_chart(b));
        s.push_str("<table><tr><th>burst</th><th>total</th><th>slowest call</th><th>threads before</th><th>peak threads</th></tr>");
        if let Some(base) = &b.baseline {
            let _ = write!(
                s,
                "<tr><td>thread-per-connection baseline</td><td>{:.1} ms</td><td>{:.1} ms</td><td>–</td><td>–</td></tr>",
                base.total_ms, base.slowest_call_ms
            );
        }
        for (i, r) in b.rounds.iter().enumerate() {
            let _ = write!(
                s,
                "<tr><td>{}</td><td>{:.1} ms</td><td>{:.1} ms</td><td>{}</td><td>{}</td></tr>",
                i + 1,
                r.total_ms,
                r.slowest_call_ms,
                r.threads_before,
                r.peak_threads
            );
        }
        s.push_str("</table>");
    }
    s.push_str(&phases_section(&[&all.burst, &all.burst_large]));

    let c = &all.concurrent;
    let _ = write!(
        s,
        "<h2>Seed 001: per-client latency, {} concurrent calls of {} ms</h2><p class=\"note\">Each client on its own thread with its own client, all released together. WCF's two lists are the seed's; keel's is this run ({:.1}–{:.1} ms).</p>",
        c.clients, c.work_ms, c.min_ms, c.max_ms
    );
    s.push_str(&latency_chart(c));

    let fc = &all.first_call;
    let _ = write!(
        s,
        "<h2>Seed 000: the first-call sequence</h2><p class=\"note\">Sync test, async test, async test, sync test; each a new client, opened (not timed), then two timed calls of <code>Add(1, 2)</code>. Log scale. Each round is a fresh process; shown is the median of {} (by the first async call ÷ the steady p50: {:.2}; the median slowest call {:.1} µs). Raw TCP's same sequence in the same processes: {:.2} ×, slowest {:.1} µs. keel's steady state in that round: async p50 {:.1} µs, p99 {:.1} µs; sync p50 {:.1} µs, p99 {:.1} µs.</p>",
        fc.rounds.len(),
        fc.median_ratio,
        fc.median_slowest_us,
        fc.raw_median_ratio,
        fc.raw_median_slowest_us,
        fc.steady_async.p50_us,
        fc.steady_async.p99_us,
        fc.steady_sync.p50_us,
        fc.steady_sync.p99_us
    );
    s.push_str(&first_call_chart(fc));

    s.push_str(&idle_section(&all.idle));
    s.push_str(&overload_section(&all.overload));
    if let Some(w) = &all.wan {
        s.push_str(&crate::wan::html::section(w));
    }
    if let Some(p) = &all.peers {
        s.push_str(&crate::peers::html::section(p));
    }
    s.push_str("</body></html>\n");
    s
}

/// Seed 003's section: keel and raw TCP, after each gap, both ratios.
fn idle_section(i: &Idle) -> String {
    let list = |v: &[f64]| {
        v.iter()
            .map(|x| format!("{x:.1}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut s = format!(
        "<h2>Seed 003: the first call after idle</h2><table><tr><th></th><th>before idle</th><th>after idle (median over the gaps)</th><th>after / p50</th><th>after each gap</th></tr><tr><td>WCF (seed 003, 15 s idle)</td><td>3.0 ms</td><td>418 ms</td><td>139</td><td></td></tr><tr><td>keel ({} gaps of {} ms, keep-alive {} ms)</td><td>steady p50 {:.1} µs (p99 {:.1} µs)</td><td>{:.1} µs; then {} µs</td><td>{:.2}</td><td>{} µs</td></tr>",
        i.gaps,
        i.idle_ms,
        i.keep_alive_ms,
        i.steady.p50_us,
        i.steady.p99_us,
        i.after_us,
        list(&i.after_next_us),
        i.ratio,
        list(&i.after_each_us)
    );
    if let Some(r) = &i.raw_tcp {
        let _ = write!(
            s,
            "<tr><td>raw TCP ping-pong, same gaps interleaved (no keel)</td><td>steady p50 {:.1} µs</td><td>{:.1} µs</td><td>{:.2}</td><td>{} µs</td></tr>",
            r.steady_p50_us,
            r.after_us,
            r.ratio,
            list(&r.after_each_us)
        );
    }
    let _ = write!(
        s,
        "</table><p class=\"note\">Bar: {}. Pool threads {} → {} during a gap ({} retired over all gaps; the warm floor stays); threads created for the calls after the gaps: {}. The raw TCP row is two plain threads echoing 64 bytes, no keel, its gaps alternating with keel's: what this machine alone charges for waking parked threads after idle.</p>",
        esc(&i.verdict.bar),
        i.threads_before_idle,
        i.threads_after_idle,
        i.retired_during_idle,
        i.threads_created_after_gap
    );
    s
}

/// Issue 10's overload: the three phases in a table.
fn overload_section(o: &Overload) -> String {
    let p = &o.params;
    let mut s = String::new();
    let _ = write!(
        s,
        "<h2>Issue 10: overload</h2><p class=\"note\">Throttle {} running + {} queued; the operation sleeps {} ms, so the throttle admits {:.0} calls/s; the overload offers {} × that ({:.0} calls/s achieved) over {} connections, open-loop. {}. The bar's latencies are measured at the client (call sent to answer received, loopback); the host's own timing of the same calls (arrival to answer) is in the JSON and the text summary. After the overload the load stops; its last answer came {:.1} ms later, and the recovery calls start at once.</p>",
        p.concurrency,
        p.queue,
        p.work_us as f64 / 1000.0,
        o.capacity_per_sec,
        p.factor,
        o.offered_per_sec,
        p.connections,
        if o.placement.pinned {
            format!(
                "Host in a child process on CPU {}, load generator on CPU {}",
                esc(o.placement.host_cpus.as_deref().unwrap_or("?")),
                esc(&o.placement.client_cpus)
            )
        } else {
            esc(o.placement.note.as_deref().unwrap_or("Not pinned"))
        },
        o.drain_ms
    );
    s.push_str("<table><tr><th>phase</th><th>calls/s</th><th>answered with a result</th><th>result p50 / p99</th><th>answered Busy</th><th>Busy p50 / p99</th><th>errors</th><th>first call</th><th>host CPU</th><th>generator CPU</th></tr>");
    for ph in &o.phases {
        let busy = if ph.busy.count > 0 {
            format!(
                "{:.3} / {:.3} ms",
                ph.busy.p50_us / 1000.0,
                ph.busy.p99_us / 1000.0
            )
        } else {
            "–".to_string()
        };
        let _ = write!(
            s,
            "<tr><td>{}</td><td>{:.0}</td><td>{}</td><td>{:.3} / {:.3} ms</td><td>{}</td><td>{}</td><td>{}</td><td>{:.3} ms ({})</td><td>{}</td><td>{}</td></tr>",
            ph.name,
            ph.offered_per_sec,
            ph.admitted.count,
            ph.admitted.p50_us / 1000.0,
            ph.admitted.p99_us / 1000.0,
            ph.busy.count,
            busy,
            ph.error_count(),
            ph.first_us / 1000.0,
            esc(&ph.first_outcome),
            ph.host_cpu_pct.map_or("?".to_string(), |v| format!("{v:.0} %")),
            ph.client_cpu_pct.map_or("?".to_string(), |v| format!("{v:.0} %"))
        );
    }
    s.push_str("</table>");
    if !o.warnings.is_empty() {
        s.push_str("<ul>");
        for w in &o.warnings {
            let _ = write!(s, "<li>{}</li>", esc(w));
        }
        s.push_str("</ul>");
    }
    s
}
