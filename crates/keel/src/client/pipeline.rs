//! A call's one path through its channel: the call's options, the interceptors, compression,
//! and the attempt loop, the only place where keel sends a call again.
//!
//! A binding makes one attempt at a time and reports what happened to it ([`Attempt`]); the
//! loop in `Channel::run` decides what comes next:
//!
//! | what happened to the attempt | what the loop does | re-sends at most |
//! |---|---|---|
//! | answered, or failed after the request left | that is the answer, unless it may be retried (last row) | |
//! | not sent, or not processed (a GoAway, HTTP/2's REFUSED_STREAM, a 503 marked `keel-unprocessed`) | at once, on a new connection, any call (nothing ran); a request stream goes along only if nothing was taken from it | [`UNRUN_RESENDS`] |
//! | no connection could be made | at once, to another host of a balanced channel, any call (nothing was sent); with no other host left, the connect error is the answer | hosts − 1 |
//! | an answer that says the host could not take the call (`unavailable`, `busy`, `shutting_down`, a lost or refused connection), for an `#[keel(idempotent)]` operation without a request stream | after the [`RetryPolicy`](super::RetryPolicy)'s backoff (or the host's `retry-after`), if the retry budget and the deadline allow; the first retry after a connection that broke or went silent on a balanced channel goes at once (the balancer left that host out) | `max_attempts` − 1 |
//!
//! So one call makes at most 1 + [`UNRUN_RESENDS`] + (hosts − 1) + (`max_attempts` − 1)
//! attempts, whatever its binding, and every one within its deadline. Interceptors, metrics and
//! spans see one call, whatever its attempts.
//!
//! **Hedged calls** (an idempotent operation's call without a request stream or a streamed
//! reply, under a [`HedgingPolicy`](super::HedgingPolicy): see `hedge.rs`) take another path,
//! `Channel::run_hedged`, boxed so that the others' futures do not carry its state: up to the
//! policy's `max_attempts` copies of the call run side by side in one future, each with the
//! re-sends of the first three rows above (for itself); a copy starts when the policy's delay
//! passes without an answer, or at once after an answer of the last row, if the retry budget
//! gives a token; the first answer not of the last row is the call's, and dropping the other
//! copies cancels them. A hedged call is not retried after an answer (its hedges do that), so
//! it makes at most `max_attempts` × (1 + [`UNRUN_RESENDS`] + (hosts − 1)) attempts.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use std::future::Future;
use std::task::Poll;

use super::call::CallOptions;
use super::hedge::{self, HedgeDelay, HedgingPolicy};
use super::{retry, Channel};
use crate::bindings::{Again, Answer, Attempt, Client, Outgoing, Replied, TriedHosts};
use crate::core::compress::{self, DecompressError};
use crate::core::error::{Error, Kind};
use crate::core::metadata::{Metadata, MAX_METADATA_BYTES};
use crate::core::service::Payload;
use crate::core::status::{Status, StatusCode};
use crate::runtime::clock;

/// How many times one call is sent again because an attempt did not run it (not sent, or not
/// processed): a host that refuses it on every new connection is shutting down.
pub(crate) const UNRUN_RESENDS: u32 = 2;

/// Whether [`Channel::run`] records the call's metrics when it ends: a call whose future is
/// `run`'s own does; one that `run` is a part of (a traced call, a call for an incoming call)
/// records them itself, answered or not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Record {
    /// `run` records them.
    Metrics,
    /// The caller does.
    Nothing,
}

/// The status code a call's metrics and span record for `answer`: `None` for an error of
/// the caller's side that has none (a transport error).
pub(super) fn answer_code(answer: &Answer) -> Option<StatusCode> {
    match answer {
        Ok(Ok(_)) => Some(StatusCode::Ok),
        Ok(Err(status)) => Some(status.code()),
        Err(e) => e.status_code(),
    }
}

/// What a call may still spend on re-sends (see the module docs).
#[derive(Debug, Default)]
struct Spent {
    /// Re-sends after an attempt that did not run the call.
    unrun: u32,
    /// Re-sends to another host after no connection could be made.
    other_hosts: usize,
    /// Retries of an answer (1 after the first).
    retries: u32,
}

