//! Seed 002's charts: pool threads over time during the bursts (the seeds' perfmon graph), and
//! where a burst call's time went (stacked bars and their numbers).

use std::fmt::Write as _;

use super::svg::{axes, esc, fmt_tick, nice_step, svg_open};
use crate::experiments::burst::{Burst, Sample};
use crate::experiments::phases::{Phases, SEGMENTS};

/// Pool threads over time during a burst experiment: the seeds' perfmon graph.
pub(super) fn threads_chart(b: &Burst) -> String {
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
    let mut s = svg_open(w, h);
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
    axes(&mut s, l, t, pw, ph);
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
    let mut s = svg_open(w, h);
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

/// The section on where a burst call's time went: the stacked bars and their numbers.
pub(super) fn phases_section(bursts: &[&Burst]) -> String {
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
