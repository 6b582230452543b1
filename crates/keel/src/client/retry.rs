//! Retries of idempotent calls, under a budget so that retries cannot amplify an outage.
//!
//! Only calls of `#[keel(idempotent)]` operations are retried, and only after failures that
//! say the host is (for now) unable to take them: `Unavailable`, `Busy`, `ShuttingDown`, or a
//! connection that could not be made or broke. A non-idempotent call is never sent again once
//! it may have reached a host (the bindings still resend calls a host says it did not process,
//! such as those above a keel-wire GoAway's `last_call_id`: that is not a retry).
//!
//! The budget is Finagle's `RetryBudget`, as a token bucket: each call deposits
//! [`budget_ratio`](RetryPolicy::budget_ratio) of a token, time deposits
//! [`budget_min_per_second`](RetryPolicy::budget_min_per_second) tokens a second (so a client
//! making few calls can still retry), saved tokens fade with a 10 s time constant (so the
//! bucket holds about 10 s of deposits), and each retry takes a whole token. Over any stretch of time, retries are at most `ratio × calls + min_per_second ×
//! seconds` plus what was saved in the 10 s before: with the defaults, an outage adds at most
//! about 10 % to the load the client puts on its hosts.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::bindings::Answer;
use crate::core::error::Kind;
use crate::core::status::StatusCode;
use crate::runtime::clock;

/// How a channel retries calls of `#[keel(idempotent)]` operations (see
/// [`ChannelBuilder::retry`](crate::client::ChannelBuilder::retry)).
///
/// ```
/// use std::time::Duration;
///
/// let policy = keel::client::RetryPolicy::default()
///     .max_attempts(4)
///     .backoff(Duration::from_millis(20), Duration::from_secs(2))
///     .budget(0.2, 5);
/// assert_eq!(policy.max_attempts, 4);
/// let never = keel::client::RetryPolicy::disabled();
/// assert_eq!(never.max_attempts, 1);
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct RetryPolicy {
    /// Attempts per call, the first included (1: no retries). Default: 3.
    pub max_attempts: u32,
    /// The longest wait before the first retry; the wait doubles with each retry, up to
    /// `max_backoff`, and each wait is drawn uniformly from zero up to it ("full jitter"). An
    /// HTTP host's `Retry-After` lengthens it. Default: 10 ms.
    pub initial_backoff: Duration,
    /// The longest wait before any retry. Default: 1 s.
    pub max_backoff: Duration,
    /// Retries allowed per call made, on average. Default: 0.1 (10 % extra load at most).
    pub budget_ratio: f64,
    /// Retries allowed per second whatever the number of calls. Default: 10.
    pub budget_min_per_second: u32,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 3,
            initial_backoff: Duration::from_millis(10),
            max_backoff: Duration::from_secs(1),
            budget_ratio: 0.1,
            budget_min_per_second: 10,
        }
    }
}

impl RetryPolicy {
    /// No retries.
    pub fn disabled() -> RetryPolicy {
        RetryPolicy {
            max_attempts: 1,
            ..RetryPolicy::default()
        }
    }

    /// Attempts per call, the first included (at least 1).
    pub fn max_attempts(mut self, attempts: u32) -> RetryPolicy {
        self.max_attempts = attempts.max(1);
        self
    }

    /// The longest wait before the first retry, and before any retry.
    pub fn backoff(mut self, initial: Duration, max: Duration) -> RetryPolicy {
        self.initial_backoff = initial;
        self.max_backoff = max.max(initial);
        self
    }

    /// Retries allowed per call made, and per second whatever the number of calls.
    pub fn budget(mut self, ratio: f64, min_per_second: u32) -> RetryPolicy {
        self.budget_ratio = ratio.max(0.0);
        self.budget_min_per_second = min_per_second;
        self
    }

    /// The wait before retry number `retry` (1 for the first): uniform in zero up to
    /// `initial_backoff × 2^(retry − 1)`, capped at `max_backoff`.
    pub(crate) fn backoff_for(&self, retry: u32) -> Duration {
        let ceiling = self
            .initial_backoff
            .saturating_mul(1u32 << retry.saturating_sub(1).min(20))
            .min(self.max_backoff);
        ceiling.mul_f64(crate::core::random::unit_random())
    }
}

/// Whether an answer is worth a retry for an idempotent call, and the least wait the host
/// asked for (HTTP `Retry-After`).
pub(crate) fn retryable(answer: &Answer) -> Option<Duration> {
    let again = |code: StatusCode| {
        matches!(
            code,
            StatusCode::Unavailable | StatusCode::Busy | StatusCode::ShuttingDown
        )
    };
    match answer {
        Ok(Ok(_)) => None,
        Ok(Err(status)) if again(status.code()) => {
            Some(status.retry_after().unwrap_or(Duration::ZERO))
        }
        Ok(Err(_)) => None,
        Err(e) => match e.kind() {
            Kind::Connect | Kind::Connection => Some(Duration::ZERO),
            Kind::Status(code) if again(code) => Some(Duration::ZERO),
            _ => None,
        },
    }
}

/// Deposits stop at this many seconds' worth.
const SAVED_SECONDS: f64 = 10.0;

/// A channel's retry budget (see the module docs).
#[derive(Debug)]
pub(crate) struct RetryBudget {
    ratio: f64,
    min_per_second: f64,
    state: Mutex<BudgetState>,
}

#[derive(Debug)]
struct BudgetState {
    tokens: f64,
    /// When tokens were last brought up to date, and the channel's call count then.
    updated: Instant,
    calls: u64,
}

