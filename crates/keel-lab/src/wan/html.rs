//! The report's seed-004 section: the matrix as HTML tables and two charts, calls/s against
//! RTT per binding (one per payload), keel's variants beside WCF's bindings as the seed measured
//! them.

use std::fmt::Write as _;

use super::matrix::{self, Matrix, SEED};
use super::{Mode, Payload};
use crate::experiments::Binding;

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn color(b: Binding) -> &'static str {
    match b {
        Binding::Tcp => "#2563eb",
        Binding::Tcps => "#7c3aed",
        Binding::Http1 => "#ea580c",
        Binding::H2c => "#16a34a",
        Binding::HttpsH1 => "#db2777",
        Binding::HttpsH2 => "#0891b2",
        Binding::Quic => "#65a30d",
    }
}

fn html_table(header: &[String], rows: &[Vec<String>]) -> String {
    let mut s = String::from("<table><tr>");
    for h in header {
        let _ = write!(s, "<th>{}</th>", esc(h));
    }
    s.push_str("</tr>");
    for r in rows {
        s.push_str("<tr>");
        for c in r {
            let class = if c.ends_with(" *") {
                " class=\"FAIL\""
            } else {
                ""
            };
            let _ = write!(s, "<td{class}>{}</td>", esc(c));
        }
        s.push_str("</tr>");
    }
    s.push_str("</table>");
    s
}

/// One series of a chart: a name, a style, and (RTT ms, calls/s) points.
struct Series {
    name: String,
    color: &'static str,
    dash: &'static str,
    width: f64,
    points: Vec<(f64, f64)>,
}

