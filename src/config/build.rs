//! Building a configuration's limiters, policies and routes; a running limiter is
//! taken over, not rebuilt, where its limit did not change ([`super::live`] decides).

use super::error::ConfigError;
use super::names::Registered;
#[cfg(feature = "redis")]
use super::schema::FailureSpec;
use super::schema::{
    AlgorithmName, CheckSpec, ClientAddressSpec, CostSpec, Document, KeySpec, LimitSpec,
    MemorySpec, MissingKeySpec, OverflowSpec, PolicySpec, StoreSpec,
};
use crate::algorithm::{Algorithm, FromQuota, Reconfigurable};
use crate::http::{HeaderKey, PeerIp, RateLimitLayer, RealIp, cost_in_header};
use crate::policy::{Check, KeyExtractor, Limit, MissingKey, PerRequest, Policy, PolicyCheck};
use crate::{
    Clock, FixedWindow, Gcra, KeyRef, KeyedLimiter, Overflow, Quota, QuotaError, RateLimiter,
    SlidingLog, SlidingWindowCounter, TokenBucket,
};
use http::HeaderName;
use http::request::Parts;
use std::borrow::Borrow;
use std::collections::BTreeMap;
use std::fmt;
use std::hash::Hash;
use std::marker::PhantomData;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

/// The key extractors a configuration can name, and how the client's address is
/// found: the program's part of a configuration.
///
/// A limit keyed `{ extractor = "tenant" }` takes its keys from the extractor
/// registered as `"tenant"` ([`register`](Self::register)); one keyed `"client_address"` from
/// the connection's peer address ([`peer_address`](Self::peer_address) says where the
/// server records it), or behind the file's `trusted_proxies` from the header they
/// append to ([`RealIp`]).
#[derive(Clone)]
pub struct Extractors {
    named: BTreeMap<String, Arc<dyn LendText>>,
    estimates: BTreeMap<String, Estimate>,
    client: ClientAddress,
}

/// A request's cost, estimated from its head ([`Extractors::estimate`]).
type Estimate = Arc<dyn Fn(&Parts) -> u32 + Send + Sync>;

/// An estimate as one check holds it (a `Box` of a closure is itself a closure, which
/// [`Check::cost_with`] takes).
type BoxedEstimate = Box<dyn Fn(&Parts) -> u32 + Send + Sync>;

/// A check's cost, its estimate found among those registered.
pub(crate) enum Costing {
    Fixed(u32),
    Estimated(Estimate),
}

/// Makes the client-address extractor a file's `client_address` table describes.
type ClientAddress = Arc<dyn Fn(&ClientAddressSpec) -> Arc<dyn FindIp> + Send + Sync>;

/// The registered names.
impl fmt::Debug for Extractors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Extractors")
            .field("named", &self.named.keys().collect::<Vec<_>>())
            .field("estimates", &self.estimates.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl Default for Extractors {
    fn default() -> Self {
        Self::new()
    }
}

impl Extractors {
    /// No named extractor; the peer address from a `SocketAddr` request extension
    /// (as [`PeerIp::new`]).
    pub fn new() -> Self {
        Self {
            named: BTreeMap::new(),
            estimates: BTreeMap::new(),
            client: Arc::new(|spec| client_address(|peer: &SocketAddr| *peer, spec)),
        }
    }

    /// Registers `extractor` as `name`: a limit keyed `{ extractor = "NAME" }` finds
    /// its keys with it. Its key is text (`str`, `String`, anything `AsRef<str>`),
    /// lent to the limiter without a copy.
    pub fn register<E>(mut self, name: impl Into<String>, extractor: E) -> Self
    where
        E: KeyExtractor<Parts> + 'static,
        E::Key: AsRef<str>,
    {
        self.named.insert(name.into(), Arc::new(extractor));
        self
    }

    /// The peer address from a request extension of type `T`: with axum,
    /// `peer_address(|info: &ConnectInfo<SocketAddr>| info.0)`.
    pub fn peer_address<T: Send + Sync + 'static>(mut self, peer: fn(&T) -> SocketAddr) -> Self {
        self.client = Arc::new(move |spec| client_address(peer, spec));
        self
    }

    /// Registers `estimate` as `name`: a check whose cost is `{ estimate = "NAME" }`
    /// takes what it makes of each request's head (the tokens a prompt will use, from
    /// its length, say) — usually a settled check's estimate, charged at what the
    /// response reports ([`Check::cost_with`](crate::policy::Check::cost_with)). It is
    /// made again from the same request when the check is settled, so it must give
    /// the same answer for the same request; an estimate above the limit's capacity
    /// is refused as exceeding it.
    pub fn estimate(
        mut self,
        name: impl Into<String>,
        estimate: impl Fn(&Parts) -> u32 + Send + Sync + 'static,
    ) -> Self {
        self.estimates.insert(name.into(), Arc::new(estimate));
        self
    }

    /// The names of the extractors and estimates registered.
    pub(crate) fn registered(&self) -> Registered {
        Registered {
            extractors: self.named.keys().cloned().collect(),
            estimates: self.estimates.keys().cloned().collect(),
        }
    }
}

