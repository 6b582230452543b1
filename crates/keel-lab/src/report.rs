//! `keel-lab all`: runs every experiment on a profile, prints one table (experiment, WCF as
//! reported, WCF fixed or worked around, keel, bar, verdict) and renders a self-contained HTML
//! report with hand-written SVG charts.

use std::fmt::Write as _;

use serde::Serialize;

use crate::experiments::burst::{self, Burst, Sample};
use crate::experiments::concurrent::{self, Concurrent};
use crate::experiments::first_call::{self, FirstCall};
use crate::experiments::idle::{self, Idle};
use crate::experiments::overload::{self, Overload};
use crate::experiments::phases::{Phases, SEGMENTS};
use crate::experiments::Binding;
use crate::peers::{self, Peers};
use crate::style::CSS;
use crate::wan::matrix::{Matrix, MatrixParams};

/// Seed 001's latencies before the QFE (.NET 3.5), ms, in the order the seed lists them.
pub(crate) const WCF_001_BROKEN_MS: [f64; 10] = [
    1009.0, 1286.0, 1799.0, 2016.0, 2241.0, 2256.0, 2752.0, 2766.0, 2967.0, 3315.0,
];
/// Seed 001's latencies with the QFE installed, ms.
pub(crate) const WCF_001_FIXED_MS: [f64; 10] = [
    1026.0, 1028.0, 1081.0, 1074.0, 1084.0, 1072.0, 1073.0, 1029.0, 1021.0, 1154.0,
];
/// Seed 000's printed sequence (sync, async, async, sync; two calls each), ms.
pub(crate) const WCF_000_SEQUENCE_MS: [f64; 8] = [36.0, 1.0, 1005.0, 1.0, 4.0, 1.0, 0.0, 0.0];

/// Timings of one run of every experiment.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Profile {
    /// `quick` or `full`.
    pub(crate) name: &'static str,
    /// Steady-state calls (first-call and idle).
    pub(crate) steady_calls: usize,
    /// Seed 001's clients and work.
    pub(crate) concurrent: (usize, u64),
    /// Seed 002's burst.
    pub(crate) burst: burst::Params,
    /// The 1,000-client burst.
    pub(crate) burst_large: burst::Params,
    /// Seed 003's idle gap and keep-alive.
    pub(crate) idle: (u64, u64),
    /// Issue 10's overload.
    pub(crate) overload: overload::Params,
    /// Seed 003's idle gaps (medians are taken over them).
    pub(crate) idle_gaps: usize,
    /// Seed 004's subset of the wan matrix.
    pub(crate) wan: MatrixParams,
    /// keel beside its peers.
    pub(crate) peers: peers::Params,
}

impl Profile {
    fn with(
        name: &'static str,
        rounds: usize,
        gap_ms: u64,
        keep_alive_ms: u64,
        idle_ms: u64,
        overload_secs: f64,
    ) -> Profile {
        let burst = burst::Params {
            binding: Binding::Tcp,
            clients: 100,
            work_ms: 2000,
            rounds,
            idle_ms: gap_ms,
            keep_alive_ms,
        };
        Profile {
            name,
            steady_calls: 1000,
            concurrent: (10, 1000),
            burst,
            burst_large: burst::Params {
                clients: 1000,
                rounds: 2,
                ..burst
            },
            idle: (idle_ms, keep_alive_ms),
            overload: overload::Params {
                seconds: overload_secs,
                ..overload::Params::defaults(Binding::Tcp)
            },
            idle_gaps: crate::verdict::IDLE_MIN_GAPS,
            wan: MatrixParams::all_subset(),
            peers: peers::Params::quick(),
        }
    }

    /// A few minutes at most: keep-alive 1 s, gaps of 2.5 s (longer than it, so the same
    /// retire-and-regrow mechanism runs), 3 bursts; overload phases of 3 s.
    pub(crate) fn quick() -> Profile {
        Profile::with("quick", 3, 2500, 1000, 2500, 3.0)
    }

    /// The seeds' timings: 25 s between 5 bursts, 15 s idle; keep-alive 10 s so both gaps
    /// outlast it (the CLR's was 15 s).
    pub(crate) fn full() -> Profile {
        let mut p = Profile::with("full", 5, 25_000, 10_000, 15_000, 5.0);
        p.wan.seconds = MatrixParams::full().seconds;
        p
    }
}

/// Every experiment's result, the table rows, and the overall verdict.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct All {
    /// The profile's timings.
    pub(crate) profile: Profile,
    /// The transport.
    pub(crate) binding: Binding,
    /// Seed 000.
    pub(crate) first_call: FirstCall,
    /// Seed 001.
    pub(crate) concurrent: Concurrent,
    /// Seed 002, 100 clients.
    pub(crate) burst: Burst,
    /// Seed 002, 1,000 clients.
    pub(crate) burst_large: Burst,
    /// Seed 003.
    pub(crate) idle: Idle,
    /// Issue 10: overload.
    pub(crate) overload: Overload,
    /// Seed 004 (a subset of the wan matrix).
    pub(crate) wan: Option<Matrix>,
    /// keel beside raw TCP, tonic and tarpc (quick; numbers only, no bar).
    pub(crate) peers: Option<Peers>,
    /// The table.
    pub(crate) rows: Vec<Row>,
    /// Whether every experiment met its bar.
    pub(crate) pass: bool,
}