/// Calls/s (log scale) against RTT for `payload`: WCF (XP host), keel's variants, then the
/// limit and raw TCP on top.
pub(crate) fn chart(m: &Matrix, payload: Payload) -> String {
    let rtts = &m.params.rtts_ms;
    let mut series = Vec::new();
    for s in &SEED {
        let points = rtts
            .iter()
            .filter_map(|&r| matrix::seed_at(s, payload, r).map(|(xp, _)| (r, xp)))
            .collect();
        series.push(Series {
            name: format!("WCF {} (XP)", s.wcf),
            color: "#c4c8cf",
            dash: "2 3",
            width: 1.5,
            points,
        });
    }
    for &v in &m.params.variants {
        let points = rtts
            .iter()
            .filter_map(|&r| m.cell(v, r, payload).map(|c| (r, c.calls_per_sec)))
            .filter(|p| p.1.is_finite())
            .collect();
        series.push(Series {
            name: format!("keel {}", v.name()),
            color: color(v.binding),
            dash: if v.mode == Mode::Streamed { "5 3" } else { "" },
            width: 2.0,
            points,
        });
    }
    let limit_points = rtts
        .iter()
        .filter_map(|&r| {
            let v = match payload {
                Payload::Small => Some(1000.0 / r),
                Payload::Large => m.raw_at(r, payload).map(|x| x.calls_per_sec),
            };
            v.map(|v| (r, v))
        })
        .collect();
    series.push(Series {
        name: match payload {
            Payload::Small => "limit: 1/RTT".to_string(),
            Payload::Large => "limit: raw TCP, same link".to_string(),
        },
        color: "#111827",
        dash: "6 4",
        width: 2.5,
        points: limit_points,
    });
    if payload == Payload::Small {
        series.push(Series {
            name: "raw TCP, same link".to_string(),
            color: "#6b7280",
            dash: "1 3",
            width: 2.5,
            points: rtts
                .iter()
                .filter_map(|&r| m.raw_at(r, payload).map(|x| (r, x.calls_per_sec)))
                .collect(),
        });
    }
    let values: Vec<f64> = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .filter(|v| v.is_finite() && *v > 0.0)
        .collect();
    let lo = values
        .iter()
        .copied()
        .fold(f64::INFINITY, f64::min)
        .max(1e-3)
        .log10()
        .floor();
    let hi = values
        .iter()
        .copied()
        .fold(0.0, f64::max)
        .max(1e-2)
        .log10()
        .ceil()
        .max(lo + 1.0);
    let lo = if lo.is_finite() { lo } else { hi - 1.0 };
    let x_max = rtts.iter().copied().fold(1.0, f64::max);
    let (w, h) = (1000.0, 420.0);
    let (l, r, t, b) = (70.0, 250.0, 20.0, 45.0);
    let (pw, ph) = (w - l - r, h - t - b);
    let x = |ms: f64| l + ms / x_max * pw;
    let y = |v: f64| t + ph - (v.max(1e-9).log10() - lo) / (hi - lo) * ph;
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg viewBox="0 0 {w} {h}" width="{w}" height="{h}" xmlns="http://www.w3.org/2000/svg" font-family="sans-serif" font-size="12">"#
    );
    let mut e = lo;
    while e <= hi + 1e-9 {
        let v = 10f64.powf(e);
        let label = if v >= 1.0 {
            format!("{v:.0}")
        } else {
            format!("{v}")
        };
        let _ = write!(
            s,
            r##"<line x1="{l}" x2="{:.1}" y1="{:.1}" y2="{:.1}" stroke="#e5e7eb"/><text x="{:.1}" y="{:.1}" text-anchor="end">{label}</text>"##,
            l + pw,
            y(v),
            y(v),
            l - 6.0,
            y(v) + 4.0
        );
        e += 1.0;
    }
    for &ms in rtts {
        let _ = write!(
            s,
            r##"<line x1="{:.1}" x2="{:.1}" y1="{t}" y2="{:.1}" stroke="#f3f4f6"/><text x="{:.1}" y="{:.1}" text-anchor="middle">{ms}</text>"##,
            x(ms),
            x(ms),
            t + ph,
            x(ms),
            t + ph + 16.0
        );
    }
    let _ = write!(
        s,
        r##"<line x1="{l}" x2="{l}" y1="{t}" y2="{:.1}" stroke="#374151"/><line x1="{l}" x2="{:.1}" y1="{:.1}" y2="{:.1}" stroke="#374151"/><text x="{:.1}" y="{:.1}" text-anchor="middle">round-trip time (ms)</text><text x="16" y="{:.1}" transform="rotate(-90 16 {:.1})" text-anchor="middle">calls/s (log)</text>"##,
        t + ph,
        l + pw,
        t + ph,
        t + ph,
        l + pw / 2.0,
        h - 8.0,
        t + ph / 2.0,
        t + ph / 2.0
    );
    let mut legend_y = t + 4.0;
    let mut wcf_in_legend = false;
    for se in &series {
        if se.points.is_empty() {
            continue;
        }
        let d: Vec<String> = se
            .points
            .iter()
            .enumerate()
            .map(|(i, &(ms, v))| {
                format!(
                    "{}{:.1},{:.1}",
                    if i == 0 { "M" } else { " L" },
                    x(ms),
                    y(v)
                )
            })
            .collect();
        let _ = write!(
            s,
            r#"<path d="{}" fill="none" stroke="{}" stroke-width="{}" stroke-dasharray="{}"><title>{}</title></path>"#,
            d.join(""),
            se.color,
            se.width,
            se.dash,
            esc(&se.name)
        );
        for &(ms, v) in &se.points {
            let _ = write!(
                s,
                r#"<circle cx="{:.1}" cy="{:.1}" r="2.5" fill="{}"><title>{}: {} calls/s at {ms} ms</title></circle>"#,
                x(ms),
                y(v),
                se.color,
                esc(&se.name),
                matrix::sig(v)
            );
        }
        let is_wcf = se.name.starts_with("WCF");
        if is_wcf && wcf_in_legend {
            continue;
        }
        let name = if is_wcf {
            wcf_in_legend = true;
            "WCF, XP host (seed 004)".to_string()
        } else {
            se.name.clone()
        };
        let lx = l + pw + 16.0;
        let _ = write!(
            s,
            r#"<line x1="{lx:.1}" x2="{:.1}" y1="{legend_y:.1}" y2="{legend_y:.1}" stroke="{}" stroke-width="{}" stroke-dasharray="{}"/><text x="{:.1}" y="{:.1}">{}</text>"#,
            lx + 28.0,
            se.color,
            se.width,
            se.dash,
            lx + 34.0,
            legend_y + 4.0,
            esc(&name)
        );
        legend_y += 18.0;
    }
    s.push_str("</svg>");
    s
}