/// The client's address as `spec` says to find it, from the peer address `peer`
/// reads.
fn client_address<T: Send + Sync + 'static>(
    peer: fn(&T) -> SocketAddr,
    spec: &ClientAddressSpec,
) -> Arc<dyn FindIp> {
    if spec.trusted_proxies.is_empty() {
        return Arc::new(PeerIp::from_extension(peer).ipv6_prefix(spec.ipv6_prefix.0));
    }
    let real = RealIp::from_extension(spec.header.into(), peer).ipv6_prefix(spec.ipv6_prefix.0);
    let real = spec
        .trusted_proxies
        .iter()
        .fold(real, |real, range| real.trust(range.0));
    Arc::new(real)
}

/// A text key's extractor behind a pointer: lends the key to a callback of no
/// particular type (a [`KeyExtractor`]'s own method is generic, so not object-safe).
pub(crate) trait LendText: Send + Sync {
    fn lend(&self, request: &Parts, with: &mut dyn FnMut(&str));
}

impl<E> LendText for E
where
    E: KeyExtractor<Parts>,
    E::Key: AsRef<str>,
{
    fn lend(&self, request: &Parts, with: &mut dyn FnMut(&str)) {
        self.with_key(request, |key| with(key.as_ref()));
    }
}

/// The client's address behind a pointer.
trait FindIp: Send + Sync {
    fn find(&self, request: &Parts) -> Option<IpAddr>;
}

impl<T: Send + Sync + 'static> FindIp for PeerIp<T> {
    fn find(&self, request: &Parts) -> Option<IpAddr> {
        self.with_key(request, |ip| *ip)
    }
}

impl<T: Send + Sync + 'static> FindIp for RealIp<T> {
    fn find(&self, request: &Parts) -> Option<IpAddr> {
        self.with_key(request, |ip| *ip)
    }
}

/// A text key: a header's value, or a registered extractor's.
#[derive(Clone)]
pub(crate) enum TextKey {
    Header(Arc<HeaderKey>),
    Named(Arc<dyn LendText>),
}

impl KeyExtractor<Parts> for TextKey {
    type Key = str;

    #[inline]
    fn with_key<T>(&self, request: &Parts, with: impl FnOnce(&str) -> T) -> Option<T> {
        match self {
            TextKey::Header(header) => header.with_key(request, with),
            TextKey::Named(named) => {
                let (mut with, mut answer) = (Some(with), None);
                named.lend(request, &mut |key| {
                    if let Some(with) = with.take() {
                        answer = Some(with(key));
                    }
                });
                answer
            }
        }
    }
}

/// The client's address.
#[derive(Clone)]
pub(crate) struct IpKey(Arc<dyn FindIp>);

impl KeyExtractor<Parts> for IpKey {
    type Key = IpAddr;

    fn with_key<T>(&self, request: &Parts, with: impl FnOnce(&IpAddr) -> T) -> Option<T> {
        self.0.find(request).map(|ip| with(&ip))
    }
}

/// A shared limit's key, as the bytes Redis keys it by: a text key's UTF-8, an
/// address's octets (4 for IPv4, 16 for IPv6).
#[cfg(feature = "redis")]
enum BytesKey {
    Text(TextKey),
    Ip(IpKey),
}

#[cfg(feature = "redis")]
impl KeyExtractor<Parts> for BytesKey {
    type Key = [u8];

    fn with_key<T>(&self, request: &Parts, with: impl FnOnce(&[u8]) -> T) -> Option<T> {
        match self {
            BytesKey::Text(text) => text.with_key(request, |key| with(key.as_bytes())),
            BytesKey::Ip(ip) => ip.with_key(request, |ip| match ip {
                IpAddr::V4(v4) => with(&v4.octets()),
                IpAddr::V6(v6) => with(&v6.octets()),
            }),
        }
    }
}