pub(crate) use crate::verdict::Row;

/// Runs every experiment of `profile` on `binding`, one after the other.
pub(crate) fn run_all(binding: Binding, profile: &Profile) -> anyhow::Result<All> {
    let step = |n: u32, what: &str| eprintln!("[{n}/8] {what}");
    step(1, "first-call (seed 000)");
    let first_call = first_call::run(&first_call::Params {
        binding,
        steady_calls: profile.steady_calls,
    })?;
    step(2, "concurrent (seed 001)");
    let concurrent = concurrent::run(&concurrent::Params {
        binding,
        clients: profile.concurrent.0,
        work_ms: profile.concurrent.1,
    })?;
    step(3, "burst, 100 clients (seed 002)");
    let burst = burst::run(&burst::Params {
        binding,
        ..profile.burst
    })?;
    step(4, "burst, 1000 clients (seed 002)");
    let burst_large = burst::run(&burst::Params {
        binding,
        ..profile.burst_large
    })?;
    step(5, "idle (seed 003)");
    let idle = idle::run(&idle::Params {
        binding,
        idle_ms: profile.idle.0,
        keep_alive_ms: profile.idle.1,
        steady_calls: profile.steady_calls,
        raw_tcp: true,
        gaps: profile.idle_gaps,
    })?;
    // Last: it pins this process to one CPU while it runs (and restores it after).
    step(6, "overload (issue 10)");
    let overload = overload::run(&overload::Params {
        binding,
        ..profile.overload
    })?;
    step(7, "calls over a WAN (seed 004)");
    let wan = crate::wan::matrix::run(&profile.wan)?;
    step(8, "keel beside its peers (quick)");
    let peers = peers::run(&profile.peers)?;
    Ok(assemble(
        profile.clone(),
        binding,
        first_call,
        concurrent,
        burst,
        burst_large,
        idle,
        overload,
    )
    .with_wan(wan)
    .with_peers(peers))
}

/// Puts the results together with their table rows and overall verdict.
#[allow(clippy::too_many_arguments)]
pub(crate) fn assemble(
    profile: Profile,
    binding: Binding,
    first_call: FirstCall,
    concurrent: Concurrent,
    burst: Burst,
    burst_large: Burst,
    idle: Idle,
    overload: Overload,
) -> All {
    let pass = first_call.pass
        && concurrent.pass
        && burst.pass
        && burst_large.pass
        && idle.pass
        && overload.pass;
    let mut all = All {
        profile,
        binding,
        first_call,
        concurrent,
        burst,
        burst_large,
        idle,
        overload,
        wan: None,
        peers: None,
        rows: Vec::new(),
        pass,
    };
    all.rows = rows(&all);
    all
}

impl All {
    /// These results with the peers comparison (no bar: it does not change the verdict).
    pub(crate) fn with_peers(mut self, peers: Peers) -> All {
        self.peers = Some(peers);
        self
    }

    /// These results with seed 004's: its row, and its verdict in the overall one.
    pub(crate) fn with_wan(mut self, wan: Matrix) -> All {
        self.pass &= wan.pass;
        self.wan = Some(wan);
        self.rows = rows(&self);
        self
    }
}

fn secs(ms: f64) -> String {
    format!("{:.3} s", ms / 1000.0)
}