/// The report's section for a matrix run.
pub(crate) fn section(m: &Matrix) -> String {
    let (ok, all) = m.score();
    let mut s = String::new();
    let _ = write!(
        s,
        "<h2>Seed 004: calls over a WAN</h2><p class=\"note\">One client, sequential calls, through the lab's latency proxy (each direction delayed by RTT/2, one RTT added before a new connection's first byte; the large payload's link capped at {} each way). {} s per cell, at least {} calls. Limits: 1/RTT for the small payload; raw TCP through the same proxy, in the same run, for the large one. {ok} of {all} cells meet their bar; a <span class=\"FAIL\">*</span> marks a miss. WCF's figures are the seed's (10 s loops on a WAN emulator; XP / Vista host).</p>",
        m.params
            .large_cap
            .map_or("nothing".to_string(), |b| format!("{} KB/s", b / 1000)),
        m.params.seconds,
        m.params.min_calls
    );
    for &payload in &m.params.payloads {
        let title = match payload {
            Payload::Small => "Small payload (\"hi mom\" echoed): calls/s",
            Payload::Large => "Large payload (277 KiB up): calls/s",
        };
        let _ = write!(s, "<h3>{}</h3>", esc(title));
        s.push_str(&chart(m, payload));
        let (h, r) = matrix::throughput_rows(m, payload);
        s.push_str(&html_table(&h, &r));
        let _ = write!(
            s,
            "<p class=\"note\">A fresh client's first call, connect included, in RTTs (raw TCP: connect + 1 RTT{}), and the connections the client opened.</p>",
            if payload == Payload::Large { " + transfer" } else { "" }
        );
        let (h, r) = matrix::first_call_rows(m, payload);
        s.push_str(&html_table(&h, &r));
    }
    if !m.missed.is_empty() {
        s.push_str("<p class=\"FAIL\">Missed:</p><ul>");
        for miss in &m.missed {
            let _ = write!(s, "<li>{}</li>", esc(miss));
        }
        s.push_str("</ul>");
    }
    s
}

/// A standalone page for `keel-lab wan-matrix`.
pub(crate) fn page(m: &Matrix, css: &str) -> String {
    format!(
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>keel-lab wan-matrix</title><style>{css}</style></head><body><h1>keel-lab wan-matrix ({} profile)</h1>{}</body></html>\n",
        m.params.profile,
        section(m)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wan::matrix::{tests::sample, MatrixParams};

    #[test]
    fn two_charts_and_no_nan() {
        let mut m = sample(MatrixParams::quick(), 0.9);
        // A cell whose calls failed draws no point.
        m.cells[5] = crate::wan::cell::failed(
            &MatrixParams::quick().cell(m.params.variants[5], 1.0, Payload::Small),
            &m.raw[0].raw,
            "boom",
        );
        let s = section(&m);
        assert_eq!(s.matches("<svg").count(), 2);
        assert_eq!(s.matches("</svg>").count(), 2);
        assert!(!s.contains("NaN"));
        assert!(s.contains("keel tcp streamed"));
        assert!(s.contains("WCF, XP host"));
        assert!(s.contains("raw TCP, same link"));
        assert!(s.contains("class=\"FAIL\""));
        let p = page(&m, "");
        assert!(p.starts_with("<!DOCTYPE html>"));
        assert!(!p.contains("<script"));
    }
}
