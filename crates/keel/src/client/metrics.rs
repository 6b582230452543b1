//! A channel's metric handles: per operation, registered on its first call through the channel
//! (a channel does not know its contracts before), then a read lock, a short scan and a few
//! atomic additions per call. The names are in `core/metrics.rs`.

use std::sync::OnceLock;
use std::time::Instant;

use metrics::{counter, histogram, Counter, Histogram};
use parking_lot::RwLock;

use crate::core::metrics::{self as m, Since};
use crate::core::status::StatusCode;

/// Status codes, plus one slot for calls that failed without one (`transport_error`: see
/// `Error::status_code`).
const SLOTS: usize = StatusCode::ALL.len() + 1;
const TRANSPORT_ERROR: usize = SLOTS - 1;

/// One operation's handles on one channel.
#[derive(Debug)]
struct OpMetrics {
    service: &'static str,
    operation: &'static str,
    binding: &'static str,
    calls: [OnceLock<Counter>; SLOTS],
    duration: Histogram,
    /// Hedges sent, and hedged calls a hedge answered (registered on the first hedge).
    hedges: OnceLock<(Counter, Counter)>,
}

impl OpMetrics {
    fn answered(&self, code: Option<StatusCode>) {
        let slot = code.map_or(TRANSPORT_ERROR, |c| (c as usize).min(TRANSPORT_ERROR));
        let name = code.map_or("transport_error", StatusCode::as_str);
        self.calls[slot]
            .get_or_init(|| {
                counter!(m::CLIENT_CALLS, "service" => self.service, "operation" => self.operation,
                    "binding" => self.binding, "code" => name)
            })
            .increment(1);
    }
}

/// A channel's handles.
#[derive(Debug)]
pub(crate) struct ChannelMetrics {
    binding: &'static str,
    /// Keyed by the addresses of the service's and the operation's names (generated code
    /// passes the descriptor's `'static` strings, so each operation has one key). A channel
    /// calls a handful of operations: a scan under a read lock, with nothing cloned, is cheaper
    /// per call than hashing.
    ops: RwLock<Vec<((usize, usize), OpMetrics)>>,
}

impl ChannelMetrics {
    pub(crate) fn new(binding: &'static str) -> ChannelMetrics {
        m::describe();
        ChannelMetrics {
            binding,
            ops: RwLock::new(Vec::new()),
        }
    }

    /// The channel's binding (its URL's scheme).
    pub(crate) fn binding(&self) -> &'static str {
        self.binding
    }

    /// The counter of the connections a channel on `binding` opens after its first.
    pub(crate) fn reconnects(binding: &'static str) -> Counter {
        counter!(m::CLIENT_RECONNECTS, "binding" => binding)
    }

    /// A hedged call of `service.operation` sent `sent` hedges, and one of them gave its
    /// answer if `won`. Called after [`ChannelMetrics::record`] registered the operation (or
    /// registers it).
    pub(crate) fn record_hedges(
        &self,
        service: &'static str,
        operation: &'static str,
        sent: u64,
        won: bool,
    ) {
        let key = (service.as_ptr() as usize, operation.as_ptr() as usize);
        let record = |op: &OpMetrics| {
            let (hedges, won_by_hedge) = op.hedges.get_or_init(|| {
                let labels = [
                    ("service", op.service),
                    ("operation", op.operation),
                    ("binding", op.binding),
                ];
                (
                    counter!(m::CLIENT_HEDGES, &labels),
                    counter!(m::CLIENT_HEDGES_WON, &labels),
                )
            });
            hedges.increment(sent);
            if won {
                won_by_hedge.increment(1);
            }
        };
        if let Some((_, op)) = self.ops.read().iter().find(|(k, _)| *k == key) {
            return record(op);
        }
        // The operation's first call: its handles are registered when the call is recorded,
        // just after; these counters are registered on their own.
        let labels = [
            ("service", service),
            ("operation", operation),
            ("binding", self.binding),
        ];
        counter!(m::CLIENT_HEDGES, &labels).increment(sent);
        if won {
            counter!(m::CLIENT_HEDGES_WON, &labels).increment(1);
        }
    }

    /// One call of `service.operation`, started at `started`, ended now with `code` (`None`:
    /// no status came back). Its duration is worked out only if a recorder records it.
    pub(crate) fn record(
        &self,
        service: &'static str,
        operation: &'static str,
        started: Instant,
        code: Option<StatusCode>,
    ) {
        let key = (service.as_ptr() as usize, operation.as_ptr() as usize);
        let record = |op: &OpMetrics| {
            op.duration.record(Since(started));
            op.answered(code);
        };
        {
            let ops = self.ops.read();
            if let Some((_, op)) = ops.iter().find(|(k, _)| *k == key) {
                return record(op);
            }
        }
        let mut ops = self.ops.write();
        if let Some((_, op)) = ops.iter().find(|(k, _)| *k == key) {
            return record(op);
        }
        let labels = [
            ("service", service),
            ("operation", operation),
            ("binding", self.binding),
        ];
        let op = OpMetrics {
            service,
            operation,
            binding: self.binding,
            calls: std::array::from_fn(|_| OnceLock::new()),
            duration: histogram!(m::CLIENT_DURATION, &labels),
            hedges: OnceLock::new(),
        };
        record(&op);
        ops.push((key, op));
    }
}

#[cfg(all(test, feature = "prometheus"))]
mod tests {
    use super::*;

    /// The duration is worked out only when a recorder asks, and then it is the call's.
    #[test]
    fn a_recorder_gets_the_calls_duration() {
        let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        metrics::with_local_recorder(&recorder, || {
            let m = ChannelMetrics::new("tcp");
            let started = Instant::now() - std::time::Duration::from_millis(250);
            m.record("Svc", "op", started, Some(StatusCode::Ok));
        });
        let text = handle.render();
        let sum = text
            .lines()
            .find(|l| l.starts_with(m::CLIENT_DURATION) && l.contains("_sum"))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or_else(|| panic!("no duration sum in:\n{text}"));
        assert!((0.25..5.0).contains(&sum), "{sum}");
    }
}