/// Publishes a new quota on a running limiter and answers the limiter under it: what
/// the new configuration's checks are made on (its requests move the keys they meet
/// to the new quota; the old configuration's keep theirs for keys not moved yet:
/// [`crate::per_key::Pinned`]).
pub(crate) type Requota = Arc<dyn Fn(Quota) -> Limiter + Send + Sync>;

/// [`Requota`] before the key's extractor is known.
type RequotaKeyed<E> = Arc<dyn Fn(Quota) -> Arc<dyn MakeCheck<E>> + Send + Sync>;

/// A limiter, by where its key is found: in process, what makes its checks.
#[derive(Clone)]
pub(crate) enum Limiter {
    /// Keyed by this header's value.
    Header(Arc<dyn MakeCheck<TextKey>>, HeaderName),
    /// Keyed by the registered extractor of this name.
    Extractor(Arc<dyn MakeCheck<TextKey>>, String),
    /// Keyed by the client's address.
    Ip(Arc<dyn MakeCheck<IpKey>>),
    /// In Redis, keyed as the spec says.
    #[cfg(feature = "redis")]
    Shared(Arc<dyn crate::policy::SharedLimiter>),
}

/// Makes an in-process limit's checks on its limiter as the limiter's own type, so
/// that a check asks it by static calls, inlined, rather than through
/// [`DynRateLimiter`](crate::DynRateLimiter)'s vtable: the policy holds each check
/// behind a `dyn` of its own already, and that one erases the limiter's type. (The
/// second dynamic call cost a request about 29 instructions, ~0.6 % of one through
/// the layer: results/config-reload.md.)
pub(crate) trait MakeCheck<E>: Send + Sync {
    /// The check `name` on this limiter under `limit`, its keys found by `key`, at
    /// `cost`, with `spec`'s mode and missing-key treatment.
    fn check(
        &self,
        name: &str,
        limit: Limit,
        key: E,
        spec: &CheckSpec,
        cost: Costing,
    ) -> PolicyCheck<Parts>;
}

/// A keyed limiter `L`, keyed by `K`.
struct Keyed<L, K>(Arc<L>, PhantomData<fn() -> K>);

impl<L, K, E> MakeCheck<E> for Keyed<L, K>
where
    L: RateLimiter<K> + Send + Sync + 'static,
    K: Borrow<E::Key> + Send + Sync + 'static,
    E: KeyExtractor<Parts> + 'static,
    E::Key: KeyRef<K>,
{
    fn check(
        &self,
        name: &str,
        limit: Limit,
        key: E,
        spec: &CheckSpec,
        cost: Costing,
    ) -> PolicyCheck<Parts> {
        finish(
            Check::new(name, Arc::clone(&self.0), limit, key),
            spec,
            cost,
        )
    }
}

/// A limit's running limiter, under this configuration's quota: what it was built
/// from, and how its quota changes (`None`: an algorithm whose keys cannot move).
#[derive(Clone)]
pub(crate) struct BuiltLimit {
    pub(crate) spec: LimitSpec,
    pub(crate) limiter: Limiter,
    pub(crate) requota: Option<Requota>,
}

/// Makes limiters on one clock (the clock's type is erased here).
pub(crate) trait Make: Send + Sync {
    fn make(&self, name: &str, spec: &LimitSpec) -> Result<BuiltLimit, String>;
}

/// Limiters on `C`.
pub(crate) struct OnClock<C>(pub(crate) C);

impl<C: Clock + Clone + 'static> Make for OnClock<C> {
    fn make(&self, name: &str, spec: &LimitSpec) -> Result<BuiltLimit, String> {
        if let Some(store) = &spec.store {
            return shared(name, spec, store);
        }
        let text = || keyed::<String, TextKey, C>(name, spec, &self.0);
        let (limiter, requota) = match &spec.key {
            KeySpec::ClientAddress => keyed::<IpAddr, IpKey, C>(name, spec, &self.0)
                .map(|made| wrapped(made, Limiter::Ip)),
            KeySpec::Header(header) => {
                let header = header.0.clone();
                text().map(|made| wrapped(made, move |make| Limiter::Header(make, header.clone())))
            }
            KeySpec::Extractor(extractor) => {
                let extractor = extractor.0.clone();
                text().map(|made| {
                    wrapped(made, move |make| {
                        Limiter::Extractor(make, extractor.clone())
                    })
                })
            }
        }
        .map_err(|error| error.to_string())?;
        Ok(BuiltLimit {
            spec: spec.clone(),
            limiter,
            requota,
        })
    }
}

