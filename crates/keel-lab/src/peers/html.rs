//! The report's `peers` section: the table, and one bar chart per headline number.

use std::fmt::Write as _;

use super::ratios::Row;
use super::Peers;

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Horizontal bars, one per row: `value(row)` with `unit`, longest bar the largest value.
fn bars(title: &str, unit: &str, rows: &[Row], value: impl Fn(&Row) -> Option<f64>) -> String {
    let (label_w, bar_w, bar_h, gap) = (120.0, 420.0, 18.0, 6.0);
    let vals: Vec<(String, bool, Option<f64>)> = rows
        .iter()
        .map(|r| (r.system.name().to_string(), r.system.is_keel(), value(r)))
        .collect();
    let max = vals
        .iter()
        .filter_map(|v| v.2)
        .filter(|v| v.is_finite())
        .fold(0.0_f64, f64::max);
    let h = 24.0 + vals.len() as f64 * (bar_h + gap);
    let w = label_w + bar_w + 110.0;
    let mut s = format!(
        r#"<svg viewBox="0 0 {w} {h}" width="{w}" height="{h}" xmlns="http://www.w3.org/2000/svg" font-family="sans-serif" font-size="12"><text x="0" y="14" font-weight="bold">{}</text>"#,
        esc(title)
    );
    for (i, (name, keel, v)) in vals.iter().enumerate() {
        let y = 24.0 + i as f64 * (bar_h + gap);
        let _ = write!(
            s,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"#,
            label_w - 6.0,
            y + bar_h - 5.0,
            esc(name)
        );
        let Some(v) = v.filter(|v| v.is_finite()) else {
            let _ = write!(
                s,
                r#"<text x="{label_w}" y="{:.1}">not measured</text>"#,
                y + bar_h - 5.0
            );
            continue;
        };
        let len = if max > 0.0 {
            bar_w * v.max(0.0) / max
        } else {
            0.0
        };
        let fill = if *keel { "#2563eb" } else { "#9ca3af" };
        let _ = write!(
            s,
            r#"<rect x="{label_w}" y="{y:.1}" width="{len:.1}" height="{bar_h}" fill="{fill}"/><text x="{:.1}" y="{:.1}">{} {}</text>"#,
            label_w + len + 4.0,
            y + bar_h - 5.0,
            fmt(v),
            esc(unit)
        );
    }
    s.push_str("</svg>");
    s
}

fn fmt(v: f64) -> String {
    if v >= 10_000.0 {
        format!("{:.0}k", v / 1000.0)
    } else if v >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

/// The section: a note on how it ran, the text tables, four bar charts and a fifth for the
/// systems that streamed.
pub(crate) fn section(p: &Peers) -> String {
    let mut s = String::new();
    let _ = write!(
        s,
        "<h2>keel beside its peers</h2><p class=\"note\">\"Add two f64\" on every system, each with its own server in a child process and its own client here; {} timed calls one at a time (p50/p99/p99.9), {} in flight on 1 and on {} connections for {} s, {} idle connections for memory (scaled to 1,000); one server stream of small quotes for {} s, and one whose client stops reading for {} s; {} round(s), systems interleaved, each number the median. {}. Load average {:.1} → {:.1}. Blue: keel; grey: the peers (raw is length-prefixed frames on bare sockets, the limit).</p>",
        p.params.latency_calls,
        p.params.inflight,
        p.params.connections,
        p.params.seconds,
        p.params.idle_connections,
        p.params.seconds,
        p.params.stall_seconds,
        p.rounds.len(),
        esc(&p.placement),
        p.loadavg.0,
        p.loadavg.1
    );
    let _ = write!(s, "<pre>{}</pre>", esc(&super::summary(p)));
    let rows = &p.rows;
    s.push_str(&bars(
        "p50 latency, one call in flight, pinned",
        "µs",
        rows,
        |r| r.latency_pinned.map(|l| l.p50_us),
    ));
    s.push_str(&bars(
        &format!("calls/s, {} in flight on 1 connection", p.params.inflight),
        "/s",
        rows,
        |r| Some(r.throughput_1.calls_per_sec),
    ));
    s.push_str(&bars(
        "server CPU per call, 1 connection",
        "µs",
        rows,
        |r| Some(r.throughput_1.server_cpu_us),
    ));
    s.push_str(&bars(
        "server RSS growth per 1,000 idle connections",
        "MiB",
        rows,
        |r| Some(r.memory.growth_per_1000_mib),
    ));
    let streamed: Vec<Row> = rows
        .iter()
        .filter(|r| r.streaming.is_some())
        .cloned()
        .collect();
    if !streamed.is_empty() {
        s.push_str(&bars(
            "messages/s, one server stream on 1 connection",
            "/s",
            &streamed,
            |r| r.streaming.map(|m| m.messages_per_sec),
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::super::ratios::tests::row;
    use super::super::{Params, System};
    use super::*;

    #[test]
    fn five_charts_one_bar_per_system() {
        let mut rows = vec![
            row(System::Raw, 1.0),
            row(System::Tarpc, 1.5),
            row(System::KeelTcpAsync, 2.0),
        ];
        rows[0].latency_pinned = None;
        rows[1].streaming = None;
        let p = Peers::new(Params::quick(), vec![rows], "x".into(), (1.0, 2.0));
        let h = section(&p);
        assert_eq!(h.matches("<svg").count(), 5);
        assert_eq!(h.matches("</svg>").count(), 5);
        // Four charts of three bars (one not measured), the streaming chart without tarpc.
        assert_eq!(h.matches("<rect").count(), 4 * 3 - 1 + 2);
        assert_eq!(h.matches("not measured").count(), 1);
        assert!(h.contains("messages/s, one server stream"));
        assert!(h.contains("tarpc has no streaming"));
        // The largest value fills the bar's full width.
        assert!(h.contains(r#"width="420.0""#));
    }

    #[test]
    fn no_streaming_chart_when_nothing_streamed() {
        let mut rows = vec![row(System::Tarpc, 1.0), row(System::KeelH2, 2.0)];
        for r in &mut rows {
            r.streaming = None;
            r.stall = None;
        }
        let p = Peers::new(Params::quick(), vec![rows], "x".into(), (1.0, 2.0));
        let h = section(&p);
        assert_eq!(h.matches("<svg").count(), 4);
        assert!(!h.contains("server streaming"));
    }
}
