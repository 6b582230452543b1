//! One channel, many hosts: a [`ClientTransport`] that spreads calls over the addresses of
//! several URLs ([`Channel::balanced`](crate::Channel::balanced)).
//!
//! Modelled on tower's `balance::p2c` over a `discover` stream and grpc-go's DNS resolver:
//!
//! - **Discovery.** Each URL's host name is resolved to all its addresses (a Kubernetes
//!   headless Service's name gives every ready pod); each address is a *member* with its own
//!   binding (its own connection). Names are resolved again every
//!   [`resolve_interval`](crate::client::ChannelBuilder::resolve_interval) and at once after a connect
//!   failure. A member whose address disappears is dropped once its calls finish; members that
//!   stay keep their connections.
//! - **Balancing.** Power of two choices: two members drawn at random, the call goes to the one
//!   with fewer calls in flight. A hedge (see `client/hedge.rs`) is drawn among the members
//!   its call's other attempts did not go to, while such a member is live.
//! - **Ejection.** A member whose connection could not be made or broke (a connect error, a
//!   lost connection, or `Unavailable` from a dead-connection verdict), or that answered
//!   `ShuttingDown` (it is draining), is left out for 1 s,
//!   doubling with each ejection in a row up to 30 s, with ±20 % jitter: that is also how
//!   reconnects to a host that is down back off. A call it answers clears its record. If every
//!   member is ejected, all are used again (a channel never refuses to try).

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use crate::bindings::{
    self, Again, Answer, Attempt, BoxFuture, ClientSettings, ClientTransport, ConnCounts, Outgoing,
    TriedHosts,
};
use crate::core::error::{Error, Kind};
use crate::core::random::{random, unit};
use crate::core::status::StatusCode;
use crate::transport::Endpoint;

/// The first ejection's length; each further one in a row doubles it.
const EJECT_BASE: Duration = Duration::from_secs(1);
/// The longest ejection.
const EJECT_MAX: Duration = Duration::from_secs(30);

/// One address of one URL, with its own binding.
#[derive(Debug)]
struct Member {
    endpoint: Endpoint,
    binding: bindings::Client,
    in_flight: AtomicUsize,
    /// Until when it is left out (ms since the balancer's start; 0: never ejected).
    ejected_until_ms: AtomicU64,
    /// Ejections in a row (cleared by a call it answers).
    ejections: AtomicU32,
}

/// A channel's members and how they were found.
#[derive(Debug)]
pub(crate) struct Balancer {
    targets: Vec<Endpoint>,
    settings: ClientSettings,
    resolve_interval: Duration,
    members: RwLock<Arc<Vec<Arc<Member>>>>,
    /// When the names were last resolved (or a resolution began).
    resolved_at: Mutex<Option<Instant>>,
    /// Serialises resolutions.
    resolving: tokio::sync::Mutex<()>,
    /// Connection counts of members already dropped.
    gone: Mutex<ConnCounts>,
    start: Instant,
}

impl Balancer {
    pub(crate) fn new(
        targets: Vec<Endpoint>,
        settings: ClientSettings,
        resolve_interval: Duration,
    ) -> Balancer {
        Balancer {
            targets,
            settings,
            resolve_interval,
            members: RwLock::new(Arc::new(Vec::new())),
            resolved_at: Mutex::new(None),
            resolving: tokio::sync::Mutex::new(()),
            gone: Mutex::new(ConnCounts {
                opened: 0,
                closed: 0,
                open: 0,
                sent_early: 0,
            }),
            start: Instant::now(),
        }
    }

