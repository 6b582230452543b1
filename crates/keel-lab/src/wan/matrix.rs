//! `keel-lab wan-matrix`: every variant × RTT × payload, beside the seed's XP and Vista figures.
//! Raw TCP is measured once per RTT and payload, in the same run, through a proxy with the same
//! settings; each cell is held to it (large) or to 1/RTT (small).

use std::fmt::Write as _;

use serde::Serialize;

use super::cell::{self, Params, RawRef, WanCell};
use super::path::LinkKind;
use super::{Mode, Payload, Variant, SEED_RTTS_MS};
use crate::experiments::Binding;

/// One WCF binding of the seed's appendix: calls/s at 1, 50, 100 and 200 ms.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SeedRow {
    /// The WCF binding.
    pub(crate) wcf: &'static str,
    /// keel's counterpart.
    pub(crate) keel: Option<(Binding, Mode)>,
    /// Windows XP host, small payload.
    pub(crate) xp_small: [f64; 4],
    /// Windows Vista host, small payload.
    pub(crate) vista_small: [f64; 4],
    /// XP, 277 KB payload.
    pub(crate) xp_large: [f64; 4],
    /// Vista, 277 KB payload.
    pub(crate) vista_large: [f64; 4],
}

impl SeedRow {
    /// The XP and Vista figures for `payload`.
    pub(crate) fn figures(&self, payload: Payload) -> ([f64; 4], [f64; 4]) {
        match payload {
            Payload::Small => (self.xp_small, self.vista_small),
            Payload::Large => (self.xp_large, self.vista_large),
        }
    }
}

/// The seed's appendix (calls/s at 1, 50, 100, 200 ms RTT).
pub(crate) const SEED: [SeedRow; 7] = [
    SeedRow {
        wcf: "NetTcp Buffered",
        keel: Some((Binding::Tcp, Mode::Buffered)),
        xp_small: [250.0, 18.13333, 9.48, 4.86],
        vista_small: [258.0, 18.04, 9.62, 4.8],
        xp_large: [7.16, 2.072222, 1.125, 0.6222222],
        vista_large: [8.0, 1.844444, 0.9166667, 0.5083333],
    },
    SeedRow {
        wcf: "NetTcp Streamed",
        keel: Some((Binding::Tcp, Mode::Streamed)),
        xp_small: [110.0, 8.933333, 4.66, 2.48],
        vista_small: [111.0, 8.58, 4.44, 2.46],
        xp_large: [1.74, 0.2333333, 0.1277778, 0.06666667],
        vista_large: [1.88, 0.2361111, 0.1222222, 0.06944445],
    },
    SeedRow {
        wcf: "BasicHttp Buffered",
        keel: Some((Binding::Http1, Mode::Buffered)),
        xp_small: [131.0, 9.766666, 4.8, 2.5],
        vista_small: [125.0, 9.26, 4.74, 2.48],
        xp_large: [3.9, 1.361111, 0.7416667, 0.4027778],
        vista_large: [3.74, 1.144444, 0.605555, 0.3194444],
    },
    SeedRow {
        wcf: "BasicHttp Streamed",
        keel: Some((Binding::Http1, Mode::Streamed)),
        xp_small: [83.0, 5.6, 3.18, 1.68],
        vista_small: [113.0, 8.98, 4.62, 2.48],
        xp_large: [3.18, 0.6444445, 0.3277778, 0.1861111],
        vista_large: [3.5, 0.775, 0.4222222, 0.2444444],
    },
    SeedRow {
        wcf: "BasicHttps Buffered",
        keel: Some((Binding::HttpsH1, Mode::Buffered)),
        xp_small: [113.0, 9.233334, 4.86, 2.46],
        vista_small: [111.0, 9.34, 4.67, 2.48],
        xp_large: [3.42, 1.005556, 0.5388889, 0.2916667],
        vista_large: [3.78, 1.088889, 0.5555556, 0.3083333],
    },
    SeedRow {
        wcf: "BasicHttps Streamed",
        keel: Some((Binding::HttpsH1, Mode::Streamed)),
        xp_small: [51.0, 4.533333, 2.38, 1.28],
        vista_small: [103.0, 8.98, 4.72, 2.36],
        xp_large: [3.42, 0.5972222, 0.3166667, 0.1666667],
        vista_large: [3.4, 0.8277778, 0.44722222, 0.24166667],
    },
    SeedRow {
        wcf: "WS2007",
        keel: None,
        xp_small: [120.0, 9.5, 4.88, 2.46],
        vista_small: [117.0, 9.52, 4.72, 2.48],
        xp_large: [3.38, 1.352778, 0.7555556, 0.3833333],
        vista_large: [3.7, 1.147222, 0.5972222, 0.3111111],
    },
];