/// A limiter in Redis under the prefix `turnstile:NAME:` (its state is Redis's, so
/// its quota cannot change while it runs: no `Requota`). Connects lazily.
#[cfg(feature = "redis")]
fn shared(name: &str, spec: &LimitSpec, store: &StoreSpec) -> Result<BuiltLimit, String> {
    use crate::redis::lease::RedisLeasedTokenBucket;
    use crate::redis::{FailurePolicy, RedisFixedWindow, RedisTokenBucket};
    let failure = match store.failure {
        FailureSpec::Closed => FailurePolicy::Closed,
        FailureSpec::Open => FailurePolicy::Open,
    };
    let (quota, prefix, url) = (
        spec.quota.quota,
        format!("turnstile:{name}:"),
        store.redis.as_str(),
    );
    let limiter: Arc<dyn crate::policy::SharedLimiter> = match (spec.algorithm, &store.lease) {
        (AlgorithmName::FixedWindow, _) => {
            // As the in-process fixed window reads a quota: `capacity` per window of
            // `capacity` intervals.
            let window = quota
                .refill_every()
                .checked_mul(quota.capacity())
                .ok_or("the fixed window's window (capacity x interval) is too long")?;
            let builder =
                RedisFixedWindow::builder(quota.capacity(), window, failure).prefix(prefix);
            Arc::new(builder.connect(url).map_err(|error| error.to_string())?)
        }
        // The schema lets only these two be shared, and leases only a token bucket.
        (_, Some(lease)) => {
            let mut builder = RedisLeasedTokenBucket::builder(quota, failure).prefix(prefix);
            if let Some(lifetime) = lease.lifetime {
                builder = builder.lifetime(lifetime.0);
            }
            if let Some(max) = lease.max {
                builder = builder.max_lease(max);
            }
            Arc::new(builder.connect(url).map_err(|error| error.to_string())?)
        }
        (_, None) => {
            let builder = RedisTokenBucket::builder(quota, failure).prefix(prefix);
            Arc::new(builder.connect(url).map_err(|error| error.to_string())?)
        }
    };
    Ok(BuiltLimit {
        spec: spec.clone(),
        limiter: Limiter::Shared(limiter),
        requota: None,
    })
}

/// Without the `redis` feature the schema refuses a `store`.
#[cfg(not(feature = "redis"))]
fn shared(name: &str, _: &LimitSpec, _: &StoreSpec) -> Result<BuiltLimit, String> {
    Err(format!(
        "limit {name:?} is shared, and turnstile was built without `redis`"
    ))
}

type Made<E> = (Arc<dyn MakeCheck<E>>, Option<RequotaKeyed<E>>);

/// `made` as a [`Limiter`] (and its [`Requota`]), `wrap` saying where its key is found.
fn wrapped<E: 'static>(
    (make, requota): Made<E>,
    wrap: impl Fn(Arc<dyn MakeCheck<E>>) -> Limiter + Send + Sync + 'static,
) -> (Limiter, Option<Requota>) {
    let limiter = wrap(make);
    let requota = requota.map(|requota| -> Requota { Arc::new(move |quota| wrap(requota(quota))) });
    (limiter, requota)
}

/// A limiter of `spec`'s algorithm keyed by `K`: reconfigurable where the algorithm
/// is, so a reload can move its keys.
fn keyed<K, E, C>(name: &str, spec: &LimitSpec, clock: &C) -> Result<Made<E>, QuotaError>
where
    K: Hash + Eq + Clone + Send + Sync + Borrow<E::Key> + 'static,
    E: KeyExtractor<Parts> + 'static,
    E::Key: KeyRef<K>,
    C: Clock + Clone + 'static,
{
    let quota = spec.quota.quota;
    let memory = &spec.memory;
    match spec.algorithm {
        AlgorithmName::TokenBucket => Ok(movable(
            holding(TokenBucket::<K>::builder(quota), memory),
            name,
            clock,
        )),
        AlgorithmName::FixedWindow => Ok(movable(
            holding(FixedWindow::<K>::builder(quota), memory),
            name,
            clock,
        )),
        AlgorithmName::SlidingLog => Ok(movable(
            holding(SlidingLog::<K>::builder(quota), memory),
            name,
            clock,
        )),
        AlgorithmName::Gcra => fixed(holding(Gcra::<K>::builder(quota), memory), name, clock),
        AlgorithmName::SlidingWindow => fixed(
            holding(SlidingWindowCounter::<K>::builder(quota), memory),
            name,
            clock,
        ),
    }
}