/// The table rows for `all`.
pub(crate) fn rows(all: &All) -> Vec<Row> {
    let fc = &all.first_call;
    let max_call = crate::verdict::max_of(&fc.calls.iter().map(|c| c.us).collect::<Vec<_>>());
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
                "{:.1} µs (p50 {:.1}); slowest call {:.1} µs",
                fc.first_async_us, fc.steady_p50_us, max_call
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
                "admitted p99 {:.2} ms (unloaded {:.2}); Busy p99 {}, {:.0} % Busy; recovery p99 {:.2} ms; {} errors",
                o.admitted_p99_ms,
                o.unloaded_p99_ms,
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

/// Escapes text for HTML and SVG.
fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A "nice" axis step (1, 2 or 5 × 10^k) giving about `ticks` ticks up to `max`.
pub(crate) fn nice_step(max: f64, ticks: usize) -> f64 {
    if max.is_nan() || max <= 0.0 || !max.is_finite() {
        return 1.0;
    }
    let raw = max / ticks.max(1) as f64;
    let mag = 10f64.powf(raw.log10().floor());
    let norm = raw / mag;
    let m = if norm <= 1.0 {
        1.0
    } else if norm <= 2.0 {
        2.0
    } else if norm <= 5.0 {
        5.0
    } else {
        10.0
    };
    m * mag
}

/// Pool threads over time during a burst experiment: the seeds' perfmon graph.
fn threads_chart(b: &Burst) -> String {
    let (w, h) = (1000.0, 300.0);
    let (l, r, t, bm) = (60.0, 20.0, 34.0, 45.0);
    let (pw, ph) = (w - l - r, h - t - bm);
    let t_max = b
        .thread_samples
        .last()
        .map_or(1.0, |s| s.t_ms)
        .max(b.rounds.last().map_or(1.0, |r| r.end_ms))
        .max(1.0);
    let y_max_raw = b
        .thread_samples
        .iter()
        .map(|s| s.threads)
        .chain(b.rounds.iter().map(|r| r.peak_threads))
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    let y_step = nice_step(y_max_raw, 5);
    let y_max = (y_max_raw / y_step).ceil() * y_step;
    let x = |ms: f64| l + ms / t_max * pw;
    let y = |v: f64| t + ph - v / y_max * ph;
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg viewBox="0 0 {w} {h}" width="{w}" height="{h}" xmlns="http://www.w3.org/2000/svg" font-family="sans-serif" font-size="12">"#
    );
    // A burst's span as a shaded band, labelled with its length.
    let mut band = |start_ms: f64, end_ms: f64, fill: &str, ink: &str, label: String| {
        let _ = write!(
            s,
            r##"<rect x="{:.1}" y="{t}" width="{:.1}" height="{ph}" fill="{fill}"/><text x="{:.1}" y="{:.1}" fill="{ink}">{label}</text>"##,
            x(start_ms),
            (x(end_ms) - x(start_ms)).max(1.0),
            x(start_ms) + 3.0,
            t + 14.0,
        );
    };
    if let Some(base) = &b.baseline {
        let label = format!("baseline {:.3} s", base.total_ms / 1000.0);
        band(base.start_ms, base.end_ms, "#e5e7eb", "#374151", label);
    }
    for (i, r) in b.rounds.iter().enumerate() {
        let label = format!("burst {} {:.3} s", i + 1, r.total_ms / 1000.0);
        band(r.start_ms, r.end_ms, "#dbeafe", "#1e40af", label);
    }
    // Axes and grid.
    let mut v = 0.0;
    while v <= y_max + 1e-9 {
        let _ = write!(
            s,
            r##"<line x1="{l}" x2="{:.1}" y1="{:.1}" y2="{:.1}" stroke="#e5e7eb"/><text x="{:.1}" y="{:.1}" text-anchor="end">{v}</text>"##,
            l + pw,
            y(v),
            y(v),
            l - 6.0,
            y(v) + 4.0
        );
        v += y_step;
    }
    let x_step = nice_step(t_max / 1000.0, 10);
    let mut sec = 0.0;
    while sec * 1000.0 <= t_max + 1e-9 {
        let _ = write!(
            s,
            r##"<line x1="{:.1}" x2="{:.1}" y1="{:.1}" y2="{:.1}" stroke="#9ca3af"/><text x="{:.1}" y="{:.1}" text-anchor="middle">{sec}</text>"##,
            x(sec * 1000.0),
            x(sec * 1000.0),
            t + ph,
            t + ph + 5.0,
            x(sec * 1000.0),
            t + ph + 18.0
        );
        sec += x_step;
    }
    let _ = write!(
        s,
        r##"<line x1="{l}" x2="{l}" y1="{t}" y2="{:.1}" stroke="#374151"/><line x1="{l}" x2="{:.1}" y1="{:.1}" y2="{:.1}" stroke="#374151"/>"##,
        t + ph,
        l + pw,
        t + ph,
        t + ph
    );
    let _ = write!(
        s,
        r##"<text x="{:.1}" y="{:.1}" text-anchor="middle">time (s)</text><text x="14" y="{:.1}" transform="rotate(-90 14 {:.1})" text-anchor="middle">pool threads</text>"##,
        l + pw / 2.0,
        h - 6.0,
        t + ph / 2.0,
        t + ph / 2.0
    );
    // Floor.
    let _ = write!(
        s,
        r##"<line x1="{l}" x2="{:.1}" y1="{:.1}" y2="{:.1}" stroke="#16a34a" stroke-dasharray="4 3"/><text x="{:.1}" y="{:.1}" fill="#16a34a" text-anchor="end">warm floor {}</text>"##,
        l + pw,
        y(b.min_threads as f64),
        y(b.min_threads as f64),
        l + pw - 4.0,
        y(b.min_threads as f64) - 4.0,
        b.min_threads
    );
    // Step lines of the samples: every thread, and the busy ones over it.
    let step = |value: fn(&Sample) -> usize| {
        let mut path = String::new();
        for (i, smp) in b.thread_samples.iter().enumerate() {
            let (px, py) = (x(smp.t_ms), y(value(smp) as f64));
            let _ = if i == 0 {
                write!(path, "M{px:.1},{py:.1}")
            } else {
                write!(path, " H{px:.1} V{py:.1}")
            };
        }
        path
    };
    let _ = write!(
        s,
        r##"<path d="{}" fill="none" stroke="#dc2626" stroke-width="2"/><path d="{}" fill="none" stroke="#1d4ed8" stroke-width="1.5" stroke-dasharray="5 3"/>"##,
        step(|smp| smp.threads),
        step(|smp| smp.busy)
    );
    // Legend, above the plot on the right.
    let lx = l + pw - 460.0;
    let _ = write!(
        s,
        r##"<line x1="{lx:.1}" x2="{:.1}" y1="13" y2="13" stroke="#dc2626" stroke-width="2"/><text x="{:.1}" y="17">keel_pool_threads, every state</text><line x1="{:.1}" x2="{:.1}" y1="13" y2="13" stroke="#1d4ed8" stroke-width="1.5" stroke-dasharray="5 3"/><text x="{:.1}" y="17">keel_pool_threads{{state="busy"}}</text></svg>"##,
        lx + 20.0,
        lx + 26.0,
        lx + 215.0,
        lx + 235.0,
        lx + 241.0
    );
    s
}

