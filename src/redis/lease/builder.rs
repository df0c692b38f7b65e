//! Building a leased limiter: its settings, the lease's own (lifetime, largest lease,
//! refill ahead), and what construction refuses.

use super::counts::LeaseCounters;
use super::hold::{self, MAX_HELD};
use super::local::Leases;
use super::seen::Sightings;
use super::{Core, RedisLeasedTokenBucket, StopOnDrop};
use crate::evict::sweeper::Sweeper;
use crate::redis::FailurePolicy;
use crate::redis::config::{MAX_MICROS, RedisConfigError, Settings, TimeSource};
use crate::redis::connect::lazy_manager;
use crate::redis::engine::ScriptLimiter;
use crate::{Clock, Quota};
use ::redis::aio::ConnectionLike;
use std::sync::{Arc, Weak};
use std::time::Duration;

/// How long a lease's tokens count unless told otherwise: one second.
pub const DEFAULT_LEASE_LIFETIME: Duration = Duration::from_secs(1);

/// The shortest lease lifetime accepted: ten ticks of the word's expiry (about 10 ms).
const MIN_LIFETIME: Duration = Duration::from_nanos(10 << hold::TICK_SHIFT);

/// What a lifetime out of bounds is told.
pub(crate) const LIFETIME_BOUNDS: &str =
    "a lease lifetime must be at least 10.5 ms and at most 2^52 µs";

/// Whether a lease may count its tokens for `lifetime`: a limits file checks it as it
/// is read, the builder when it builds.
pub(crate) fn lifetime_fits(lifetime: Duration) -> bool {
    (MIN_LIFETIME..=Duration::from_micros(MAX_MICROS)).contains(&lifetime)
}

impl RedisLeasedTokenBucket {
    /// A builder for a limiter applying `quota` to every key, answering `policy` when
    /// Redis does not and the key's lease is spent. Keys are prefixed with
    /// `turnstile:tb:`, as [`RedisTokenBucket`](crate::redis::RedisTokenBucket)'s, unless told
    /// otherwise: the two share a key's bucket.
    pub fn builder(quota: Quota, policy: FailurePolicy) -> RedisLeasedTokenBucketBuilder {
        RedisLeasedTokenBucketBuilder {
            quota,
            settings: Settings::new(policy, "turnstile:tb:"),
            lifetime: DEFAULT_LEASE_LIFETIME,
            max_lease: None,
            refill_ahead: true,
        }
    }
}

/// Builds a [`RedisLeasedTokenBucket`] (made by [`RedisLeasedTokenBucket::builder`]).
#[must_use = "a builder does nothing until it is built"]
#[derive(Debug)]
pub struct RedisLeasedTokenBucketBuilder {
    quota: Quota,
    pub(crate) settings: Settings,
    lifetime: Duration,
    max_lease: Option<u32>,
    refill_ahead: bool,
}

/// The settings every Redis limiter has, as
/// [`RedisLimiterBuilder`](crate::redis::RedisLimiterBuilder)'s, and the connections.
impl RedisLeasedTokenBucketBuilder {
    /// As [`RedisLimiterBuilder::prefix`](crate::redis::RedisLimiterBuilder::prefix):
    /// the plain token bucket's default prefix, so the two share a key's bucket.
    pub fn prefix(mut self, prefix: impl AsRef<[u8]>) -> Self {
        self.settings.prefix = prefix.as_ref().to_vec();
        self
    }

    /// As [`RedisLimiterBuilder::timeout`](crate::redis::RedisLimiterBuilder::timeout).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.settings.timeout = timeout;
        self
    }

    /// As [`RedisLimiterBuilder::client_clock`](crate::redis::RedisLimiterBuilder::client_clock);
    /// the leases' expiry runs on this clock too.
    pub fn client_clock(mut self, clock: impl Clock + 'static) -> Self {
        let epoch = clock.now();
        self.settings.time = TimeSource::Client {
            clock: Arc::new(clock),
            epoch,
        };
        self
    }

    /// As [`RedisLimiterBuilder::expire_idle_keys`](crate::redis::RedisLimiterBuilder::expire_idle_keys).
    pub fn expire_idle_keys(mut self, expire: bool) -> Self {
        self.settings.expire_idle_keys = expire;
        self
    }

    /// As [`RedisLimiterBuilder::circuit_breaker`](crate::redis::RedisLimiterBuilder::circuit_breaker).
    pub fn circuit_breaker(mut self, breaker: crate::redis::CircuitBreaker) -> Self {
        self.settings.breaker = breaker;
        self
    }

    /// As [`RedisLimiterBuilder::name`](crate::redis::RedisLimiterBuilder::name).
    #[cfg(any(feature = "metrics", feature = "tracing"))]
    #[cfg_attr(docsrs, doc(cfg(any(feature = "metrics", feature = "tracing"))))]
    pub fn name(mut self, name: impl Into<Arc<str>>) -> Self {
        self.settings.name = Some(name.into());
        self
    }

    /// As [`RedisLimiterBuilder::connect`](crate::redis::RedisLimiterBuilder::connect):
    /// returns at once, without waiting for Redis; call it inside a tokio runtime.
    ///
    /// # Errors
    /// A URL the `redis` crate does not accept ([`RedisConfigError::Connection`]); no
    /// tokio runtime ([`RedisConfigError::NoRuntime`]); what [`build`](Self::build)
    /// refuses.
    pub fn connect(
        self,
        redis: impl ::redis::IntoConnectionInfo,
    ) -> Result<RedisLeasedTokenBucket<::redis::aio::ConnectionManager>, RedisConfigError> {
        let client = ::redis::Client::open(redis).map_err(RedisConfigError::Connection)?;
        self.connect_client(client)
    }

    /// As [`connect`](Self::connect), from a `redis::Client`.
    ///
    /// # Errors
    /// As [`connect`](Self::connect).
    pub fn connect_client(
        self,
        client: ::redis::Client,
    ) -> Result<RedisLeasedTokenBucket<::redis::aio::ConnectionManager>, RedisConfigError> {
        self.settings.checked()?;
        let conn = lazy_manager(client, self.settings.timeout)?;
        self.build(conn)
    }

    /// As [`RedisLimiterBuilder::connect_sentinel`](crate::redis::RedisLimiterBuilder::connect_sentinel).
    ///
    /// # Errors
    /// What [`build`](Self::build) refuses.
    #[cfg(feature = "redis-sentinel")]
    #[cfg_attr(docsrs, doc(cfg(feature = "redis-sentinel")))]
    pub fn connect_sentinel(
        self,
        sentinels: ::redis::sentinel::SentinelClient,
    ) -> Result<RedisLeasedTokenBucket<crate::redis::sentinel::SentinelConnection>, RedisConfigError>
    {
        self.settings.checked()?;
        let config = crate::redis::connection_config(self.settings.timeout);
        self.build(crate::redis::sentinel::SentinelConnection::new(
            sentinels, config,
        ))
    }
}