    fn members(&self) -> Arc<Vec<Arc<Member>>> {
        self.members
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn now_ms(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }

    /// Resolves every target and updates the members; keeps the old ones if nothing resolves.
    async fn resolve(&self) -> Result<(), Error> {
        let _one = self.resolving.lock().await;
        self.resolve_locked().await
    }

    /// [`Balancer::resolve`], for a caller holding `resolving`.
    async fn resolve_locked(&self) -> Result<(), Error> {
        *self.resolved_at.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
        // Each address, with the URL it came from.
        let mut found: Vec<(Endpoint, &Endpoint)> = Vec::new();
        let mut last_error = None;
        for target in &self.targets {
            match expand(target).await {
                Ok(endpoints) => {
                    for e in endpoints {
                        if !found.iter().any(|(f, _)| *f == e) {
                            found.push((e, target));
                        }
                    }
                }
                Err(e) => last_error = Some(e),
            }
        }
        if found.is_empty() {
            return Err(
                last_error.unwrap_or_else(|| Error::new(Kind::Connect, "no address to connect to"))
            );
        }
        let old = self.members();
        let mut next = Vec::with_capacity(found.len());
        for (endpoint, target) in found {
            match old.iter().find(|m| m.endpoint == endpoint) {
                Some(m) => next.push(m.clone()),
                None => next.push(Arc::new(Member {
                    binding: bindings::client(
                        endpoint.clone(),
                        self.member_settings(&endpoint, target)?,
                    )?,
                    endpoint,
                    in_flight: AtomicUsize::new(0),
                    ejected_until_ms: AtomicU64::new(0),
                    ejections: AtomicU32::new(0),
                })),
            }
        }
        // Members no longer found: their counts are kept; they close once their calls finish.
        {
            let mut gone = self.gone.lock().unwrap_or_else(|e| e.into_inner());
            for m in old
                .iter()
                .filter(|m| !next.iter().any(|n| Arc::ptr_eq(n, m)))
            {
                let c = m.binding.transport().counts();
                m.binding.transport().close();
                gone.opened += c.opened;
                gone.closed += c.opened;
            }
        }
        *self.members.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(next);
        Ok(())
    }

    /// The settings for one member: a TLS member reached by address still checks the
    /// certificate against the name in its URL.
    fn member_settings(
        &self,
        endpoint: &Endpoint,
        target: &Endpoint,
    ) -> Result<ClientSettings, Error> {
        #[allow(unused_mut)]
        let mut settings = self.settings.clone();
        #[cfg(feature = "tls")]
        if endpoint.is_tls() && target.host() != endpoint.host() {
            let tls = match settings.tls.take() {
                Some(tls) => tls,
                None => crate::tls::ClientTls::system_roots()?,
            };
            settings.tls = Some(tls.with_server_name_if_unset(target.host()));
        }
        let _ = (endpoint, target);
        Ok(settings)
    }

    /// Resolves now if the names were never resolved; in the background if they are stale.
    async fn fresh_members(self: &Arc<Self>) -> Result<Arc<Vec<Arc<Member>>>, Error> {
        let resolved_at = *self.resolved_at.lock().unwrap_or_else(|e| e.into_inner());
        match resolved_at {
            Some(at) if at.elapsed() >= self.resolve_interval => self.resolve_soon(),
            Some(_) => {}
            None => {}
        }
        let members = self.members();
        if !members.is_empty() {
            return Ok(members);
        }
        // No member yet (the first calls, or every resolution so far failed): resolve now,
        // once for all the calls waiting here.
        let _one = self.resolving.lock().await;
        if self.members().is_empty() {
            self.resolve_locked().await?;
        }
        Ok(self.members())
    }

    /// Starts a resolution in the background (unless one ran in the last second).
    fn resolve_soon(self: &Arc<Self>) {
        {
            let mut at = self.resolved_at.lock().unwrap_or_else(|e| e.into_inner());
            if at.is_some_and(|t| t.elapsed() < Duration::from_secs(1)) {
                return;
            }
            *at = Some(Instant::now());
        }
        let me = Arc::downgrade(self);
        tokio::spawn(async move {
            if let Some(me) = me.upgrade() {
                if let Err(e) = me.resolve().await {
                    log::warn!("resolving {:?}: {e}", me.targets);
                }
            }
        });
    }

    /// Two members at random (those not ejected, or all if every one is), the one with fewer
    /// calls in flight. For a hedge, the live members not in `tried` if there are any.
    fn pick(&self, members: &[Arc<Member>], tried: Option<&[usize]>) -> Option<Arc<Member>> {
        let now = self.now_ms();
        let mut live: Vec<&Arc<Member>> = members
            .iter()
            .filter(|m| m.ejected_until_ms.load(Ordering::Relaxed) <= now)
            .collect();
        if let Some(tried) = tried {
            let untried = |m: &&Arc<Member>| !tried.contains(&(Arc::as_ptr(m) as usize));
            if live.iter().any(untried) {
                live.retain(untried);
            }
        }
        let pool: Vec<&Arc<Member>> = if live.is_empty() {
            members.iter().collect()
        } else {
            live
        };
        match pool.len() {
            0 => None,
            1 => Some(pool[0].clone()),
            n => {
                let r = random();
                let a = (r % n as u64) as usize;
                let b = (a + 1 + ((r >> 32) % (n as u64 - 1)) as usize) % n;
                let (ma, mb) = (pool[a], pool[b]);
                let pick = if mb.in_flight.load(Ordering::Relaxed)
                    < ma.in_flight.load(Ordering::Relaxed)
                {
                    mb
                } else {
                    ma
                };
                Some(pick.clone())
            }
        }
    }

    /// Records how a member's attempt went: a connection failure ejects it (with backoff), an
    /// answer clears its record. A call it gave back unrun (a GoAway, say) tells nothing.
    fn record(self: &Arc<Self>, member: &Member, attempt: &Attempt) {
        let failed = match attempt {
            Attempt::Answered(answer) => failure(answer),
            Attempt::Again {
                why: Again::NoConnection(_),
                ..
            } => Some(true),
            Attempt::Again { .. } => return,
        };
        match failed {
            Some(connect) => self.eject(member, connect),
            None => {
                if member.ejections.load(Ordering::Relaxed) > 0 {
                    member.ejections.store(0, Ordering::Relaxed);
                }
            }
        }
    }

    /// Leaves `member` out for a while: 1 s, doubling with each ejection in a row, up to 30 s,
    /// ±20 %. After a connect failure the names are resolved again (the address may be gone).
    fn eject(self: &Arc<Self>, member: &Member, connect: bool) {
        let n = member.ejections.fetch_add(1, Ordering::Relaxed).min(16);
        let length = EJECT_BASE
            .saturating_mul(1 << n)
            .min(EJECT_MAX)
            .mul_f64(0.8 + 0.4 * unit(random()));
        let until = self.now_ms() + length.as_millis() as u64;
        member.ejected_until_ms.fetch_max(until, Ordering::Relaxed);
        log::debug!(
            "{}: left out for {} ms after a connection failure",
            member.endpoint,
            length.as_millis()
        );
        if connect {
            self.resolve_soon();
        }
    }

    /// One attempt of the call on a member (see [`Balancer::pick`]). A member no connection
    /// could be made to is left out for a while, so that the channel's next attempt (its
    /// attempt loop sends such a call to another member, idempotent or not: nothing was sent)
    /// goes elsewhere.
    /// A hedge (`tried`: the members its call's other attempts went to) goes to another
    /// member while one is live, and adds its own to `tried`.
    async fn attempt(
        self: Arc<Self>,
        call: &mut Outgoing,
        deadline: Instant,
        tried: Option<&TriedHosts>,
    ) -> Attempt {
        let members = match self.fresh_members().await {
            Ok(members) => members,
            Err(e) => return Attempt::Answered(Err(e)),
        };
        let picked = match tried {
            None => self.pick(&members, None),
            Some(tried) => {
                let mut tried = tried.lock().unwrap_or_else(|e| e.into_inner());
                let picked = self.pick(&members, Some(&tried));
                if let Some(m) = &picked {
                    tried.push(Arc::as_ptr(m) as usize);
                }
                picked
            }
        };
        let Some(member) = picked else {
            return Attempt::Answered(Err(Error::new(Kind::Connect, "no host to call")));
        };
        member.in_flight.fetch_add(1, Ordering::Relaxed);
        let attempt = {
            let _in_flight = InFlight(&member.in_flight);
            member.binding.attempt(call, deadline, None).await
        };
        self.record(&member, &attempt);
        attempt
    }
}

/// Counts a call in flight on a member until dropped (also when the caller gives up).
struct InFlight<'a>(&'a AtomicUsize);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Whether an answer says the member should be left out for a while: `Some(true)` if its
/// connection could not be made, `Some(false)` if it broke, was found dead, or the host is
/// shutting down (so that the next calls go to the others before DNS drops it).
fn failure(answer: &Answer) -> Option<bool> {
    match answer {
        Err(e) => match e.kind() {
            Kind::Connect => Some(true),
            Kind::Connection
            | Kind::Status(StatusCode::Unavailable)
            | Kind::Status(StatusCode::ShuttingDown) => Some(false),
            _ => None,
        },
        Ok(Err(status)) if status.code() == StatusCode::ShuttingDown => Some(false),
        Ok(_) => None,
    }
}

