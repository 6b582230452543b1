//! `keel-lab all`: runs every experiment on a profile, prints one table (experiment, WCF as
//! reported, WCF fixed or worked around, keel, bar, verdict) and renders a self-contained HTML
//! report with hand-written SVG charts.
//!
//! This file runs the experiments and puts their results together ([`All`]); `table.rs` makes
//! the table's rows and the plain-text table, `html.rs` the page, `bursts.rs` seed 002's
//! sections (pool threads, where a call's time went), `charts.rs` seed 000's and 001's charts
//! beside WCF's numbers, and `svg.rs` what every chart shares (escaping, the `<svg>` element,
//! axis steps).

use serde::Serialize;

use crate::experiments::burst::{self, Burst};
use crate::experiments::concurrent::{self, Concurrent};
use crate::experiments::first_call::{self, FirstCall};
use crate::experiments::idle::{self, Idle};
use crate::experiments::overload::{self, Overload};
use crate::experiments::Binding;
use crate::peers::{self, Peers};
use crate::wan::matrix::{Matrix, MatrixParams};

mod bursts;
mod charts;
mod html;
mod svg;
mod table;
#[cfg(test)]
mod tests;

pub(crate) use html::html;
pub(crate) use table::{rows, table};

/// Timings of one run of every experiment.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Profile {
    /// `quick` or `full`.
    pub(crate) name: &'static str,
    /// Steady-state calls (first-call and idle).
    pub(crate) steady_calls: usize,
    /// Seed 000's rounds, each a fresh process.
    pub(crate) first_call_rounds: usize,
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
            first_call_rounds: 5,
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
        rounds: profile.first_call_rounds,
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
