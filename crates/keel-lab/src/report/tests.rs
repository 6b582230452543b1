use super::bursts::phases_section;
use super::svg::{fmt_tick, nice_step};
use super::*;
use crate::experiments::burst::{Baseline, Round, Sample};
use crate::experiments::first_call::{Round as FirstCallRound, TimedCall};
use crate::experiments::phases::Phases;
use crate::experiments::Dist;

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
    let round = FirstCallRound {
        calls,
        steady_async: Dist::around(30.0),
        steady_sync: Dist::around(35.0),
        raw_calls_us: vec![20.0; 8],
        raw_steady_p50_us: 20.0,
    };
    let fc = first_call::evaluate(Binding::Tcp, vec![round]);
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
        Dist::around(30.0),
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
    // The five bar charts of the peers section (four, and messages/s for the systems that
    // streamed), on top of what `all` draws without it.
    let without = html(&before).matches("<svg").count();
    assert_eq!(h.matches("<svg").count(), without + 5);
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