/// The lease's own settings.
impl RedisLeasedTokenBucketBuilder {
    /// How long a lease's tokens count after its fetch (default
    /// [`DEFAULT_LEASE_LIFETIME`], 1 s; at least about 10 ms). Shorter: unused tokens
    /// stop counting sooner; longer: a key's lease can grow to cover slower traffic.
    pub fn lifetime(mut self, lifetime: Duration) -> Self {
        self.lifetime = lifetime;
        self
    }

    /// The most tokens this process holds for one key (default 1/32 of the capacity,
    /// at least 1 and at most 2^24 - 1). The under-admission and the window bound are at most
    /// `processes × max_lease` per key; a hot key amortises a round trip over up to
    /// about `max_lease / 2` checks. At most the capacity and 2^24 - 1.
    pub fn max_lease(mut self, tokens: u32) -> Self {
        self.max_lease = Some(tokens);
        self
    }

    /// Whether a lease below half its size is refilled by a task ahead of need
    /// (default `true`). Off, every refill is made by the request that finds the lease
    /// short, on its path.
    pub fn refill_ahead(mut self, ahead: bool) -> Self {
        self.refill_ahead = ahead;
        self
    }

    /// The limiter, on `conn` (see
    /// [`RedisLimiterBuilder::build`](crate::redis::RedisLimiterBuilder::build)).
    ///
    /// # Errors
    /// What the plain token bucket refuses; a lifetime under about 10 ms or beyond
    /// 2^52 µs; a `max_lease` of zero, above the capacity or above 2^24 - 1.
    pub fn build<C>(self, conn: C) -> Result<RedisLeasedTokenBucket<C>, RedisConfigError>
    where
        C: ConnectionLike + Clone + Send + Sync + 'static,
    {
        let algorithm = crate::redis::token_bucket::algorithm(&self.quota)?;
        let settings = self.settings.checked()?;
        let capacity = self.quota.capacity();
        let max_lease = self.max_lease.unwrap_or((capacity / 32).clamp(1, MAX_HELD));
        if max_lease == 0 || max_lease > capacity || max_lease > MAX_HELD {
            return Err(RedisConfigError::Lease(
                "max_lease must be at least 1 and at most the capacity and 2^24 - 1",
            ));
        }
        if !lifetime_fits(self.lifetime) {
            return Err(RedisConfigError::Lease(LIFETIME_BOUNDS));
        }
        let clock: Arc<dyn Clock> = match &settings.time {
            TimeSource::Client { clock, .. } => Arc::clone(clock),
            TimeSource::Server => Arc::new(crate::QuantaClock::new()),
        };
        let epoch = clock.now();
        let core = Arc::new_cyclic(|core: &Weak<Core<C>>| Core {
            limiter: ScriptLimiter::new(algorithm, settings, conn),
            quota: self.quota,
            leases: Leases::new(Arc::new(sweeper(core.clone()))),
            seen: Sightings::new(),
            clock,
            epoch,
            // In range: at most 2^52 µs.
            lifetime: self.lifetime.as_nanos() as u64,
            max_lease,
            refill_ahead: self.refill_ahead,
            counters: LeaseCounters::default(),
        });
        let sweeper = Arc::new(StopOnDrop(Arc::clone(core.leases.sweeper())));
        Ok(RedisLeasedTokenBucket { core, sweeper })
    }
}

/// The thread that sweeps the leases of `core`: it holds the limiter weakly, so it
/// ends when the limiter is gone; its handles stop it sooner ([`StopOnDrop`]).
fn sweeper<C>(core: Weak<Core<C>>) -> Sweeper
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    Sweeper::on_thread("turnstile-lease", move |_| {
        let Some(core) = core.upgrade() else {
            return false;
        };
        core.leases
            .sweep_if_due(|lease, slow| core.removable(lease, slow));
        true
    })
}