/// The burst experiments' rounds that have a phase split, labelled.
fn split_rounds<'a>(bursts: &[&'a Burst]) -> Vec<(String, &'a Phases)> {
    bursts
        .iter()
        .flat_map(|b| {
            b.rounds.iter().enumerate().filter_map(move |(i, r)| {
                let p = r.phases.as_ref()?;
                Some((
                    format!("{} × {} ms, burst {}", b.clients, b.work_ms, i + 1),
                    p,
                ))
            })
        })
        .collect()
}

/// Stacked horizontal bars, one per burst round: the whole call on the left (linear: the
/// handler's sleep is nearly all of it), and on the right everything but the handler, on a
/// scale of its own.
fn phases_chart(rows: &[(String, &Phases)]) -> String {
    let (label_w, gap, panel_w, value_w) = (190.0, 30.0, 300.0, 85.0);
    let (row_h, bar_h, top, axis_h) = (24.0, 15.0, 58.0, 40.0);
    let w = label_w + 2.0 * (panel_w + value_w) + gap;
    let h = top + rows.len() as f64 * row_h + axis_h;
    let handler = 2;
    let clamp = |v: f64| if v.is_finite() { v.max(0.0) } else { 0.0 };
    let whole_max = rows
        .iter()
        .map(|(_, p)| p.values().iter().copied().map(clamp).sum::<f64>())
        .fold(0.0, f64::max);
    let rest_max = rows
        .iter()
        .map(|(_, p)| {
            p.values()
                .iter()
                .enumerate()
                .filter(|(i, _)| *i != handler)
                .map(|(_, v)| clamp(*v))
                .sum::<f64>()
        })
        .fold(0.0, f64::max);
    let axis = |max: f64| {
        let step = nice_step(max, 5);
        (step, ((max / step).ceil() * step).max(step))
    };
    let (whole_step, whole_top) = axis(whole_max);
    let (rest_step, rest_top) = axis(rest_max);
    let x0 = [label_w, label_w + panel_w + value_w + gap];
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg viewBox="0 0 {w} {h}" width="{w}" height="{h}" xmlns="http://www.w3.org/2000/svg" font-family="sans-serif" font-size="12">"#
    );
    // Legend.
    let mut lx = 10.0;
    for seg in &SEGMENTS {
        let _ = write!(
            s,
            r##"<rect x="{lx:.1}" y="8" width="12" height="12" fill="{}"/><text x="{:.1}" y="18">{}</text>"##,
            seg.colour,
            lx + 16.0,
            esc(seg.name)
        );
        lx += 16.0 + seg.name.chars().count() as f64 * 7.0 + 18.0;
    }
    // Panel titles, grid and axes.
    for (panel, (title, step, top_v)) in [
        ("the whole call (client-timed)", whole_step, whole_top),
        ("everything but the handler", rest_step, rest_top),
    ]
    .into_iter()
    .enumerate()
    {
        let px = x0[panel];
        let _ = write!(
            s,
            r##"<text x="{px:.1}" y="{:.1}" font-weight="bold">{title}</text>"##,
            top - 12.0
        );
        let bottom = top + rows.len() as f64 * row_h;
        let mut v = 0.0;
        while v <= top_v + 1e-9 {
            let gx = px + v / top_v * panel_w;
            let _ = write!(
                s,
                r##"<line x1="{gx:.1}" x2="{gx:.1}" y1="{top}" y2="{bottom:.1}" stroke="#e5e7eb"/><text x="{gx:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
                bottom + 15.0,
                fmt_tick(v)
            );
            v += step;
        }
        let _ = write!(
            s,
            r##"<line x1="{px:.1}" x2="{px:.1}" y1="{top}" y2="{bottom:.1}" stroke="#374151"/><text x="{:.1}" y="{:.1}" text-anchor="middle">ms per call (mean)</text>"##,
            px + panel_w / 2.0,
            bottom + 32.0
        );
    }
    for (i, (label, p)) in rows.iter().enumerate() {
        let y = top + i as f64 * row_h + (row_h - bar_h) / 2.0;
        let _ = write!(
            s,
            r##"<text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
            label_w - 8.0,
            y + bar_h - 3.0,
            esc(label)
        );
        for (panel, top_v) in [whole_top, rest_top].into_iter().enumerate() {
            let mut x = x0[panel];
            let mut total = 0.0;
            for (k, (seg, v)) in SEGMENTS.iter().zip(p.values()).enumerate() {
                if panel == 1 && k == handler {
                    continue;
                }
                let v = clamp(v);
                total += v;
                let bw = v / top_v * panel_w;
                if bw > 0.0 {
                    let _ = write!(
                        s,
                        r##"<rect x="{x:.2}" y="{y:.1}" width="{bw:.2}" height="{bar_h}" fill="{}"><title>{}: {v:.3} ms</title></rect>"##,
                        seg.colour,
                        esc(seg.name)
                    );
                }
                x += bw;
            }
            let _ = write!(
                s,
                r##"<text x="{:.1}" y="{:.1}">{total:.2} ms</text>"##,
                x + 5.0,
                y + bar_h - 3.0
            );
        }
    }
    s.push_str("</svg>");
    s
}