/// The seed's row for a keel variant, if WCF had a counterpart.
pub(crate) fn seed_row(v: Variant) -> Option<&'static SeedRow> {
    SEED.iter().find(|r| r.keel == Some((v.binding, v.mode)))
}

/// The seed's figure for `row` at `rtt_ms` (one of its four RTTs).
pub(crate) fn seed_at(row: &SeedRow, payload: Payload, rtt_ms: f64) -> Option<(f64, f64)> {
    let i = SEED_RTTS_MS.iter().position(|&r| r == rtt_ms)?;
    let (xp, vista) = row.figures(payload);
    Some((xp[i], vista[i]))
}

/// What a matrix run covers.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct MatrixParams {
    /// `quick`, `full` or `all` (the subset `keel-lab all` runs).
    pub(crate) profile: &'static str,
    /// The rows.
    pub(crate) variants: Vec<Variant>,
    /// The RTTs, ms.
    pub(crate) rtts_ms: Vec<f64>,
    /// The payloads.
    pub(crate) payloads: Vec<Payload>,
    /// Timed calls per cell run this long, s...
    pub(crate) seconds: f64,
    /// ...and make at least this many calls.
    pub(crate) min_calls: u64,
    /// The large payload's cap each way, bytes/s.
    pub(crate) large_cap: Option<u64>,
    /// The emulator every cell (raw TCP's too) runs through: the proxy, or the TUN link, which
    /// adds `quic://`'s rows (UDP crosses only it).
    pub(crate) link: LinkKind,
}

impl MatrixParams {
    /// Every variant at the seed's four RTTs, both payloads, short cells.
    pub(crate) fn quick() -> MatrixParams {
        MatrixParams {
            profile: "quick",
            variants: Variant::all(),
            rtts_ms: SEED_RTTS_MS.to_vec(),
            payloads: vec![Payload::Small, Payload::Large],
            seconds: 1.5,
            min_calls: 5,
            large_cap: Payload::Large.default_cap(),
            link: LinkKind::Proxy,
        }
    }

    /// These params on the TUN link, with `quic://`'s rows added (root needed).
    pub(crate) fn on_tun(self) -> MatrixParams {
        let mut variants = self.variants;
        variants.extend([Mode::Buffered, Mode::Streamed].map(|mode| Variant {
            binding: Binding::Quic,
            mode,
        }));
        MatrixParams {
            variants,
            link: LinkKind::Tun,
            ..self
        }
    }

    /// As the seed: 10 s per cell.
    pub(crate) fn full() -> MatrixParams {
        MatrixParams {
            profile: "full",
            seconds: 10.0,
            ..MatrixParams::quick()
        }
    }

    /// The subset `keel-lab all` runs: tcp, h2c and https-h2, buffered and streamed, at 50 and
    /// 200 ms, both payloads.
    pub(crate) fn all_subset() -> MatrixParams {
        MatrixParams {
            profile: "all",
            variants: Variant::all()
                .into_iter()
                .filter(|v| matches!(v.binding, Binding::Tcp | Binding::H2c | Binding::HttpsH2))
                .collect(),
            rtts_ms: vec![50.0, 200.0],
            ..MatrixParams::quick()
        }
    }

    pub(crate) fn cell(&self, variant: Variant, rtt_ms: f64, payload: Payload) -> Params {
        Params {
            variant,
            rtt_ms,
            payload,
            bytes_per_sec: match payload {
                Payload::Small => None,
                Payload::Large => self.large_cap,
            },
            seconds: self.seconds,
            min_calls: self.min_calls,
            link: self.link,
            ..Params::seed_004()
        }
    }
}