impl RetryBudget {
    pub(crate) fn new(policy: &RetryPolicy) -> RetryBudget {
        let min_per_second = f64::from(policy.budget_min_per_second);
        RetryBudget {
            ratio: policy.budget_ratio,
            min_per_second,
            state: Mutex::new(BudgetState {
                // A new channel may retry as if it had been idle for a second.
                tokens: min_per_second,
                updated: clock::now(),
                calls: 0,
            }),
        }
    }

    /// Takes a token for one retry, if there is one. `calls` is the channel's count of calls
    /// made so far (retries not included).
    pub(crate) fn try_spend(&self, now: Instant, calls: u64) -> bool {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let new_calls = calls.saturating_sub(st.calls) as f64;
        let elapsed = now.saturating_duration_since(st.updated).as_secs_f64();
        st.calls = calls;
        st.updated = now;
        // Saved tokens fade with a 10 s time constant, so the bucket holds about the last
        // 10 s of deposits (a steady rate `r` of deposits levels off at `10 · r`).
        // Deposits made over the interval fade too: what is left of a steady flow over
        // `elapsed` is the flow times `gain`.
        let fade = (-elapsed / SAVED_SECONDS).exp();
        let gain = if elapsed > 0.0 {
            SAVED_SECONDS * (1.0 - fade) / elapsed
        } else {
            1.0
        };
        let deposits = self.ratio * new_calls + self.min_per_second * elapsed;
        st.tokens = st.tokens * fade + deposits * gain;
        // A hair below 1 (rounding, the fade of the last few milliseconds) counts as 1.
        if st.tokens >= 1.0 - 1e-3 {
            st.tokens = (st.tokens - 1.0).max(0.0);
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_is_jittered_below_a_doubling_ceiling() {
        let p =
            RetryPolicy::default().backoff(Duration::from_millis(10), Duration::from_millis(50));
        for _ in 0..200 {
            assert!(p.backoff_for(1) < Duration::from_millis(10));
            assert!(p.backoff_for(2) < Duration::from_millis(20));
            assert!(p.backoff_for(3) < Duration::from_millis(40));
            assert!(p.backoff_for(9) <= Duration::from_millis(50));
        }
        let spread: std::collections::HashSet<_> = (0..50).map(|_| p.backoff_for(3)).collect();
        assert!(spread.len() > 10, "not random: {spread:?}");
    }

    #[test]
    fn an_outage_gets_ten_percent_more_calls_and_no_more() {
        let policy = RetryPolicy::default().budget(0.1, 0);
        let budget = RetryBudget::new(&policy);
        let t0 = Instant::now();
        // 10,000 calls over 10 s, every one of them failing and asking for a retry.
        let mut granted = 0;
        for i in 1..=10_000u64 {
            let now = t0 + Duration::from_millis(i);
            if budget.try_spend(now, i) {
                granted += 1;
            }
        }
        assert!((990..=1_000).contains(&granted), "{granted}");
    }

    #[test]
    fn a_quiet_client_still_gets_its_minimum() {
        let policy = RetryPolicy::default().budget(0.1, 10);
        let budget = RetryBudget::new(&policy);
        let t0 = Instant::now();
        // The first second's worth at once.
        let burst = (0..100).filter(|_| budget.try_spend(t0, 1)).count();
        assert_eq!(burst, 10);
        // Then 10 a second, less what fades meanwhile (a tenth a second of what is saved).
        let later = t0 + Duration::from_secs(3);
        let more = (0..100).filter(|_| budget.try_spend(later, 1)).count();
        assert!((25..=30).contains(&more), "{more}");
        // Saved up, no more than 10 s worth.
        let much_later = later + Duration::from_secs(3_600);
        let saved = (0..1_000)
            .filter(|_| budget.try_spend(much_later, 1))
            .count();
        assert_eq!(saved, 100);
    }

    #[test]
    fn only_failures_that_say_the_host_could_not_take_the_call_are_retried() {
        use crate::core::error::Error;
        use crate::core::status::Status;
        let status = |c| -> Answer { Ok(Err(Status::new(c, "x"))) };
        assert_eq!(retryable(&status(StatusCode::Busy)), Some(Duration::ZERO));
        assert_eq!(
            retryable(&status(StatusCode::Unavailable)),
            Some(Duration::ZERO)
        );
        assert_eq!(
            retryable(&status(StatusCode::ShuttingDown)),
            Some(Duration::ZERO)
        );
        assert_eq!(retryable(&status(StatusCode::Internal)), None);
        assert_eq!(retryable(&status(StatusCode::Fault)), None);
        assert_eq!(retryable(&status(StatusCode::DeadlineExceeded)), None);
        let asked = Ok(Err(
            Status::new(StatusCode::Busy, "x").with_retry_after(Some(Duration::from_secs(2)))
        ));
        assert_eq!(retryable(&asked), Some(Duration::from_secs(2)));
        let err = |k| -> Answer { Err(Error::new(k, "x")) };
        assert_eq!(retryable(&err(Kind::Connection)), Some(Duration::ZERO));
        assert_eq!(retryable(&err(Kind::Connect)), Some(Duration::ZERO));
        assert_eq!(
            retryable(&err(Kind::Status(StatusCode::Unavailable))),
            Some(Duration::ZERO)
        );
        assert_eq!(retryable(&err(Kind::Timeout)), None);
        assert_eq!(retryable(&err(Kind::Protocol)), None);
        assert_eq!(retryable(&err(Kind::TooLarge)), None);
    }
}