/// `builder` holding what `memory` says: its cap and overflow, its eviction margin.
fn holding<L>(builder: crate::Builder<L>, memory: &MemorySpec) -> crate::Builder<L> {
    let builder = match memory.eviction_margin {
        Some(margin) => builder.eviction_margin(margin),
        None => builder,
    };
    match &memory.max_keys {
        Some((keys, overflow)) => builder.max_keys(
            *keys,
            match overflow {
                OverflowSpec::Deny => Overflow::Deny,
                OverflowSpec::Shared(quota) => Overflow::Shared(quota.quota),
            },
        ),
        None => builder,
    }
}

/// A limiter whose keys can move to a new quota, under `builder`'s.
fn movable<A, K, E, C>(
    builder: crate::Builder<KeyedLimiter<A, K>>,
    name: &str,
    clock: &C,
) -> Made<E>
where
    A: Reconfigurable + Algorithm<K> + 'static,
    K: Hash + Eq + Clone + Send + Sync + Borrow<E::Key> + 'static,
    E: KeyExtractor<Parts> + 'static,
    E::Key: KeyRef<K>,
    C: Clock + Clone + 'static,
{
    let quota = builder.quota;
    let limiter = Arc::new(
        named(builder, name)
            .clock(clock.clone())
            .build_reconfigurable(),
    );
    let checks = move |quota| -> Arc<dyn MakeCheck<E>> {
        Arc::new(Keyed(Arc::new(limiter.pin_quota(quota)), PhantomData))
    };
    let first = checks(quota);
    let requota: RequotaKeyed<E> = Arc::new(checks);
    (first, Some(requota))
}

/// A limiter whose keys cannot move.
fn fixed<A, K, E, C>(
    builder: crate::Builder<KeyedLimiter<A, K>>,
    name: &str,
    clock: &C,
) -> Result<Made<E>, QuotaError>
where
    A: FromQuota + Algorithm<K> + 'static,
    K: Hash + Eq + Clone + Send + Sync + Borrow<E::Key> + 'static,
    E: KeyExtractor<Parts> + 'static,
    E::Key: KeyRef<K>,
    C: Clock + Clone + 'static,
{
    let limiter = named(builder, name).clock(clock.clone()).build()?;
    Ok((Arc::new(Keyed(Arc::new(limiter), PhantomData)), None))
}

/// Names the limiter for metrics and events, where they are compiled in.
fn named<L>(builder: crate::Builder<L>, name: &str) -> crate::Builder<L> {
    #[cfg(any(feature = "metrics", feature = "tracing"))]
    let builder = builder.name(name);
    #[cfg(not(any(feature = "metrics", feature = "tracing")))]
    let _ = name;
    builder
}

/// What checks are built from: the limiters by name, and how keys are found.
pub(crate) struct Checks<'a> {
    limits: &'a BTreeMap<String, BuiltLimit>,
    extractors: &'a Extractors,
    client: IpKey,
    origin: &'a str,
}

impl<'a> Checks<'a> {
    pub(crate) fn new(
        limits: &'a BTreeMap<String, BuiltLimit>,
        extractors: &'a Extractors,
        document: &Document,
        origin: &'a str,
    ) -> Self {
        Self {
            limits,
            extractors,
            client: IpKey((extractors.client)(&document.client_address)),
            origin,
        }
    }

    /// The policy `name`, as `spec` says.
    pub(crate) fn policy(
        &self,
        name: &str,
        spec: &PolicySpec,
    ) -> Result<Policy<Parts>, ConfigError> {
        let mut builder = Policy::builder();
        for check in &spec.checks {
            builder = builder.check(self.check(check));
        }
        if spec.dry_run {
            builder = builder.dry_run();
        }
        #[cfg(any(feature = "metrics", feature = "tracing"))]
        let builder = builder.name(name);
        builder.build().map_err(|error| {
            ConfigError::new(self.origin, format!("policies.{name}"), error.to_string())
        })
    }