/// Raw TCP on one link of the matrix.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub(crate) struct RawCell {
    /// RTT, ms.
    pub(crate) rtt_ms: f64,
    /// Payload.
    pub(crate) payload: Payload,
    /// What raw TCP did.
    #[serde(flatten)]
    pub(crate) raw: RawRef,
}

/// A matrix run's results (`--json` prints it).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Matrix {
    /// `wan-matrix`.
    pub(crate) experiment: &'static str,
    /// What was run.
    pub(crate) params: MatrixParams,
    /// Raw TCP per RTT and payload.
    pub(crate) raw: Vec<RawCell>,
    /// Every cell.
    pub(crate) cells: Vec<WanCell>,
    /// `variant, RTT, payload: reasons` for each cell that missed its bar.
    pub(crate) missed: Vec<String>,
    /// Whether every cell met its bar.
    pub(crate) pass: bool,
}

/// Runs the matrix: per payload and RTT, raw TCP first, then every variant.
pub(crate) fn run(p: &MatrixParams) -> anyhow::Result<Matrix> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("lab-client")
        .enable_all()
        .build()?;
    let mut bindings: Vec<Binding> = p.variants.iter().map(|v| v.binding).collect();
    bindings.dedup();
    cell::warm_up(&rt, &bindings)?;
    let total = p.payloads.len() * p.rtts_ms.len() * (p.variants.len() + 1);
    let mut n = 0;
    let mut raw = Vec::new();
    let mut cells = Vec::new();
    for &payload in &p.payloads {
        for &rtt_ms in &p.rtts_ms {
            n += 1;
            let first = p.variants.first().copied().unwrap_or(Variant {
                binding: Binding::Tcp,
                mode: Mode::Buffered,
            });
            let r = cell::measure_raw(&p.cell(first, rtt_ms, payload))?;
            eprintln!(
                "[{n}/{total}] raw TCP, {rtt_ms} ms, {}: {:.2} calls/s, first call {:.1} ms",
                payload.name(),
                r.calls_per_sec,
                r.first_call_ms
            );
            raw.push(RawCell {
                rtt_ms,
                payload,
                raw: r,
            });
            for &v in &p.variants {
                n += 1;
                let c = cell::run(&rt, &p.cell(v, rtt_ms, payload), &r);
                eprintln!(
                    "[{n}/{total}] {}, {rtt_ms} ms, {}: {:.2} calls/s ({:.2} × {}), first call {:.2} RTT, {} conn, {}",
                    v.name(),
                    payload.name(),
                    c.calls_per_sec,
                    c.ratio,
                    c.limit,
                    c.first_call_rtts,
                    c.connections_opened,
                    c.verdict.word()
                );
                cells.push(c);
            }
        }
    }
    Ok(assemble(p.clone(), raw, cells))
}

/// Puts the results together with the list of missed cells and the verdict.
pub(crate) fn assemble(params: MatrixParams, raw: Vec<RawCell>, cells: Vec<WanCell>) -> Matrix {
    let missed: Vec<String> = cells
        .iter()
        .filter(|c| !c.pass)
        .map(|c| {
            format!(
                "{} {}, {} ms, {}: {}",
                c.binding.name(),
                c.mode.name(),
                c.rtt_ms,
                c.payload.name(),
                c.verdict.reasons.join("; ")
            )
        })
        .collect();
    Matrix {
        experiment: "wan-matrix",
        params,
        raw,
        pass: missed.is_empty() && !cells.is_empty(),
        cells,
        missed,
    }
}

impl Matrix {
    /// The cell for `v` at `rtt_ms` with `payload`, if it was run.
    pub(crate) fn cell(&self, v: Variant, rtt_ms: f64, payload: Payload) -> Option<&WanCell> {
        self.cells.iter().find(|c| {
            c.binding == v.binding && c.mode == v.mode && c.rtt_ms == rtt_ms && c.payload == payload
        })
    }

    /// Raw TCP at `rtt_ms` with `payload`, if it was run.
    pub(crate) fn raw_at(&self, rtt_ms: f64, payload: Payload) -> Option<&RawRef> {
        self.raw
            .iter()
            .find(|r| r.rtt_ms == rtt_ms && r.payload == payload)
            .map(|r| &r.raw)
    }

    /// Cells that met their bar, and all cells.
    pub(crate) fn score(&self) -> (usize, usize) {
        (
            self.cells.iter().filter(|c| c.pass).count(),
            self.cells.len(),
        )
    }
}

