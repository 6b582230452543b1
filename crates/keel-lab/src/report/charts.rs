//! Seed 001's and seed 000's charts: keel's numbers beside the ones WCF's users reported.

use std::fmt::Write as _;

use super::svg::{axes, esc, nice_step, svg_open};
use crate::experiments::concurrent::Concurrent;
use crate::experiments::first_call::FirstCall;

/// Seed 001's latencies before the QFE (.NET 3.5), ms, in the order the seed lists them.
const WCF_001_BROKEN_MS: [f64; 10] = [
    1009.0, 1286.0, 1799.0, 2016.0, 2241.0, 2256.0, 2752.0, 2766.0, 2967.0, 3315.0,
];
/// Seed 001's latencies with the QFE installed, ms.
const WCF_001_FIXED_MS: [f64; 10] = [
    1026.0, 1028.0, 1081.0, 1074.0, 1084.0, 1072.0, 1073.0, 1029.0, 1021.0, 1154.0,
];
/// Seed 000's printed sequence (sync, async, async, sync; two calls each), ms.
const WCF_000_SEQUENCE_MS: [f64; 8] = [36.0, 1.0, 1005.0, 1.0, 4.0, 1.0, 0.0, 0.0];

/// Horizontal bars of per-client latencies: WCF before and after the QFE, and keel.
pub(super) fn latency_chart(c: &Concurrent) -> String {
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
    let mut s = svg_open(w, h);
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
pub(super) fn first_call_chart(fc: &FirstCall) -> String {
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
    let mut s = svg_open(w, h);
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
        r##"<line x1="{l}" x2="{:.1}" y1="{limit:.1}" y2="{limit:.1}" stroke="#16a34a" stroke-width="2" stroke-dasharray="5 3"/><text x="{:.1}" y="{:.1}" fill="#16a34a" text-anchor="end">1 ms (bar: the median round’s slowest call under it)</text>"##,
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
    axes(&mut s, l, t, pw, ph);
    let _ = write!(
        s,
        r##"<rect x="{l}" y="6" width="12" height="12" fill="#9ca3af"/><text x="{:.1}" y="16">WCF (seed 000, ms resolution)</text><rect x="{:.1}" y="6" width="12" height="12" fill="#2563eb"/><text x="{:.1}" y="16">keel (this run)</text></svg>"##,
        l + 16.0,
        l + 260.0,
        l + 276.0
    );
    s
}