impl Channel {
    /// Every call's path from its options to its answer: the channel's default metadata and the
    /// call's, the interceptors, the metadata size check, compression, the attempt loop, and the
    /// reply's decompression and metadata. `started`: when the call started (its deadline is
    /// that plus its time budget).
    ///
    /// The loop is written here, not in a function of its own, and awaits keel-wire's attempt
    /// without `Client::attempt`: each `async fn` level on this path costs every call the
    /// moves of its state (callgrind counted ~500 instructions a call for two such levels).
    ///
    /// Not an `async fn` but a function returning an `async move` block, for the same reason:
    /// an `async fn` keeps its arguments twice in its state (as arguments, and as the locals
    /// they become), the 152-byte `call` included; the block uses its captures in place.
    #[allow(clippy::manual_async_fn)] // on purpose: see above
    pub(super) fn run<'a>(
        &'a self,
        mut call: Outgoing,
        options: &'a CallOptions,
        started: Instant,
        record: Record,
    ) -> impl Future<Output = Answer> + Send + 'a {
        async move {
            let answer = 'answer: {
                let budget = self.begin(&mut call, options);
                let deadline = started + budget;
                // In a block of its own: its storage ends with it, not at the call's end, so
                // the call's state across the attempt does not carry it.
                let intercepted = {
                    let before = if self.inner.interceptors.deferred.is_empty() {
                        self.before(&mut call)
                    } else {
                        // Boxed: only channels with async interceptors carry their state.
                        Box::pin(self.before_async(&mut call, deadline)).await
                    };
                    match before {
                        Ok(seen) => seen,
                        Err((seen, answer)) => {
                            self.store_reply_metadata(&answer, options);
                            self.after(Some(seen), &answer);
                            break 'answer answer;
                        }
                    }
                };
                let mut answer = match check_metadata_size(&call) {
                    Ok(()) => {
                        self.compress(&mut call);
                        if let Some(policy) = self.hedging(&call, options) {
                            // Boxed: only calls with a hedging policy take it, and its state
                            // (several attempts, a timer) would weigh on every call's future.
                            let template = call.clone_unstreamed();
                            Box::pin(self.run_hedged(template, policy, deadline, started)).await
                        } else {
                            let may_retry = self.may_retry(&call);
                            let mut spent = Spent::default();
                            // The start doubles as the first request's send time, and the
                            // budget as its remaining deadline, if nothing waits before it is
                            // sent.
                            let mut sent = Some((started, budget));
                            loop {
                                let attempt = match &self.inner.transport {
                                    Client::Wire(wire) => {
                                        wire.attempt_inner(&mut call, deadline, sent.take()).await
                                    }
                                    Client::Other(transport) => {
                                        transport.attempt(&mut call, deadline).await
                                    }
                                };
                                let answer = match attempt {
                                    Attempt::Answered(answer) => answer,
                                    Attempt::Again { stream_back, why } => {
                                        let again = self.again(
                                            &mut call,
                                            stream_back,
                                            why,
                                            deadline,
                                            &mut spent,
                                        );
                                        // Boxed: rare, and its state would weigh on every
                                        // call's future.
                                        match Box::pin(again).await {
                                            Ok(()) => continue,
                                            // No re-send left for this reason: the call's
                                            // answer, which may still be retried (the call did
                                            // not run).
                                            Err(answer) => answer,
                                        }
                                    }
                                };
                                if !may_retry {
                                    break answer;
                                }
                                match self.retry_wait(&answer, &mut spent, deadline, &call) {
                                    // Boxed: a rare wait, whose timer every call's future would
                                    // otherwise carry.
                                    Some(wait) => Box::pin(tokio::time::sleep(wait)).await,
                                    None => break answer,
                                }
                            }
                        }
                    }
                    Err(e) => Err(e),
                };
                if let Err(e) = self.decompress_reply(&mut answer, call.service, call.operation) {
                    answer = Err(e);
                }
                self.store_reply_metadata(&answer, options);
                self.after(intercepted, &answer);
                answer
            };
            if record == Record::Metrics {
                let code = answer_code(&answer);
                let metrics = &self.inner.metrics;
                metrics.record(call.service, call.operation, started, code);
            }
            answer
        }
    }

    /// An attempt did not run `call` (`why`): gets its request stream back from `stream_back`
    /// for the next attempt; or, with no re-send left for `why` (or a stream that had started),
    /// the call's answer.
    async fn again(
        &self,
        call: &mut Outgoing,
        stream_back: Option<crate::bindings::StreamBack>,
        why: Again,
        deadline: Instant,
        spent: &mut Spent,
    ) -> Result<(), Answer> {
        let url = &self.inner.url;
        let give_up = match why {
            Again::NoConnection(e) => {
                let hosts = self.inner.transport.transport().hosts();
                spent.other_hosts += 1;
                (spent.other_hosts >= hosts).then_some(Err(e))
            }
            Again::NotSent => {
                spent.unrun += 1;
                (spent.unrun > UNRUN_RESENDS).then(|| {
                    Err(Error::new(
                        Kind::Connection,
                        format!("{url}: the connection closed before the request was sent"),
                    ))
                })
            }
            Again::Unprocessed => {
                // Pooled connections may lead to the host that is going away.
                call.fresh = true;
                spent.unrun += 1;
                // A host that refuses the call on every new connection is shutting down.
                (spent.unrun > UNRUN_RESENDS).then(|| {
                    Ok(Err(Status::new(
                        StatusCode::ShuttingDown,
                        format!("{url}: the host is going away"),
                    )))
                })
            }
        };
        if let Some(stream_back) = stream_back {
            match tokio::time::timeout_at(clock::to_tokio(deadline), stream_back).await {
                Ok(Ok(Some(stream))) => call.upload = Some(stream),
                Ok(_) => {
                    let (service, operation) = (call.service, call.operation);
                    return Err(Ok(Err(Status::new(
                        StatusCode::ShuttingDown,
                        format!(
                            "{service}.{operation}: the host went away without processing the \
                             call, and its request stream had started, so it cannot be sent \
                             again"
                        ),
                    ))));
                }
                Err(_) => return Err(Err(call.timed_out())),
            }
        }
        match give_up {
            Some(answer) => Err(answer),
            None => Ok(()),
        }
    }

    /// How long to wait before retrying `call` after `answer`, if it is retried at all: the
    /// answer says the host could not take it, the policy has attempts left, the wait ends
    /// before the deadline, and the retry budget has a token.
    fn retry_wait(
        &self,
        answer: &Answer,
        spent: &mut Spent,
        deadline: Instant,
        call: &Outgoing,
    ) -> Option<Duration> {
        let inner = &self.inner;
        let policy = &inner.config.retry;
        let asked = retry::retryable(answer)?;
        spent.retries += 1;
        if spent.retries >= policy.max_attempts {
            return None;
        }
        // A connection that broke or went silent under the call, on a balanced channel: the
        // balancer has left that host out, so the first retry goes to another one at once
        // rather than after a backoff (a frozen host's calls move within its verdict).
        let moved_at_once = spent.retries == 1
            && matches!(answer, Err(e) if e.kind() == Kind::Connection
                || e.kind() == Kind::Status(StatusCode::Unavailable))
            && inner.transport.transport().hosts() > 1;
        let wait = if moved_at_once {
            asked
        } else {
            policy.backoff_for(spent.retries).max(asked)
        };
        let now = clock::now();
        if now + wait >= deadline {
            return None;
        }
        let calls = inner.calls.load(Ordering::Relaxed);
        if !inner.retry_budget.try_spend(now, calls) {
            inner.retries_refused.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        inner.retries.fetch_add(1, Ordering::Relaxed);
        log::debug!(
            "{}.{}: retry {} in {} ms",
            call.service,
            call.operation,
            spent.retries,
            wait.as_millis()
        );
        Some(wait)
    }

    /// The hedging policy `call` runs under, if any: the call's options', else its
    /// operation's, else the channel's; only for an idempotent operation without a request
    /// stream or a streamed reply, and a policy of more than one attempt.
    #[inline]
    fn hedging(&self, call: &Outgoing, options: &CallOptions) -> Option<HedgingPolicy> {
        if !call.idempotent || call.upload.is_some() || call.download {
            return None;
        }
        let config = &self.inner.config;
        let policy = match options.hedging {
            Some(policy) => policy,
            None => config.hedging_of(call.service, call.operation)?,
        };
        policy.hedges().then_some(policy)
    }

    /// A hedged call's attempts (see `hedge.rs`): the first now, the next each time the
    /// policy's delay passes without an answer or at once after an answer that says the host
    /// could not take the call, each with a retry-budget token, to a host the others did not
    /// go to while one is left; the first other answer wins, and dropping the rest cancels
    /// them.
    /// `call` is a copy of the call (owned: a reference would not be `Send`, a request
    /// stream not being `Sync`), which each attempt copies.
    async fn run_hedged(
        &self,
        call: Outgoing,
        policy: HedgingPolicy,
        deadline: Instant,
        started: Instant,
    ) -> Answer {
        let inner = &self.inner;
        let recorder = match policy.delay {
            HedgeDelay::Percentile(p) => Some((
                inner
                    .latency
                    .get_or_init(|| hedge::LatencyRecorder::new(started)),
                p,
            )),
            HedgeDelay::Fixed(_) => None,
        };
        let delay = match (policy.delay, recorder) {
            (HedgeDelay::Fixed(delay), _) => Some(delay),
            (_, Some((recorder, p))) => recorder.percentile(p, started),
            _ => None,
        };
        let max = policy.max_attempts.min(hedge::MAX_HEDGED_ATTEMPTS);
        let tried = TriedHosts::default();
        let mut running = Vec::with_capacity(max as usize);
        running.push(Box::pin(self.hedge(
            call.clone_unstreamed(),
            0,
            deadline,
            &tried,
        )));
        let mut sent = 1;
        let mut next_at = delay.and_then(|d| started.checked_add(d));
        // The bindings end each attempt at the deadline; this ends the call there whatever
        // a binding does.
        let mut expiry = Box::pin(tokio::time::sleep_until(clock::to_tokio(deadline)));
        let mut timer = None;
        // The last answer that said the host could not take the call: the call's, if no
        // other comes.
        let mut last = None;
        let (index, answer) = loop {
            if sent >= max {
                next_at = None;
            }
            match next_at {
                Some(at) if timer.is_none() => {
                    timer = Some(Box::pin(tokio::time::sleep_until(clock::to_tokio(at))));
                }
                None => timer = None,
                Some(_) => {}
            }
            let event = std::future::poll_fn(|cx| {
                for (i, attempt) in running.iter_mut().enumerate() {
                    if let Poll::Ready(answered) = attempt.as_mut().poll(cx) {
                        return Poll::Ready(Event::Answered(i, answered));
                    }
                }
                if expiry.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(Event::Expired);
                }
                match timer.as_mut().map(|t| t.as_mut().poll(cx)) {
                    Some(Poll::Ready(())) => Poll::Ready(Event::Delay),
                    _ => Poll::Pending,
                }
            })
            .await;
            let start_next = match event {
                Event::Expired => break (0, Err(call.timed_out())),
                Event::Answered(i, (index, answer)) => {
                    drop(running.swap_remove(i));
                    if retry::retryable(&answer).is_none() {
                        break (index, answer);
                    }
                    last = Some((index, answer));
                    sent < max
                }
                Event::Delay => true,
            };
            timer = None;
            next_at = None;
            if start_next && self.may_hedge(deadline) {
                let next = call.clone_unstreamed();
                running.push(Box::pin(self.hedge(next, sent, deadline, &tried)));
                sent += 1;
                next_at = delay.and_then(|d| clock::now().checked_add(d));
            }
            if running.is_empty() {
                match last.take() {
                    Some(last) => break last,
                    None => unreachable!("a hedged call's attempts ended without an answer"),
                }
            }
        };
        // The losers are cancelled here, before the answer goes back.
        drop(running);
        if index > 0 {
            inner.hedges_won.fetch_add(1, Ordering::Relaxed);
        }
        if sent > 1 {
            inner.metrics.record_hedges(
                call.service,
                call.operation,
                u64::from(sent - 1),
                index > 0,
            );
        }
        if let (Some((recorder, _)), Ok(_)) = (recorder, &answer) {
            let now = clock::now();
            recorder.record(now.saturating_duration_since(started), now);
        }
        answer
    }

    /// Whether a hedged call may send another attempt: before its deadline, with a token of
    /// the retry budget.
    fn may_hedge(&self, deadline: Instant) -> bool {
        let inner = &self.inner;
        let now = clock::now();
        if now >= deadline {
            return false;
        }
        if !inner
            .retry_budget
            .try_spend(now, inner.calls.load(Ordering::Relaxed))
        {
            inner.hedges_refused.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        inner.hedges.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// One attempt of a hedged call, numbered `index` (0 for the first), with the re-sends
    /// every attempt gets when the call did not run (see the module docs): its answer.
    async fn hedge(
        &self,
        mut call: Outgoing,
        index: u32,
        deadline: Instant,
        tried: &TriedHosts,
    ) -> (u32, Answer) {
        let mut spent = Spent::default();
        loop {
            let attempt = match &self.inner.transport {
                Client::Wire(wire) => wire.attempt_inner(&mut call, deadline, None).await,
                Client::Other(transport) => {
                    transport.attempt_hedge(&mut call, deadline, tried).await
                }
            };
            match attempt {
                Attempt::Answered(answer) => return (index, answer),
                Attempt::Again { stream_back, why } => {
                    match self
                        .again(&mut call, stream_back, why, deadline, &mut spent)
                        .await
                    {
                        Ok(()) => continue,
                        Err(answer) => return (index, answer),
                    }
                }
            }
        }
    }

    /// A call starts: counts it, gives it the channel's default metadata overridden by its
    /// options', and returns its time budget (its deadline is its start plus that).
    fn begin(&self, call: &mut Outgoing, options: &CallOptions) -> Duration {
        self.inner.calls.fetch_add(1, Ordering::Relaxed);
        let config = &self.inner.config;
        let defaults = &config.metadata;
        call.metadata = match (
            &options.context,
            defaults.is_empty(),
            options.metadata.is_empty(),
        ) {
            (None, true, _) => options.metadata.clone(),
            (None, false, true) => defaults.clone(),
            (None, false, false) => {
                let mut md = defaults.clone();
                md.merge(&options.metadata);
                md
            }
            // Made for an incoming call: the channel's defaults, then what propagates from
            // the incoming call, then the call's own.
            (Some(ctx), _, _) => {
                let mut md = defaults.clone();
                md.merge(&ctx.metadata().only(&config.propagated_metadata));
                md.merge(&options.metadata);
                md
            }
        };
        self.budget(options)
    }

    /// A call's time budget with `options`: their deadline or the channel's default, and, for
    /// a call made for an incoming call, at most what that one has left less the channel's
    /// propagation margin.
    pub(super) fn budget(&self, options: &CallOptions) -> Duration {
        let config = &self.inner.config;
        let own = options.deadline.unwrap_or(config.deadline);
        match options.context.as_ref().and_then(|ctx| ctx.remaining()) {
            Some(left) => own.min(left.saturating_sub(config.propagation_margin)),
            None => own,
        }
    }

    /// Runs the interceptors' `before` on `call`'s metadata. Returns what they saw, for their
    /// `after` (`None` without interceptors), or what they saw and the status one refused the
    /// call with. For a channel without async interceptors.
    #[allow(clippy::result_large_err)]
    #[inline]
    fn before(&self, call: &mut Outgoing) -> Result<Option<Intercepted>, (Intercepted, Answer)> {
        let chain = &self.inner.interceptors.sync;
        if chain.is_empty() {
            return Ok(None);
        }
        let mut seen = super::ClientCall::new(
            call.service,
            call.operation,
            std::mem::take(&mut call.metadata),
        );
        let ran = match run_sync(chain, &mut seen) {
            Ok(ran) => ran,
            Err((ran, status)) => return Err((Intercepted::sync(seen, ran), Ok(Err(status)))),
        };
        call.metadata = seen.metadata().clone();
        Ok(Some(Intercepted::sync(seen, ran)))
    }

    /// [`before`](Channel::before) for a channel with async interceptors: the synchronous ones,
    /// then the async ones, within the call's `deadline`.
    #[allow(clippy::result_large_err)]
    async fn before_async(
        &self,
        call: &mut Outgoing,
        deadline: Instant,
    ) -> Result<Option<Intercepted>, (Intercepted, Answer)> {
        let chain = &self.inner.interceptors;
        let mut seen = super::ClientCall::new(
            call.service,
            call.operation,
            std::mem::take(&mut call.metadata),
        );
        let ran = match run_sync(&chain.sync, &mut seen) {
            Ok(ran) => ran,
            Err((ran, status)) => return Err((Intercepted::sync(seen, ran), Ok(Err(status)))),
        };
        let mut ran_async = 0;
        for interceptor in &chain.deferred {
            ran_async += 1;
            let before = interceptor.before(&mut seen);
            let refused = match tokio::time::timeout_at(clock::to_tokio(deadline), before).await {
                Ok(Ok(())) => continue,
                Ok(Err(status)) => Ok(Err(status)),
                Err(_) => Err(call.timed_out()),
            };
            let intercepted = Intercepted {
                seen,
                ran,
                ran_async,
            };
            return Err((intercepted, refused));
        }
        call.metadata = seen.metadata().clone();
        Ok(Some(Intercepted {
            seen,
            ran,
            ran_async,
        }))
    }

    /// Runs the `after` of the interceptors whose `before` ran, in reverse order (the async
    /// ones first).
    #[inline]
    fn after(&self, intercepted: Option<Intercepted>, answer: &Answer) {
        if let Some(intercepted) = intercepted {
            self.after_intercepted(intercepted, answer);
        }
    }

    /// [`after`](Channel::after) for a call the interceptors saw.
    fn after_intercepted(&self, intercepted: Intercepted, answer: &Answer) {
        let Intercepted {
            seen,
            ran,
            ran_async,
        } = intercepted;
        let status_error;
        let outcome = match answer {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(status)) => {
                status_error = Error::from_status(status.clone());
                Err(&status_error)
            }
            Err(e) => Err(e),
        };
        let chain = &self.inner.interceptors;
        for interceptor in chain.deferred[..ran_async].iter().rev() {
            interceptor.after(&seen, outcome);
        }
        for interceptor in chain.sync[..ran].iter().rev() {
            interceptor.after(&seen, outcome);
        }
    }

    /// Whether `call` may be sent again after an answer that says the host could not take
    /// it: idempotent, without a request stream (which cannot be sent twice), on a channel
    /// whose [`RetryPolicy`](super::RetryPolicy) retries.
    #[inline]
    fn may_retry(&self, call: &Outgoing) -> bool {
        call.idempotent && self.inner.config.retry.max_attempts > 1 && call.upload.is_none()
    }

    /// Compresses the request body as the channel's settings say (and asks for compressed
    /// replies).
    #[inline]
    fn compress(&self, call: &mut Outgoing) {
        let config = &self.inner.config;
        if let Some(codec) = config.compression {
            call.accepts_compressed = true;
            if call.upload.is_none() && call.body.len() >= config.compress_above {
                let packed = compress::compress(codec, &call.body);
                if packed.len() < call.body.len() {
                    call.body = packed;
                    call.compression = Some(codec);
                }
            }
        }
    }

    /// Decompresses a reply body the host compressed, within this client's message size.
    #[inline]
    fn decompress_reply(
        &self,
        answer: &mut Answer,
        service: &str,
        operation: &str,
    ) -> Result<(), Error> {
        match answer {
            Ok(Ok(replied)) if replied.compression.is_some() => {
                self.decompress_body(replied, service, operation)
            }
            _ => Ok(()),
        }
    }

    /// [`decompress_reply`](Channel::decompress_reply) for a reply the host compressed.
    fn decompress_body(
        &self,
        replied: &mut Replied,
        service: &str,
        operation: &str,
    ) -> Result<(), Error> {
        let (Some(codec), Payload::Body(body)) = (replied.compression, &mut replied.payload) else {
            return Ok(());
        };
        let limit = self.inner.config.max_message_size as usize;
        match compress::decompress(codec, body, limit) {
            Ok(plain) => {
                *body = plain;
                replied.compression = None;
                Ok(())
            }
            Err(DecompressError::TooLarge { .. }) => Err(Error::new(
                Kind::TooLarge,
                format!(
                    "{service}.{operation}: the {codec} reply decompresses to more than this client's limit of {limit} bytes"
                ),
            )),
            Err(DecompressError::Malformed(why)) => Err(Error::new(
                Kind::Protocol,
                format!("{service}.{operation}: the {codec} reply does not decompress: {why}"),
            )),
        }
    }

    /// Stores a call's reply metadata where its options ask.
    #[inline]
    fn store_reply_metadata(&self, answer: &Answer, options: &CallOptions) {
        if let Some(slot) = &options.reply {
            match answer {
                Ok(Ok(replied)) => slot.set(replied.metadata.clone()),
                Ok(Err(status)) => slot.set(status.metadata().clone()),
                Err(_) => slot.set(Metadata::new()),
            }
        }
    }
}