/// The `keel-lab all` table's row for seed 004: the worst cell of each kind.
pub(crate) fn row(m: &Matrix) -> crate::verdict::Row {
    let worst = |payload: Payload| {
        m.cells
            .iter()
            .filter(|c| c.payload == payload)
            .map(|c| c.ratio)
            .fold(f64::INFINITY, f64::min)
    };
    let extra_rtts = m
        .cells
        .iter()
        .map(|c| (c.first_call_ms - c.raw_first_call_ms) / c.rtt_ms)
        .fold(f64::NEG_INFINITY, f64::max);
    let connections = m
        .cells
        .iter()
        .map(|c| c.connections_opened)
        .max()
        .unwrap_or(0);
    let (ok, all) = m.score();
    let rtts: Vec<String> = m.params.rtts_ms.iter().map(|r| r.to_string()).collect();
    let mut bindings: Vec<&str> = m.params.variants.iter().map(|v| v.binding.name()).collect();
    bindings.dedup();
    crate::verdict::Row {
        experiment: "calls over a WAN (004)".to_string(),
        wcf_broken: "200 ms: netTcp 4.86 calls/s (limit 5), HTTP 2.5, HTTP streamed 1.68; 277 KB streamed netTcp 15 s/call".to_string(),
        wcf_fixed: "Vista: HTTP streamed 2.48 calls/s (still 2 round trips); 277 KB streamed netTcp 14.4 s/call".to_string(),
        keel: format!(
            "{ok} of {all} cells ({} × buffered, streamed × {} ms × small, large): small ≥ {:.2} × the link's limit, large ≥ {:.2} × raw TCP; first call ≤ raw's + {:.2} RTT; ≤ {connections} connection(s)",
            bindings.join(", "),
            rtts.join(", "),
            worst(Payload::Small),
            worst(Payload::Large),
            extra_rtts
        ),
        bar: format!(
            "small ≥ {r} × 1/RTT (raw TCP on the link where less); large ≥ {r} × raw TCP; {} connection; first call ≤ raw's + ½ RTT + 1 ms (TLS: + 1 RTT; an upload beyond the initial flow-control window: + 1 RTT)",
            crate::verdict::WAN_CONNECTIONS,
            r = crate::verdict::WAN_CALLS_RATIO
        ),
        verdict: if m.pass { "PASS" } else { "FAIL" }.to_string(),
    }
}

/// A number with three significant digits (at least one decimal below 10).
pub(crate) fn sig(x: f64) -> String {
    if x.is_nan() {
        "–".to_string()
    } else if x >= 100.0 {
        format!("{x:.0}")
    } else if x >= 10.0 {
        format!("{x:.1}")
    } else if x >= 1.0 {
        format!("{x:.2}")
    } else {
        format!("{x:.3}")
    }
}

/// A plain-text table with columns padded to their widest cell (character counts).
pub(crate) fn text_table(header: &[String], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cols: &[String]| {
        let parts: Vec<String> = cols
            .iter()
            .zip(&widths)
            .map(|(c, &w)| format!("{c}{}", " ".repeat(w.saturating_sub(c.chars().count()))))
            .collect();
        format!("| {} |\n", parts.join(" | "))
    };
    let mut out = line(header);
    let rule: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
    let _ = writeln!(out, "|-{}-|", rule.join("-|-"));
    for r in rows {
        out.push_str(&line(r));
    }
    out
}