    /// One check; its limit and extractor exist (the names were resolved).
    fn check(&self, spec: &CheckSpec) -> PolicyCheck<Parts> {
        let name = spec.limit.0.as_str();
        let built = &self.limits[name];
        let quota = built.spec.quota.quota;
        let limit = match built.spec.algorithm {
            AlgorithmName::TokenBucket | AlgorithmName::Gcra => Limit::steady(quota),
            _ => Limit::windowed(quota),
        };
        let cost = || match &spec.cost {
            CostSpec::Fixed(cost) => Costing::Fixed(*cost),
            CostSpec::Estimated(estimate) => {
                Costing::Estimated(Arc::clone(&self.extractors.estimates[&estimate.0]))
            }
        };
        match &built.limiter {
            Limiter::Header(limiter, header) => {
                let key = TextKey::Header(Arc::new(HeaderKey::new(header.clone())));
                limiter.check(name, limit, key, spec, cost())
            }
            Limiter::Extractor(limiter, extractor) => {
                let key = TextKey::Named(Arc::clone(&self.extractors.named[extractor]));
                limiter.check(name, limit, key, spec, cost())
            }
            Limiter::Ip(limiter) => limiter.check(name, limit, self.client.clone(), spec, cost()),
            #[cfg(feature = "redis")]
            Limiter::Shared(limiter) => {
                let key = match &built.spec.key {
                    KeySpec::Header(header) => {
                        BytesKey::Text(TextKey::Header(Arc::new(HeaderKey::new(header.0.clone()))))
                    }
                    KeySpec::Extractor(extractor) => BytesKey::Text(TextKey::Named(Arc::clone(
                        &self.extractors.named[&extractor.0],
                    ))),
                    KeySpec::ClientAddress => BytesKey::Ip(self.client.clone()),
                };
                finish(
                    Check::shared(name, Arc::clone(limiter), limit, key),
                    spec,
                    cost(),
                )
            }
        }
    }
}

/// A check's cost, mode and missing-key treatment.
fn finish<L: ?Sized, K, E>(
    check: Check<L, K, E>,
    spec: &CheckSpec,
    cost: Costing,
) -> PolicyCheck<Parts>
where
    Check<L, K, E>: Into<PolicyCheck<Parts>>,
    Check<L, K, E, PerRequest<BoxedEstimate>>: Into<PolicyCheck<Parts>>,
{
    let check = check.on_missing_key(match spec.missing_key {
        MissingKeySpec::Reject => MissingKey::Reject,
        MissingKeySpec::Skip => MissingKey::Skip,
    });
    let check = if spec.settled { check.settled() } else { check };
    let check = if spec.dry_run { check.dry_run() } else { check };
    match cost {
        Costing::Fixed(cost) => check.cost(cost).into(),
        Costing::Estimated(estimate) => {
            let boxed: BoxedEstimate = Box::new(move |request| estimate(request));
            check.cost_with(boxed).into()
        }
    }
}

/// The layer `document` describes, its policies from `policy`; with no `[layer]`, one
/// that limits nothing.
pub(crate) fn layer(
    document: &Document,
    origin: &str,
    policy: impl Fn(&str) -> Result<Policy<Parts>, ConfigError>,
) -> Result<RateLimitLayer, ConfigError> {
    let Some(spec) = &document.layer else {
        let unlimited = RateLimitLayer::builder(Policy::unlimited()).build();
        return unlimited.map_err(|error| ConfigError::new(origin, "layer", error.to_string()));
    };
    let mut builder = RateLimitLayer::builder(policy(&spec.fallback.0)?)
        .missing_key_status(spec.statuses.missing_key.0)
        .exceeds_capacity_status(spec.statuses.exceeds_capacity.0)
        .unavailable_status(spec.statuses.unavailable.0);
    for route in &spec.routes {
        builder = builder.prefix(route.prefix.0.clone(), policy(&route.policy.0)?);
    }
    if let Some(delay) = spec.delay {
        builder = builder.delay(crate::wait::Wait::up_to(delay.0));
    }
    if spec.dry_run {
        builder = builder.dry_run();
    }
    if let Some(settle_from) = &spec.settle_from {
        let header = settle_from.header.0.clone();
        builder = builder.settle_from(move |response| cost_in_header(response, &header));
    }
    builder
        .build()
        .map_err(|error| ConfigError::new(origin, "layer", error.to_string()))
}