/// What ends a hedged call's wait: an attempt's answer (its place among those running, its
/// number and its answer), the delay before the next attempt, or the deadline.
enum Event {
    Answered(usize, (u32, Answer)),
    Delay,
    Expired,
}

/// What the interceptors saw of a call, and how many of them ran `before`.
#[derive(Debug)]
struct Intercepted {
    seen: super::ClientCall,
    /// Synchronous interceptors whose `before` ran.
    ran: usize,
    /// Async interceptors whose `before` started.
    ran_async: usize,
}

impl Intercepted {
    fn sync(seen: super::ClientCall, ran: usize) -> Intercepted {
        Intercepted {
            seen,
            ran,
            ran_async: 0,
        }
    }
}

/// Runs the synchronous interceptors' `before` on `seen`: how many ran, or how many ran and
/// the status the last one refused the call with.
#[inline]
fn run_sync(
    chain: &[std::sync::Arc<dyn super::Interceptor>],
    seen: &mut super::ClientCall,
) -> Result<usize, (usize, Status)> {
    let mut ran = 0;
    for interceptor in chain {
        ran += 1;
        if let Err(status) = interceptor.before(seen) {
            return Err((ran, status));
        }
    }
    Ok(ran)
}

/// A call whose metadata exceeds what every binding carries is refused before it is sent.
fn check_metadata_size(call: &Outgoing) -> Result<(), Error> {
    let size = call.metadata.encoded_len();
    if size > MAX_METADATA_BYTES {
        return Err(Error::new(
            Kind::TooLarge,
            format!(
                "{}.{}: {size} bytes of metadata exceed the limit of {MAX_METADATA_BYTES}",
                call.service, call.operation
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::sync::Mutex;

    use bytes::Bytes;

    use super::*;
    use crate::bindings::{BoxFuture, ClientTransport, ConnCounts};
    use crate::client::{HedgeDelay, HedgingPolicy, RetryPolicy};

    /// What the fake transport does with one attempt.
    #[derive(Debug, Clone, Copy)]
    enum Step {
        NotSent,
        Unprocessed,
        NoConnection,
        /// The host answers with this code.
        Answer(StatusCode),
        /// The host never answers (until the attempt is dropped, which the script counts).
        Stall,
        /// The connection broke (or was found dead) after the request left.
        Lost,
    }

    /// A transport that plays a script, one step per attempt (the last step again once the
    /// script is played), counting the attempts.
    #[derive(Debug)]
    struct Script {
        steps: Mutex<VecDeque<Step>>,
        last: Mutex<Step>,
        attempts: Mutex<u32>,
        /// Stalled attempts dropped (cancelled).
        dropped: Mutex<u32>,
        hosts: usize,
    }

    /// Counts a stalled attempt dropped.
    struct Dropped(std::sync::Arc<Script>);

    impl Drop for Dropped {
        fn drop(&mut self) {
            *self.0.dropped.lock().unwrap() += 1;
        }
    }

    impl Script {
        fn new(steps: &[Step], hosts: usize) -> Script {
            Script {
                steps: Mutex::new(steps.iter().copied().collect()),
                last: Mutex::new(*steps.last().expect("a step")),
                attempts: Mutex::new(0),
                dropped: Mutex::new(0),
                hosts,
            }
        }
    }

    /// The script, shared by the channel and the test.
    #[derive(Debug, Clone)]
    struct Fake(std::sync::Arc<Script>);

    impl ClientTransport for Fake {
        fn attempt<'a>(
            &'a self,
            _call: &'a mut Outgoing,
            _deadline: Instant,
        ) -> BoxFuture<'a, Attempt> {
            *self.0.attempts.lock().unwrap() += 1;
            let step = self
                .0
                .steps
                .lock()
                .unwrap()
                .pop_front()
                .unwrap_or(*self.0.last.lock().unwrap());
            let attempt = match step {
                Step::NotSent => Attempt::again(Again::NotSent),
                Step::Unprocessed => Attempt::again(Again::Unprocessed),
                Step::NoConnection => Attempt::again(Again::NoConnection(Error::new(
                    Kind::Connect,
                    "connection refused",
                ))),
                Step::Answer(StatusCode::Ok) => {
                    Attempt::Answered(Ok(Ok(crate::bindings::Replied {
                        payload: Payload::Body(Bytes::new()),
                        metadata: Metadata::new(),
                        compression: None,
                    })))
                }
                Step::Answer(code) => Attempt::Answered(Ok(Err(Status::new(code, "scripted")))),
                Step::Lost => Attempt::Answered(Err(Error::new(
                    Kind::Connection,
                    "the peer sent nothing after a keepalive ping",
                ))),
                Step::Stall => {
                    let dropped = Dropped(self.0.clone());
                    return Box::pin(async move {
                        let _dropped = dropped;
                        std::future::pending().await
                    });
                }
            };
            Box::pin(async move { attempt })
        }
        fn hosts(&self) -> usize {
            self.0.hosts
        }
        fn open(&self) -> BoxFuture<'_, Result<(), Error>> {
            Box::pin(async { Ok(()) })
        }
        fn close(&self) {}
        fn is_connected(&self) -> bool {
            true
        }
        fn counts(&self) -> ConnCounts {
            ConnCounts::default()
        }
    }

    /// A channel on `steps` (over `hosts` hosts), retrying up to `max_attempts` attempts with
    /// a budget that never runs out.
    fn scripted(steps: &[Step], hosts: usize, max_attempts: u32) -> (Channel, Fake) {
        scripted_with(steps, hosts, max_attempts, |b| b)
    }

    /// [`scripted`], with more settings.
    fn scripted_with(
        steps: &[Step],
        hosts: usize,
        max_attempts: u32,
        more: impl FnOnce(super::super::ChannelBuilder) -> super::super::ChannelBuilder,
    ) -> (Channel, Fake) {
        let fake = Fake(std::sync::Arc::new(Script::new(steps, hosts)));
        let retry = RetryPolicy::default()
            .max_attempts(max_attempts)
            .backoff(Duration::from_millis(1), Duration::from_millis(1))
            .budget(10.0, 1_000_000);
        let channel =
            more(Channel::builder("tcp://fake:1").retry(retry)).build_on(Box::new(fake.clone()));
        (channel, fake)
    }

    /// A channel on `steps` that hedges up to `attempts` attempts 10 ms apart.
    fn hedged(steps: &[Step], attempts: u32) -> (Channel, Fake) {
        scripted_with(steps, 1, 4, |b| {
            b.hedging(
                HedgingPolicy::default()
                    .max_attempts(attempts)
                    .delay(HedgeDelay::Fixed(Duration::from_millis(10))),
            )
        })
    }

    fn dropped(fake: &Fake) -> u32 {
        *fake.0.dropped.lock().unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn a_stalled_attempt_is_hedged_and_the_loser_dropped() {
        let (channel, fake) = hedged(&[Step::Stall, Step::Answer(StatusCode::Ok)], 3);
        assert!(run(&channel, true).await.unwrap().is_ok());
        assert_eq!(attempts(&fake), 2);
        assert_eq!(dropped(&fake), 1, "the stalled attempt is cancelled");
        let stats = channel.stats();
        assert_eq!((stats.hedges, stats.hedges_won, stats.retries), (1, 1, 0));
        // The first attempt's answer wins when it comes first: no hedge won.
        let (channel, fake) = hedged(&[Step::Answer(StatusCode::NotFound)], 3);
        let answer = run(&channel, true).await.unwrap().unwrap_err();
        assert_eq!(answer.code(), StatusCode::NotFound);
        assert_eq!(attempts(&fake), 1);
        assert_eq!(channel.stats().hedges, 0);
    }

    #[tokio::test(start_paused = true)]
    async fn hedges_stop_at_max_attempts_and_the_deadline_ends_them_all() {
        let (channel, fake) = hedged(&[Step::Stall], 3);
        let options = CallOptions::default().with_deadline(Duration::from_secs(1));
        let answer = channel.call(call(true), &options).await;
        assert_eq!(answer.unwrap_err().kind(), Kind::Timeout);
        assert_eq!(attempts(&fake), 3);
        assert_eq!(dropped(&fake), 3);
        assert_eq!((channel.stats().hedges, channel.stats().hedges_won), (2, 0));
    }

    /// A hedged call sends its next attempt at once after an `Unavailable` answer; others
    /// (with no retries) take it as the answer: one attempt tells that a call was not hedged.
    const UNAVAILABLE_THEN_OK: [Step; 2] = [
        Step::Answer(StatusCode::Unavailable),
        Step::Answer(StatusCode::Ok),
    ];

    fn hedging_once(
        b: super::super::ChannelBuilder,
        policy: HedgingPolicy,
    ) -> super::super::ChannelBuilder {
        b.retry(RetryPolicy::disabled().budget(10.0, 1_000))
            .hedging(policy)
    }

    #[tokio::test(start_paused = true)]
    async fn only_idempotent_calls_are_hedged() {
        let hedging = |b| hedging_once(b, HedgingPolicy::default());
        let (channel, fake) = scripted_with(&UNAVAILABLE_THEN_OK, 1, 1, hedging);
        assert!(run(&channel, true).await.unwrap().is_ok());
        assert_eq!(attempts(&fake), 2);
        let (channel, fake) = scripted_with(&UNAVAILABLE_THEN_OK, 1, 1, hedging);
        run(&channel, false).await.unwrap().unwrap_err();
        assert_eq!(attempts(&fake), 1);
        assert_eq!(channel.stats().hedges, 0);
        // Nor calls that stream their reply.
        let (channel, fake) = scripted_with(&UNAVAILABLE_THEN_OK, 1, 1, hedging);
        let mut streamed = call(true);
        streamed.download = true;
        channel
            .call(streamed, &CallOptions::default())
            .await
            .unwrap()
            .unwrap_err();
        assert_eq!(attempts(&fake), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn an_answer_that_the_host_could_not_take_the_call_starts_the_next_hedge_at_once() {
        // A delay longer than the deadline: only the Busy answer can start the second attempt.
        let (channel, fake) = scripted_with(
            &[Step::Answer(StatusCode::Busy), Step::Answer(StatusCode::Ok)],
            1,
            1,
            |b| b.hedging(HedgingPolicy::default().delay(HedgeDelay::Fixed(Duration::MAX))),
        );
        assert!(run(&channel, true).await.unwrap().is_ok());
        assert_eq!(attempts(&fake), 2);
        assert_eq!(channel.stats().hedges_won, 1);
        // With no attempt left, the last such answer is the call's.
        let (channel, fake) = hedged(&[Step::Answer(StatusCode::Unavailable)], 2);
        let answer = run(&channel, true).await.unwrap().unwrap_err();
        assert_eq!(answer.code(), StatusCode::Unavailable);
        assert_eq!(attempts(&fake), 2);
        assert_eq!(
            channel.stats().retries,
            0,
            "a hedged call is not also retried"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn each_hedge_gets_the_resends_of_an_attempt_that_did_not_run() {
        let steps = [
            Step::Stall,
            Step::NotSent,
            Step::Unprocessed,
            Step::Answer(StatusCode::Ok),
        ];
        let (channel, fake) = hedged(&steps, 2);
        assert!(run(&channel, true).await.unwrap().is_ok());
        assert_eq!(attempts(&fake), 4);
        assert_eq!((channel.stats().hedges, channel.stats().hedges_won), (1, 1));
    }

    #[tokio::test(start_paused = true)]
    async fn no_budget_no_hedge() {
        let (channel, fake) =
            scripted_with(&[Step::Stall, Step::Answer(StatusCode::Ok)], 1, 1, |b| {
                b.retry(RetryPolicy::default().budget(0.0, 0)).hedging(
                    HedgingPolicy::default().delay(HedgeDelay::Fixed(Duration::from_millis(10))),
                )
            });
        let options = CallOptions::default().with_deadline(Duration::from_secs(1));
        let answer = channel.call(call(true), &options).await;
        assert_eq!(answer.unwrap_err().kind(), Kind::Timeout);
        assert_eq!(attempts(&fake), 1);
        let stats = channel.stats();
        assert_eq!((stats.hedges, stats.hedges_refused_by_budget), (0, 1));
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_option_or_an_operation_policy_overrides_the_channels() {
        let steps = UNAVAILABLE_THEN_OK;
        let policy = HedgingPolicy::default();
        let without =
            |b: super::super::ChannelBuilder| b.retry(RetryPolicy::disabled().budget(10.0, 1_000));
        // Hedging for this operation only.
        let (channel, fake) =
            scripted_with(&steps, 1, 1, |b| without(b).hedging_for("S.op", policy));
        assert!(run(&channel, true).await.unwrap().is_ok());
        assert_eq!(attempts(&fake), 2);
        let (channel, fake) = scripted_with(&steps, 1, 1, |b| without(b).hedging_for("op", policy));
        assert!(run(&channel, true).await.unwrap().is_ok());
        assert_eq!(attempts(&fake), 2);
        // Another operation's policy does not apply.
        let (channel, fake) =
            scripted_with(&steps, 1, 1, |b| without(b).hedging_for("other", policy));
        run(&channel, true).await.unwrap().unwrap_err();
        assert_eq!(attempts(&fake), 1);
        // An operation's policy turns the channel's off.
        let (channel, fake) = scripted_with(&steps, 1, 1, |b| {
            hedging_once(b, policy).hedging_for("op", HedgingPolicy::disabled())
        });
        run(&channel, true).await.unwrap().unwrap_err();
        assert_eq!(attempts(&fake), 1);
        // A call's options turn the channel's policy off, or on.
        let (channel, fake) = scripted_with(&steps, 1, 1, |b| hedging_once(b, policy));
        let off = CallOptions::default().with_hedging(HedgingPolicy::disabled());
        channel.call(call(true), &off).await.unwrap().unwrap_err();
        assert_eq!(attempts(&fake), 1);
        let (channel, fake) = scripted_with(&steps, 1, 1, without);
        let on = CallOptions::default().with_hedging(policy);
        assert!(channel.call(call(true), &on).await.unwrap().is_ok());
        assert_eq!(attempts(&fake), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_percentile_delay_waits_for_enough_samples() {
        let policy = HedgingPolicy::default().delay(HedgeDelay::Percentile(50.0));
        let (channel, fake) =
            scripted_with(&[Step::Answer(StatusCode::Ok)], 1, 1, |b| b.hedging(policy));
        for _ in 0..20 {
            assert!(run(&channel, true).await.unwrap().is_ok());
        }
        assert_eq!(attempts(&fake), 20);
        // Now the channel knows its latency (zero here): a stalled call is hedged.
        fake.0
            .steps
            .lock()
            .unwrap()
            .extend([Step::Stall, Step::Answer(StatusCode::Ok)]);
        tokio::time::advance(Duration::from_millis(100)).await;
        assert!(run(&channel, true).await.unwrap().is_ok());
        assert_eq!(attempts(&fake), 22);
        assert_eq!(channel.stats().hedges_won, 1);
    }

    fn call(idempotent: bool) -> Outgoing {
        Outgoing {
            service: "S",
            operation: "op",
            one_way: false,
            metadata: Metadata::new(),
            body: Bytes::from_static(b"\x80"),
            compression: None,
            accepts_compressed: false,
            upload: None,
            download: false,
            idempotent,
            fresh: false,
            grpc: None,
        }
    }

    async fn run(channel: &Channel, idempotent: bool) -> Answer {
        channel
            .call(call(idempotent), &CallOptions::default())
            .await
    }

    fn attempts(fake: &Fake) -> u32 {
        *fake.0.attempts.lock().unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_never_sent_is_tried_on_three_connections_then_fails_as_a_lost_connection() {
        let (channel, fake) = scripted(&[Step::NotSent], 1, 1);
        let answer = run(&channel, false).await;
        assert_eq!(attempts(&fake), 1 + UNRUN_RESENDS);
        assert_eq!(answer.unwrap_err().kind(), Kind::Connection);
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_every_connection_refuses_unprocessed_ends_shutting_down() {
        let (channel, fake) = scripted(&[Step::Unprocessed], 1, 1);
        let answer = run(&channel, false).await;
        assert_eq!(attempts(&fake), 1 + UNRUN_RESENDS);
        assert_eq!(
            answer.unwrap().unwrap_err().code(),
            StatusCode::ShuttingDown
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_that_finds_no_connection_tries_each_host_once_idempotent_or_not() {
        let (channel, fake) = scripted(&[Step::NoConnection], 4, 1);
        let answer = run(&channel, false).await;
        assert_eq!(attempts(&fake), 4);
        assert_eq!(answer.unwrap_err().kind(), Kind::Connect);
        // A host that answers after the others refused connections ends the call there.
        let (channel, fake) = scripted(&[Step::NoConnection, Step::Answer(StatusCode::Ok)], 4, 1);
        assert!(run(&channel, false).await.unwrap().is_ok());
        assert_eq!(attempts(&fake), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn only_idempotent_calls_are_retried_after_an_answer() {
        let busy = [Step::Answer(StatusCode::Unavailable)];
        let (channel, fake) = scripted(&busy, 1, 4);
        let answer = run(&channel, false).await;
        assert_eq!(
            attempts(&fake),
            1,
            "a call that may have run is not sent again"
        );
        assert_eq!(answer.unwrap().unwrap_err().code(), StatusCode::Unavailable);
        let (channel, fake) = scripted(&busy, 1, 4);
        run(&channel, true).await.unwrap().unwrap_err();
        assert_eq!(attempts(&fake), 4);
        assert_eq!(channel.stats().retries, 3);
        // An answer that does not say the host could not take the call is final.
        let (channel, fake) = scripted(&[Step::Answer(StatusCode::NotFound)], 1, 4);
        run(&channel, true).await.unwrap().unwrap_err();
        assert_eq!(attempts(&fake), 1);
    }

    /// A connection lost under an idempotent call on a balanced channel: the first retry goes
    /// to another host at once, the next after the backoff; with one host, the first waits too.
    #[tokio::test(start_paused = true)]
    async fn a_call_whose_connection_died_moves_to_another_host_at_once() {
        let backoff = |b: super::super::ChannelBuilder| {
            let retry = RetryPolicy::default()
                .max_attempts(3)
                .backoff(Duration::from_secs(1), Duration::from_secs(1))
                .budget(10.0, 1_000_000);
            b.retry(retry)
        };
        let lost = [Step::Lost, Step::Answer(StatusCode::Ok)];
        let (channel, fake) = scripted_with(&lost, 3, 3, backoff);
        let start = tokio::time::Instant::now();
        run(&channel, true).await.unwrap().unwrap();
        assert_eq!(attempts(&fake), 2);
        assert_eq!(start.elapsed(), Duration::ZERO, "no backoff");
        let (channel, fake) = scripted_with(
            &[Step::Lost, Step::Lost, Step::Answer(StatusCode::Ok)],
            3,
            3,
            backoff,
        );
        let start = tokio::time::Instant::now();
        run(&channel, true).await.unwrap().unwrap();
        assert_eq!(attempts(&fake), 3);
        // The backoff is random below its ceiling (full jitter), but not nothing.
        assert!(
            start.elapsed() > Duration::ZERO,
            "the second retry backs off"
        );
        let (channel, _) = scripted_with(&lost, 1, 3, backoff);
        let start = tokio::time::Instant::now();
        run(&channel, true).await.unwrap().unwrap();
        assert!(start.elapsed() > Duration::ZERO, "one host: the backoff");
    }

    /// The worst case the module docs state: 1 + UNRUN_RESENDS + (hosts − 1) +
    /// (max_attempts − 1) attempts, for a call that meets every reason in turn.
    #[tokio::test(start_paused = true)]
    async fn one_call_makes_at_most_the_attempts_the_docs_state() {
        let (hosts, max_attempts) = (3usize, 4u32);
        let mut steps = vec![Step::Unprocessed, Step::NotSent];
        steps.extend(std::iter::repeat_n(Step::NoConnection, hosts));
        steps.push(Step::Answer(StatusCode::Unavailable));
        let (channel, fake) = scripted(&steps, hosts, max_attempts);
        let answer = run(&channel, true).await;
        let worst = 1 + UNRUN_RESENDS + (hosts as u32 - 1) + (max_attempts - 1);
        assert_eq!(attempts(&fake), worst);
        assert_eq!(answer.unwrap().unwrap_err().code(), StatusCode::Unavailable);
        // In another order, the reasons' re-sends still add up to no more.
        let mut steps = vec![Step::NoConnection; hosts];
        steps.extend([Step::NotSent, Step::Unprocessed, Step::NotSent]);
        steps.push(Step::Answer(StatusCode::Busy));
        let (channel, fake) = scripted(&steps, hosts, max_attempts);
        let answer = run(&channel, true).await;
        assert_eq!(answer.unwrap().unwrap_err().code(), StatusCode::Busy);
        assert!(attempts(&fake) <= worst, "{} attempts", attempts(&fake));
    }
}