/// The throughput table for one payload: keel of limit per RTT, and WCF XP / Vista beside it.
/// A `*` marks a cell that missed its bar (for any reason: see the list below the tables).
pub(crate) fn throughput_rows(m: &Matrix, payload: Payload) -> (Vec<String>, Vec<Vec<String>>) {
    let mut header = vec!["variant".to_string(), "WCF counterpart".to_string()];
    for &r in &m.params.rtts_ms {
        header.push(format!("{r} ms: keel of limit"));
        header.push("WCF XP / Vista".to_string());
    }
    let mut rows = Vec::new();
    for &v in &m.params.variants {
        let seed = seed_row(v);
        let mut row = vec![
            v.name(),
            seed.map_or("–".to_string(), |s| s.wcf.to_string()),
        ];
        for &r in &m.params.rtts_ms {
            row.push(m.cell(v, r, payload).map_or("–".to_string(), |c| {
                if c.error.is_some() {
                    return "error *".to_string();
                }
                format!(
                    "{} of {} ({:.2}){}",
                    sig(c.calls_per_sec),
                    sig(c.limit_calls_per_sec),
                    c.ratio,
                    if c.pass { "" } else { " *" }
                )
            }));
            row.push(
                seed.and_then(|s| seed_at(s, payload, r))
                    .map_or("–".to_string(), |(xp, vista)| {
                        format!("{} / {}", sig(xp), sig(vista))
                    }),
            );
        }
        rows.push(row);
    }
    let mut raw = vec!["raw TCP (same link)".to_string(), "–".to_string()];
    let ws = SEED.iter().find(|s| s.keel.is_none());
    for &r in &m.params.rtts_ms {
        raw.push(
            m.raw_at(r, payload)
                .map_or("–".to_string(), |x| sig(x.calls_per_sec)),
        );
        raw.push(String::new());
    }
    rows.push(raw);
    if let Some(ws) = ws {
        let mut row = vec!["–".to_string(), ws.wcf.to_string()];
        for &r in &m.params.rtts_ms {
            row.push(String::new());
            row.push(
                seed_at(ws, payload, r).map_or("–".to_string(), |(xp, vista)| {
                    format!("{} / {}", sig(xp), sig(vista))
                }),
            );
        }
        rows.push(row);
    }
    (header, rows)
}

/// First calls (in RTTs, keel and raw TCP) and connections, per variant and RTT.
pub(crate) fn first_call_rows(m: &Matrix, payload: Payload) -> (Vec<String>, Vec<Vec<String>>) {
    let mut header = vec!["variant".to_string()];
    for &r in &m.params.rtts_ms {
        header.push(format!("{r} ms"));
    }
    let mut rows = Vec::new();
    for &v in &m.params.variants {
        let mut row = vec![v.name()];
        for &r in &m.params.rtts_ms {
            row.push(m.cell(v, r, payload).map_or("–".to_string(), |c| {
                if c.error.is_some() {
                    return "error".to_string();
                }
                format!(
                    "{:.2} RTT (raw {:.2}), {} conn",
                    c.first_call_rtts,
                    c.raw_first_call_ms / c.rtt_ms,
                    c.connections_opened
                )
            }));
        }
        rows.push(row);
    }
    (header, rows)
}

