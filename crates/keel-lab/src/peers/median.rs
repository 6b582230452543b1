//! One row per system from several rounds: each number the median of that number over the
//! rounds. The systems run interleaved (round 1: every system, round 2: every system, ...), so
//! a noisy minute on the machine lands on every system alike, and the medians drop a round
//! that caught one system at a bad moment.

use super::measure::{Latency, Memory, Rss, Stall, Streaming, Throughput};
use super::ratios::Row;

/// The median of `values` (the mean of the middle two for an even count; NaN when empty or
/// when any is NaN, so a missing measurement is not hidden).
pub(crate) fn median(mut values: Vec<f64>) -> f64 {
    if values.is_empty() || values.iter().any(|v| v.is_nan()) {
        return f64::NAN;
    }
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}

fn med<T>(items: &[T], f: impl Fn(&T) -> f64) -> f64 {
    median(items.iter().map(f).collect())
}

fn med_u64<T>(items: &[T], f: impl Fn(&T) -> u64) -> u64 {
    med(items, |t| f(t) as f64).round() as u64
}

fn latency(ls: &[Latency]) -> Latency {
    Latency {
        calls: ls[0].calls,
        p50_us: med(ls, |l| l.p50_us),
        p99_us: med(ls, |l| l.p99_us),
        p999_us: med(ls, |l| l.p999_us),
    }
}

fn throughput(ts: &[Throughput]) -> Throughput {
    Throughput {
        connections: ts[0].connections,
        inflight: ts[0].inflight,
        calls_per_sec: med(ts, |t| t.calls_per_sec),
        p50_us: med(ts, |t| t.p50_us),
        p99_us: med(ts, |t| t.p99_us),
        server_cpu_us: med(ts, |t| t.server_cpu_us),
        client_cpu_us: med(ts, |t| t.client_cpu_us),
    }
}

fn memory(ms: &[Memory]) -> Memory {
    Memory {
        idle_rss_kib: med_u64(ms, |m| m.idle_rss_kib),
        connections: ms[0].connections,
        before_kib: med_u64(ms, |m| m.before_kib),
        after_kib: med_u64(ms, |m| m.after_kib),
        growth_per_1000_mib: med(ms, |m| m.growth_per_1000_mib),
    }
}

fn streaming(ss: &[Streaming]) -> Streaming {
    Streaming {
        messages: med_u64(ss, |s| s.messages),
        messages_per_sec: med(ss, |s| s.messages_per_sec),
        server_cpu_us: med(ss, |s| s.server_cpu_us),
        client_cpu_us: med(ss, |s| s.client_cpu_us),
    }
}

fn rss(rs: &[Rss]) -> Rss {
    Rss {
        before_kib: med_u64(rs, |r| r.before_kib),
        first_kib: med_u64(rs, |r| r.first_kib),
        after_kib: med_u64(rs, |r| r.after_kib),
        growth_kib: med(rs, |r| r.growth_kib),
        stall_growth_kib: med(rs, |r| r.stall_growth_kib),
    }
}

fn stall(ss: &[Stall]) -> Stall {
    Stall {
        seconds: ss[0].seconds,
        server: rss(&ss.iter().map(|s| s.server).collect::<Vec<_>>()),
        client: rss(&ss.iter().map(|s| s.client).collect::<Vec<_>>()),
    }
}

/// The medians of `f` over `rounds` when every round has it, else `None` (which systems run
/// a workload does not change within a run).
fn every<T: Copy, U>(rounds: &[Row], f: fn(&Row) -> Option<T>, m: fn(&[T]) -> U) -> Option<U> {
    let all: Vec<T> = rounds.iter().filter_map(f).collect();
    (all.len() == rounds.len()).then(|| m(&all))
}