/// Every address `target` resolves to, as endpoints of its scheme (a Unix socket is itself).
async fn expand(target: &Endpoint) -> Result<Vec<Endpoint>, Error> {
    let Some(authority) = target.authority() else {
        return Ok(vec![target.clone()]);
    };
    let addrs = tokio::net::lookup_host(authority).await.map_err(|e| {
        Error::new(Kind::Connect, format!("{target}: cannot resolve: {e}")).with_source(e)
    })?;
    let mut out: Vec<Endpoint> = Vec::new();
    for addr in addrs {
        let e = target.with_authority(addr.to_string());
        if !out.contains(&e) {
            out.push(e);
        }
    }
    Ok(out)
}

/// The balancer as a channel's transport.
#[derive(Debug)]
pub(crate) struct Balanced(pub(crate) Arc<Balancer>);

impl ClientTransport for Balanced {
    fn attempt<'a>(&'a self, call: &'a mut Outgoing, deadline: Instant) -> BoxFuture<'a, Attempt> {
        Box::pin(self.0.clone().attempt(call, deadline, None))
    }

    fn attempt_hedge<'a>(
        &'a self,
        call: &'a mut Outgoing,
        deadline: Instant,
        tried: &'a TriedHosts,
    ) -> BoxFuture<'a, Attempt> {
        Box::pin(self.0.clone().attempt(call, deadline, Some(tried)))
    }

    fn hosts(&self) -> usize {
        self.0.members().len().max(1)
    }

    fn open(&self) -> BoxFuture<'_, Result<(), Error>> {
        Box::pin(async move {
            self.0.resolve().await?;
            let members = self.0.members();
            let mut last = None;
            let mut opened = 0;
            for m in members.iter() {
                match m.binding.transport().open().await {
                    Ok(()) => opened += 1,
                    Err(e) => {
                        self.0.eject(m, true);
                        last = Some(e);
                    }
                }
            }
            match (opened, last) {
                (0, Some(e)) => Err(e),
                _ => Ok(()),
            }
        })
    }

    fn close(&self) {
        for m in self.0.members().iter() {
            m.binding.transport().close();
        }
    }

    fn is_connected(&self) -> bool {
        self.0
            .members()
            .iter()
            .any(|m| m.binding.transport().is_connected())
    }

    fn counts(&self) -> ConnCounts {
        let gone = *self.0.gone.lock().unwrap_or_else(|e| e.into_inner());
        self.0
            .members()
            .iter()
            .map(|m| m.binding.transport().counts())
            .fold(gone, |a, c| ConnCounts {
                opened: a.opened + c.opened,
                closed: a.closed + c.closed,
                open: a.open + c.open,
                sent_early: a.sent_early + c.sent_early,
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::ClientConfig;

    fn at(m: &Arc<Member>) -> usize {
        Arc::as_ptr(m) as usize
    }

    /// Power of two choices alone would send a hedge to the member its call runs on when that
    /// one is the least busy; the hedge's pick leaves it out while another live member exists.
    #[tokio::test]
    async fn a_hedge_goes_to_a_member_its_call_has_not_tried_while_one_is_live() {
        let targets = [
            "tcp://127.0.0.1:1",
            "tcp://127.0.0.1:2",
            "tcp://127.0.0.1:3",
        ]
        .map(|u| Endpoint::parse(u).unwrap())
        .to_vec();
        let settings = ClientConfig::default().settings("tcp");
        let b = Arc::new(Balancer::new(targets, settings, Duration::from_secs(30)));
        b.resolve().await.unwrap();
        let members = b.members();
        assert_eq!(members.len(), 3);
        // The untried member is the busiest: a plain pick never takes it.
        members[2].in_flight.store(5, Ordering::Relaxed);
        for _ in 0..100 {
            assert_ne!(at(&b.pick(&members, None).unwrap()), at(&members[2]));
        }
        let tried = [at(&members[0]), at(&members[1])];
        for _ in 0..100 {
            let m = b.pick(&members, Some(&tried)).unwrap();
            assert_eq!(at(&m), at(&members[2]));
        }
        // Every member tried: any of them.
        let all = [tried[0], tried[1], at(&members[2])];
        assert!(b.pick(&members, Some(&all)).is_some());
        // The untried member left out (ejected): the tried ones again.
        b.eject(&members[2], false);
        for _ in 0..100 {
            let m = b.pick(&members, Some(&tried)).unwrap();
            assert_ne!(at(&m), at(&members[2]));
        }
    }
}