/// The whole matrix as text.
pub(crate) fn table(m: &Matrix) -> String {
    let mut out = format!(
        "keel-lab wan-matrix ({} profile: {} s per cell, at least {} calls; large payload capped at {} each way)\n",
        m.params.profile,
        m.params.seconds,
        m.params.min_calls,
        m.params
            .large_cap
            .map_or("nothing".to_string(), |b| format!("{} KB/s", b / 1000))
    );
    for &payload in &m.params.payloads {
        let what = match payload {
            Payload::Small => "small payload (\"hi mom\" echoed): calls/s, keel of the limit: 1000/RTT, or raw TCP on the same link where less (ratio)",
            Payload::Large => {
                "large payload (277 KiB up, length back): calls/s, keel of limit raw TCP on the same link (ratio)"
            }
        };
        let _ = writeln!(
            out,
            "\n{what}; WCF as measured in seed 004 (XP / Vista host)\n"
        );
        let (h, r) = throughput_rows(m, payload);
        out.push_str(&text_table(&h, &r));
        let _ = writeln!(
            out,
            "\n{} payload: a fresh client's first call, connect included, in RTTs (raw TCP: connect + 1 RTT{}), and connections opened\n",
            payload.name(),
            if payload == Payload::Large { " + transfer" } else { "" }
        );
        let (h, r) = first_call_rows(m, payload);
        out.push_str(&text_table(&h, &r));
    }
    let (ok, all) = m.score();
    let _ = writeln!(out, "\n{ok} of {all} cells meet their bar (* = missed)");
    for miss in &m.missed {
        let _ = writeln!(out, "  missed: {miss}");
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::wan::cell::{evaluate, KeelRun};
    use std::time::Duration;

    /// A matrix of `params` with made-up numbers: every cell at `ratio` of 1/RTT or raw.
    pub(crate) fn sample(params: MatrixParams, ratio: f64) -> Matrix {
        let mut raw = Vec::new();
        let mut cells = Vec::new();
        for &payload in &params.payloads {
            for &rtt_ms in &params.rtts_ms {
                let transfer = if payload == Payload::Large {
                    113.0
                } else {
                    0.0
                };
                let r = RawRef {
                    calls_per_sec: 1000.0 / (rtt_ms + transfer),
                    first_call_ms: 2.0 * rtt_ms + transfer,
                };
                raw.push(RawCell {
                    rtt_ms,
                    payload,
                    raw: r,
                });
                for &v in &params.variants {
                    let p = params.cell(v, rtt_ms, payload);
                    let limit = if payload == Payload::Large {
                        r.calls_per_sec
                    } else {
                        1000.0 / rtt_ms
                    };
                    let k = KeelRun {
                        first_call: Duration::from_secs_f64(r.first_call_ms / 1000.0),
                        calls: (limit * ratio * 10.0).round() as u64,
                        elapsed: Duration::from_secs(10),
                        connections: 1,
                        ..KeelRun::default()
                    };
                    cells.push(evaluate(&p, &k, &r));
                }
            }
        }
        assemble(params, raw, cells)
    }

    #[test]
    fn seed_figures_line_up() {
        let v = Variant {
            binding: Binding::Tcp,
            mode: Mode::Buffered,
        };
        let row = seed_row(v).unwrap();
        assert_eq!(seed_at(row, Payload::Small, 200.0), Some((4.86, 4.8)));
        assert_eq!(seed_at(row, Payload::Large, 1.0), Some((7.16, 8.0)));
        assert_eq!(seed_at(row, Payload::Small, 75.0), None);
        let streamed = seed_row(Variant {
            binding: Binding::Tcp,
            mode: Mode::Streamed,
        })
        .unwrap();
        // 15 s per call at 200 ms.
        assert!((1.0 / streamed.vista_large[3] - 14.4).abs() < 0.1);
        assert!(seed_row(Variant {
            binding: Binding::H2c,
            mode: Mode::Buffered
        })
        .is_none());
    }

    #[test]
    fn verdict_and_table() {
        let good = sample(MatrixParams::quick(), 0.99);
        assert_eq!(good.cells.len(), 96);
        assert_eq!(good.raw.len(), 8);
        assert!(good.pass, "{:?}", good.missed);
        let t = table(&good);
        assert!(t.contains("96 of 96 cells meet their bar"), "{t}");
        assert!(t.contains("NetTcp Buffered"));
        assert!(t.contains("4.86 / 4.80"), "{t}");
        let bad = sample(MatrixParams::all_subset(), 0.5);
        assert_eq!(bad.cells.len(), 24);
        assert!(!bad.pass);
        assert_eq!(bad.missed.len(), 24);
        assert!(table(&bad).contains(" *"));
        // Every table line of a block has its separators in the same columns.
        for block in t.split("\n\n") {
            let lines: Vec<&str> = block.lines().filter(|l| l.starts_with('|')).collect();
            let cols = |l: &str| {
                l.chars()
                    .enumerate()
                    .filter(|(_, c)| *c == '|')
                    .map(|(i, _)| i)
                    .collect::<Vec<_>>()
            };
            for l in &lines {
                assert_eq!(cols(l), cols(lines[0]), "{l}");
            }
        }
    }

    #[test]
    fn json_shape() {
        let v = serde_json::to_value(sample(MatrixParams::all_subset(), 0.99)).unwrap();
        assert_eq!(v["experiment"], "wan-matrix");
        assert!(v["pass"].is_boolean());
        assert_eq!(v["cells"].as_array().unwrap().len(), 24);
        assert!(v["raw"][0]["calls_per_sec"].is_number());
        assert_eq!(v["params"]["rtts_ms"], serde_json::json!([50.0, 200.0]));
    }

    #[test]
    fn sig_digits() {
        assert_eq!(sig(1000.0), "1000");
        assert_eq!(sig(19.87), "19.9");
        assert_eq!(sig(4.861), "4.86");
        assert_eq!(sig(0.0694), "0.069");
        assert_eq!(sig(f64::NAN), "–");
    }
}