/// One system's rows, one per round, as one row of medians. `rounds` must be non-empty and all
/// of one system.
pub(crate) fn row(rounds: &[Row]) -> Row {
    assert!(!rounds.is_empty(), "a median of no rounds");
    let pinned: Vec<Latency> = rounds.iter().filter_map(|r| r.latency_pinned).collect();
    let all = |f: fn(&Row) -> Latency| rounds.iter().map(f).collect::<Vec<_>>();
    let tp = |f: fn(&Row) -> Throughput| rounds.iter().map(f).collect::<Vec<_>>();
    Row {
        system: rounds[0].system,
        // Pinned in every round or in none (the placement does not change within a run).
        latency_pinned: (pinned.len() == rounds.len()).then(|| latency(&pinned)),
        latency: latency(&all(|r| r.latency)),
        throughput_1: throughput(&tp(|r| r.throughput_1)),
        throughput_8: throughput(&tp(|r| r.throughput_8)),
        memory: memory(&rounds.iter().map(|r| r.memory).collect::<Vec<_>>()),
        streaming: every(rounds, |r| r.streaming, streaming),
        stall: every(rounds, |r| r.stall, stall),
    }
}

#[cfg(test)]
mod tests {
    use super::super::ratios::tests::row as sample;
    use super::super::System;
    use super::*;

    #[test]
    fn medians_of_odd_and_even_counts() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median(vec![7.0]), 7.0);
        assert!(median(vec![]).is_nan());
        assert!(median(vec![1.0, f64::NAN, 2.0]).is_nan());
    }

    #[test]
    fn each_number_is_its_own_median() {
        // Round 2 is best on throughput, round 3 on latency: the median row takes the middle
        // of each number, not one round's row.
        let mut rounds = vec![
            sample(System::KeelTcpSync, 1.0),
            sample(System::KeelTcpSync, 1.0),
            sample(System::KeelTcpSync, 1.0),
        ];
        for (r, (cps, p50)) in rounds
            .iter_mut()
            .zip([(300e3, 20.0), (500e3, 25.0), (400e3, 18.0)])
        {
            r.throughput_1.calls_per_sec = cps;
            r.latency_pinned.as_mut().unwrap().p50_us = p50;
        }
        rounds[0].memory.growth_per_1000_mib = 12.0;
        rounds[1].memory.growth_per_1000_mib = 10.0;
        rounds[2].memory.growth_per_1000_mib = 11.0;
        // Growths of 3000, 100 and 1000: the median growth is 1000, while the medians of the
        // readings (before 2000, after 3100) are 1100 apart. Each field is its own median.
        for (r, (before, after)) in
            rounds
                .iter_mut()
                .zip([(2000, 5000), (3000, 3100), (1000, 2000)])
        {
            r.stall.as_mut().unwrap().client = Rss::new(before, before, after);
        }
        let m = row(&rounds);
        assert_eq!(m.system, System::KeelTcpSync);
        assert_eq!(m.throughput_1.calls_per_sec, 400e3);
        assert_eq!(m.latency_pinned.unwrap().p50_us, 20.0);
        assert_eq!(m.memory.growth_per_1000_mib, 11.0);
        let client = m.stall.unwrap().client;
        assert_eq!((client.before_kib, client.after_kib), (2000, 3100));
        assert_eq!(
            (client.growth_kib, client.stall_growth_kib),
            (1000.0, 1000.0)
        );
        assert_eq!(m.streaming, rounds[0].streaming);
        assert_eq!(m.throughput_8, rounds[0].throughput_8);
    }

    #[test]
    fn a_round_without_pinning_gives_no_pinned_median() {
        let mut rounds = vec![sample(System::Raw, 1.0), sample(System::Raw, 2.0)];
        rounds[1].latency_pinned = None;
        rounds[0].stall = None;
        assert!(row(&rounds).latency_pinned.is_none());
        assert!(row(&rounds).stall.is_none());
        assert!(row(&rounds).streaming.is_some());
        assert_eq!(row(&rounds).latency.p50_us, 1.5);
    }
}