/// An axis tick: whole numbers plain, fractions with as few decimals as they need.
fn fmt_tick(v: f64) -> String {
    let t = format!("{v:.3}");
    let t = t.trim_end_matches('0').trim_end_matches('.');
    t.to_string()
}

/// The section on where a burst call's time went: the stacked bars and their numbers.
fn phases_section(bursts: &[&Burst]) -> String {
    let rows = split_rounds(bursts);
    let mut s = String::from("<h2 id=\"burst-phases\">Where a burst call's time went</h2>");
    if rows.is_empty() {
        s.push_str("<p class=\"note\">Not measured: no scrape of the host's <code>/metrics</code> succeeded.</p>");
        return s;
    }
    s.push_str("<p class=\"note\">Mean per call of each burst round, from the host's own histograms as a Prometheus user sees them: the lab scrapes the admin endpoint's <code>GET /metrics</code> before and after each round and divides the change in <code>_sum</code> by the change in <code>_count</code> of <code>keel_server_throttle_wait_seconds</code>, <code>keel_server_pool_wait_seconds</code>, <code>keel_server_handler_seconds</code> (the operation's 2 s sleep) and <code>keel_server_call_duration_seconds</code> (the host's whole time). <i>Server, other</i> is the host's time outside those three phases (reading the request, dispatch, writing the answer); <i>client + network</i> is the client-timed call less the host's time: the client's runtime, the blocking caller's wake-up, loopback. Left: the whole call to scale. Right: the same bars without the handler, on their own scale.</p>");
    s.push_str(&phases_chart(&rows));
    s.push_str("<table><tr><th>round</th><th>calls</th>");
    for seg in &SEGMENTS {
        let _ = write!(s, "<th>{}</th>", esc(seg.name));
    }
    s.push_str("<th>host total</th><th>client-timed call</th></tr>");
    for (label, p) in &rows {
        let _ = write!(s, "<tr><td>{}</td><td>{}</td>", esc(label), p.calls);
        for v in p.values() {
            let _ = write!(s, "<td>{v:.3} ms</td>");
        }
        let _ = write!(
            s,
            "<td>{:.3} ms</td><td>{:.3} ms</td></tr>",
            p.server_ms, p.client_ms
        );
    }
    s.push_str("</table>");
    s
}

/// Horizontal bars of per-client latencies: WCF before and after the QFE, and keel.
fn latency_chart(c: &Concurrent) -> String {
    let groups: [(&str, &str, Vec<f64>); 3] = [
        (
            "WCF, .NET 3.5 (as reported)",
            "#9ca3af",
            WCF_001_BROKEN_MS.to_vec(),
        ),
        ("WCF with the QFE", "#fbbf24", WCF_001_FIXED_MS.to_vec()),
        ("keel", "#2563eb", c.latencies_ms.clone()),
    ];
    let bar_h = 9.0;
    let gap = 22.0;
    let (w, l, r, t) = (1000.0, 200.0, 90.0, 20.0);
    let n: usize = groups.iter().map(|g| g.2.len()).sum();
    let ph = n as f64 * (bar_h + 2.0) + groups.len() as f64 * gap;
    let h = t + ph + 40.0;
    let pw = w - l - r;
    let max = groups
        .iter()
        .flat_map(|g| g.2.iter().copied())
        .fold(c.bar_ms, f64::max);
    let step = nice_step(max, 8);
    let x_max = (max / step).ceil() * step;
    let x = |ms: f64| l + ms / x_max * pw;
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg viewBox="0 0 {w} {h:.0}" width="{w}" height="{h:.0}" xmlns="http://www.w3.org/2000/svg" font-family="sans-serif" font-size="12">"#
    );
    let mut v = 0.0;
    while v <= x_max + 1e-9 {
        let _ = write!(
            s,
            r##"<line x1="{:.1}" x2="{:.1}" y1="{t}" y2="{:.1}" stroke="#e5e7eb"/><text x="{:.1}" y="{:.1}" text-anchor="middle">{v}</text>"##,
            x(v),
            x(v),
            t + ph,
            x(v),
            t + ph + 16.0
        );
        v += step;
    }
    let mut yy = t;
    for (name, color, values) in &groups {
        yy += gap;
        let _ = write!(
            s,
            r##"<text x="{:.1}" y="{:.1}" text-anchor="end" font-weight="bold">{}</text>"##,
            l - 8.0,
            yy - 6.0,
            esc(name)
        );
        for (i, &ms) in values.iter().enumerate() {
            let _ = write!(
                s,
                r##"<text x="{:.1}" y="{:.1}" text-anchor="end" fill="#6b7280" font-size="10">#{i}</text><rect x="{l}" y="{yy:.1}" width="{:.1}" height="{bar_h}" fill="{color}"/><text x="{:.1}" y="{:.1}" font-size="10">{ms:.0} ms</text>"##,
                l - 8.0,
                yy + bar_h - 1.0,
                (x(ms) - l).max(0.5),
                x(ms) + 4.0,
                yy + bar_h - 1.0
            );
            yy += bar_h + 2.0;
        }
    }
    let _ = write!(
        s,
        r##"<line x1="{:.1}" x2="{:.1}" y1="{t}" y2="{:.1}" stroke="#16a34a" stroke-width="2" stroke-dasharray="5 3"/><text x="{:.1}" y="{:.1}" fill="#16a34a">bar {:.0} ms</text>"##,
        x(c.bar_ms),
        x(c.bar_ms),
        t + ph,
        x(c.bar_ms) + 4.0,
        t + 12.0,
        c.bar_ms
    );
    let _ = write!(
        s,
        r##"<text x="{:.1}" y="{:.1}" text-anchor="middle">latency (ms)</text></svg>"##,
        l + pw / 2.0,
        h - 4.0
    );
    s
}

/// The seed-000 sequence: WCF's and keel's call times side by side on a log scale.
fn first_call_chart(fc: &FirstCall) -> String {
    let (w, h) = (1000.0, 330.0);
    let (l, r, t, bm) = (70.0, 20.0, 30.0, 60.0);
    let (pw, ph) = (w - l - r, h - t - bm);
    // 1 µs .. 10 s, log10.
    let (lo, hi) = (0.0, 7.0);
    let y = |us: f64| {
        let v = us.max(1.0).log10().clamp(lo, hi);
        t + ph - (v - lo) / (hi - lo) * ph
    };
    let n = fc.calls.len().max(1);
    let slot = pw / n as f64;
    let bw = slot * 0.32;
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg viewBox="0 0 {w} {h}" width="{w}" height="{h}" xmlns="http://www.w3.org/2000/svg" font-family="sans-serif" font-size="12">"#
    );
    for (e, label) in [
        "1 µs", "10 µs", "100 µs", "1 ms", "10 ms", "100 ms", "1 s", "10 s",
    ]
    .iter()
    .enumerate()
    {
        let yy = y(10f64.powi(e as i32));
        let _ = write!(
            s,
            r##"<line x1="{l}" x2="{:.1}" y1="{yy:.1}" y2="{yy:.1}" stroke="#e5e7eb"/><text x="{:.1}" y="{:.1}" text-anchor="end">{label}</text>"##,
            l + pw,
            l - 6.0,
            yy + 4.0
        );
    }
    let limit = y(crate::verdict::FIRST_CALL_MAX_US);
    let _ = write!(
        s,
        r##"<line x1="{l}" x2="{:.1}" y1="{limit:.1}" y2="{limit:.1}" stroke="#16a34a" stroke-width="2" stroke-dasharray="5 3"/><text x="{:.1}" y="{:.1}" fill="#16a34a" text-anchor="end">bar: every call &lt; 1 ms</text>"##,
        l + pw,
        l + pw - 4.0,
        limit - 4.0
    );
    for (i, c) in fc.calls.iter().enumerate() {
        let x0 = l + i as f64 * slot + slot * 0.16;
        let wcf_ms = WCF_000_SEQUENCE_MS.get(i).copied();
        if let Some(ms) = wcf_ms {
            let us = ms * 1000.0;
            let top = y(us);
            let label = if ms == 0.0 {
                "0 ms".to_string()
            } else {
                format!("{ms:.0} ms")
            };
            let _ = write!(
                s,
                r##"<rect x="{x0:.1}" y="{top:.1}" width="{bw:.1}" height="{:.1}" fill="#9ca3af"/><text x="{:.1}" y="{:.1}" text-anchor="middle" font-size="10">{label}</text>"##,
                (t + ph - top).max(0.5),
                x0 + bw / 2.0,
                top - 3.0
            );
        }
        let x1 = x0 + bw;
        let top = y(c.us);
        let _ = write!(
            s,
            r##"<rect x="{x1:.1}" y="{top:.1}" width="{bw:.1}" height="{:.1}" fill="#2563eb"/><text x="{:.1}" y="{:.1}" text-anchor="middle" font-size="10" fill="#1e40af">{:.0} µs</text>"##,
            (t + ph - top).max(0.5),
            x1 + bw / 2.0,
            top - 3.0,
            c.us
        );
        let _ = write!(
            s,
            r##"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text><text x="{:.1}" y="{:.1}" text-anchor="middle" fill="#6b7280">call {}</text>"##,
            x0 + bw,
            t + ph + 18.0,
            esc(&c.test),
            x0 + bw,
            t + ph + 33.0,
            c.call
        );
    }
    let _ = write!(
        s,
        r##"<line x1="{l}" x2="{l}" y1="{t}" y2="{:.1}" stroke="#374151"/><line x1="{l}" x2="{:.1}" y1="{:.1}" y2="{:.1}" stroke="#374151"/>"##,
        t + ph,
        l + pw,
        t + ph,
        t + ph
    );
    let _ = write!(
        s,
        r##"<rect x="{l}" y="6" width="12" height="12" fill="#9ca3af"/><text x="{:.1}" y="16">WCF (seed 000, ms resolution)</text><rect x="{:.1}" y="6" width="12" height="12" fill="#2563eb"/><text x="{:.1}" y="16">keel (this run)</text></svg>"##,
        l + 16.0,
        l + 260.0,
        l + 276.0
    );
    s
}

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
        "<h2>Seed 000: the first-call sequence</h2><p class=\"note\">Sync test, async test, async test, sync test; each a new client, opened (not timed), then two timed calls of <code>Add(1, 2)</code>. Log scale. keel's steady state: async p50 {:.1} µs, p99 {:.1} µs; sync p50 {:.1} µs, p99 {:.1} µs.</p>",
        fc.steady_async.p50_us, fc.steady_async.p99_us, fc.steady_sync.p50_us, fc.steady_sync.p99_us
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
        "<h2>Issue 10: overload</h2><p class=\"note\">Throttle {} running + {} queued; the operation sleeps {} ms, so the throttle admits {:.0} calls/s; the overload offers {} × that ({:.0} calls/s achieved) over {} connections, open-loop. {}. Latencies are measured at the client (call sent to answer received, loopback): keel has no host-side timing hook. After the overload the load stops; its last answer came {:.1} ms later, and the recovery calls start at once.</p>",
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::experiments::burst::{Baseline, Round, Sample};
    use crate::experiments::first_call::TimedCall;
    use crate::experiments::Dist;

    fn dist(p50: f64) -> Dist {
        Dist {
            count: 1000,
            min_us: p50 / 2.0,
            p50_us: p50,
            p99_us: p50 * 2.0,
            max_us: p50 * 4.0,
        }
    }

    fn sample_all(burst_ms: f64) -> All {
        let profile = Profile::quick();
        let calls = ["sync 1", "async 1", "async 2", "sync 2"]
            .iter()
            .flat_map(|t| {
                (1..=2).map(move |c| TimedCall {
                    test: t.to_string(),
                    call: c,
                    us: 40.0,
                })
            })
            .collect();
        let fc = first_call::evaluate(Binding::Tcp, calls, dist(30.0), dist(35.0));
        let conc = concurrent::evaluate(
            &concurrent::Params {
                binding: Binding::Tcp,
                clients: 10,
                work_ms: 1000,
            },
            vec![1001.0; 10],
            10,
        );
        let round = |total_ms| Round {
            total_ms,
            peak_threads: 100,
            threads_before: 2,
            slowest_call_ms: total_ms,
            start_ms: 100.0,
            end_ms: 100.0 + total_ms,
            phases: Some(Phases {
                calls: 100,
                client_ms: total_ms - 1.0,
                throttle_wait_ms: 0.001,
                pool_wait_ms: 1.5,
                handler_ms: 2000.2,
                server_other_ms: 0.02,
                server_ms: 2001.721,
                client_network_ms: total_ms - 1.0 - 2001.721,
            }),
        };
        let samples = (0..60)
            .map(|i| Sample {
                t_ms: i as f64 * 50.0,
                threads: if (2..42).contains(&i) { 100 } else { 2 },
                busy: if (2..42).contains(&i) { 98 } else { 0 },
            })
            .collect();
        let base = |total_ms| {
            Some(Baseline {
                total_ms,
                slowest_call_ms: total_ms,
                start_ms: 0.0,
                end_ms: total_ms,
            })
        };
        let b = burst::evaluate(
            &profile.burst,
            2,
            98,
            vec![round(burst_ms)],
            base(2003.0),
            samples,
        );
        let bl = burst::evaluate(
            &profile.burst_large,
            2,
            998,
            vec![round(2050.0)],
            base(2061.4),
            vec![],
        );
        let idle = idle::evaluate(
            &idle::tests::params(),
            30.0,
            idle::tests::gaps(&[45.0; 5]),
            dist(30.0),
            Some(idle::RawTcp::new(13.5, vec![60.0; 5])),
        );
        let over = overload::tests::sample(3300.0, 0);
        assemble(profile, Binding::Tcp, fc, conc, b, bl, idle, over)
    }

    #[test]
    fn overall_verdict_and_rows() {
        let all = sample_all(2005.0);
        assert!(all.pass);
        assert_eq!(all.rows.len(), 6);
        assert_eq!(all.rows[5].wcf_broken, "not in the seeds");
        assert!(
            all.rows[5].keel.contains("Busy p99 0.400 ms"),
            "{:?}",
            all.rows[5]
        );
        assert!(all.rows.iter().all(|r| r.verdict == "PASS"));
        assert_eq!(all.rows[1].wcf_broken, "1.0–3.3 s");
        assert_eq!(all.rows[2].wcf_broken, "14.0 s");
        assert!(
            all.rows[3]
                .keel
                .contains("(thread-per-connection server, same run: 2.061 s)"),
            "{:?}",
            all.rows[3]
        );
        assert!(
            all.rows[3]
                .bar
                .contains("thread-per-connection 2061.4 + 1 %) = 2100 ms"),
            "{:?}",
            all.rows[3]
        );
        let t = table(&all);
        assert!(t.contains("all bars met"), "{t}");
        let failing = sample_all(2500.0);
        assert!(!failing.pass);
        assert_eq!(failing.rows[2].verdict, "FAIL");
        assert!(table(&failing).contains("bars missed: burst 100"));
    }

    #[test]
    fn table_columns_line_up() {
        let t = table(&sample_all(2005.0));
        let lines: Vec<&str> = t.lines().filter(|l| l.starts_with('|')).collect();
        assert_eq!(lines.len(), 8);
        let bars = |l: &str| {
            l.chars()
                .enumerate()
                .filter(|(_, c)| *c == '|')
                .map(|(i, _)| i)
                .collect::<Vec<_>>()
        };
        // Every separator of the body at the same character column as in the header.
        let header = bars(lines[0]);
        for l in &lines[2..] {
            assert_eq!(bars(l)[..6], header[..6], "{l}");
        }
    }

    #[test]
    fn json_shape_of_all() {
        let v = serde_json::to_value(sample_all(2005.0)).unwrap();
        assert!(v["pass"].is_boolean());
        for k in [
            "first_call",
            "concurrent",
            "burst",
            "burst_large",
            "idle",
            "overload",
            "rows",
        ] {
            assert!(v.get(k).is_some(), "missing {k}");
        }
        assert!(v["burst"]["thread_samples"].is_array());
        assert_eq!(v["profile"]["burst"]["rounds"], 3);
        let keys: Vec<&str> = v["profile"]["burst"]
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        // serde_json's map sorts keys; the binding is the report's, not the profile's.
        assert_eq!(
            keys,
            ["clients", "idle_ms", "keep_alive_ms", "rounds", "work_ms"]
        );
    }

    #[test]
    fn html_is_self_contained() {
        let h = html(&sample_all(2005.0));
        assert!(h.starts_with("<!DOCTYPE html>"));
        assert_eq!(h.matches("<svg").count(), 5);
        assert_eq!(h.matches("</svg>").count(), 5);
        assert!(h.contains(">Where a burst call's time went</h2>"));
        // One bar label per round with a split: the 100-client burst's and the 1,000's.
        assert!(h.contains(">100 × 2000 ms, burst 1</text>"));
        assert!(h.contains(">1000 × 2000 ms, burst 1</text>"));
        assert!(h.contains("<td>1.500 ms</td>"));
        assert!(!h.contains("<script"));
        assert!(!h.contains("http://") || !h.contains("src="));
        assert!(!h.contains("NaN"));
        assert!(h.contains("<h2>Issue 10: overload</h2>"));
        assert!(h.contains("measured at the client"));
        assert!(h.contains("<td>thread-per-connection baseline</td><td>2061.4 ms</td>"));
        assert!(h.contains(">baseline 2.061 s</text>"));
    }

    #[test]
    fn seed_004_adds_its_row_and_section() {
        use crate::wan::matrix::tests::sample;
        let all = sample_all(2005.0).with_wan(sample(MatrixParams::all_subset(), 0.99));
        assert!(all.pass);
        // Five seed rows, the overload row, then seed 004's.
        assert_eq!(all.rows.len(), 7);
        assert_eq!(all.rows[6].verdict, "PASS");
        assert!(table(&all).contains("(004)"));
        let h = html(&all);
        assert_eq!(h.matches("<svg").count(), 7);
        assert!(!h.contains("NaN"));
        // A missed wan cell fails `all`.
        let all = sample_all(2005.0).with_wan(sample(MatrixParams::all_subset(), 0.5));
        assert!(!all.pass);
        assert_eq!(all.rows[6].verdict, "FAIL");
        assert!(table(&all).contains("bars missed: calls over a WAN"));
        let v = serde_json::to_value(&all).unwrap();
        assert_eq!(v["wan"]["cells"].as_array().unwrap().len(), 24);
        assert_eq!(v["profile"]["idle_gaps"], 5);
    }

    #[test]
    fn phase_section_without_splits() {
        let mut all = sample_all(2005.0);
        for b in [&mut all.burst, &mut all.burst_large] {
            for r in &mut b.rounds {
                r.phases = None;
            }
        }
        let s = phases_section(&[&all.burst, &all.burst_large]);
        assert!(s.contains("Not measured"));
        assert!(!s.contains("<svg"));
        assert_eq!(fmt_tick(0.5), "0.5");
        assert_eq!(fmt_tick(2000.0), "2000");
    }

    #[test]
    fn peers_add_a_section_but_no_row_or_verdict() {
        use crate::peers::ratios::tests::row;
        use crate::peers::{Params, System};
        let rows = vec![row(System::Raw, 1.0), row(System::KeelTcpAsync, 2.0)];
        let peers = Peers::new(Params::quick(), vec![rows], String::new(), (0.0, 0.0));
        let before = sample_all(2005.0);
        let all = sample_all(2005.0).with_peers(peers);
        assert_eq!((all.pass, all.rows.len()), (before.pass, before.rows.len()));
        let h = html(&all);
        assert!(h.contains("<h2>keel beside its peers</h2>"));
        // The four bar charts of the peers section, on top of what `all` draws without it.
        let without = html(&before).matches("<svg").count();
        assert_eq!(h.matches("<svg").count(), without + 4);
        let v = serde_json::to_value(&all).unwrap();
        assert_eq!(v["peers"]["scenario"], "peers");
        assert!(serde_json::to_value(&before).unwrap()["peers"].is_null());
    }

    #[test]
    fn nice_steps() {
        assert_eq!(nice_step(100.0, 5), 20.0);
        assert_eq!(nice_step(3315.0, 8), 500.0);
        assert_eq!(nice_step(7.3, 10), 1.0);
        assert_eq!(nice_step(0.0, 5), 1.0);
        assert_eq!(nice_step(f64::NAN, 5), 1.0);
    }
}
