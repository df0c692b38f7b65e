//! The limiters can be shared between threads (`Send + Sync`) and printed (`Debug`):
//! asserted at compile time, so a field that takes either away fails the build of
//! this test. (Every public type's `Debug` is the lint `missing_debug_implementations`,
//! denied in Cargo.toml; here the limiters' is also checked to show the configuration.)

use std::fmt::Debug;
use std::time::Duration;
use turnstile::baseline::{GlobalLock, MutexPerKey};
use turnstile::policy::{Policy, PolicyBuilder};
use turnstile::{
    DirectFixedWindow, DirectGcra, DirectSlidingWindowCounter, DirectTokenBucket, FixedWindow,
    Gcra, ManualClock, PerKeyFixedWindow, PerKeySlidingLog, PerKeyTokenBucket, Quota, SlidingLog,
    SlidingWindowCounter, StdClock, TokenBucket,
};

/// Compiles only for a type that can be shared between threads and printed.
const fn shared_and_printable<T: Send + Sync + Debug + ?Sized>() {}

/// The keyed limiters, on the default clock and on the others, with owned and
/// `Copy` keys.
const _: () = {
    shared_and_printable::<TokenBucket<String>>();
    shared_and_printable::<TokenBucket<u64, ManualClock>>();
    shared_and_printable::<TokenBucket<u64, StdClock>>();
    shared_and_printable::<Gcra<String>>();
    shared_and_printable::<FixedWindow<String>>();
    shared_and_printable::<SlidingWindowCounter<String>>();
    shared_and_printable::<SlidingLog<String>>();
    shared_and_printable::<PerKeyTokenBucket<String>>();
    shared_and_printable::<PerKeyFixedWindow<String>>();
    shared_and_printable::<PerKeySlidingLog<String>>();
};

/// The direct limiters.
const _: () = {
    shared_and_printable::<DirectTokenBucket>();
    shared_and_printable::<DirectTokenBucket<ManualClock>>();
    shared_and_printable::<DirectGcra>();
    shared_and_printable::<DirectFixedWindow>();
    shared_and_printable::<DirectSlidingWindowCounter>();
};

/// Policies, over any request type (`str` here, `http::request::Parts` below), their
/// builders and the baselines.
const _: () = {
    shared_and_printable::<Policy<str>>();
    shared_and_printable::<Policy<u64>>();
    shared_and_printable::<GlobalLock<String>>();
    shared_and_printable::<MutexPerKey<String>>();
};

/// A policy builder crosses threads, but is not shared.
const _: () = {
    const fn sendable<T: Send + Debug + ?Sized>() {}
    sendable::<PolicyBuilder<str>>();
};

/// The HTTP layer and its service (over a service that is itself `Send + Sync`); the
/// response future is `Send`, as tower's servers need.
#[cfg(feature = "tower")]
const _: () = {
    use http::Response;
    use http::request::Parts;
    use std::convert::Infallible;
    use std::future::Ready;
    use turnstile::http::{
        RateLimitLayer, RateLimitLayerBuilder, RateLimitService, ResponseFuture,
    };

    #[derive(Debug)]
    struct Inner;

    const fn sendable<T: Send + Debug>() {}
    shared_and_printable::<Policy<Parts>>();
    shared_and_printable::<RateLimitLayer>();
    shared_and_printable::<RateLimitService<Inner>>();
    sendable::<RateLimitLayerBuilder>();
    sendable::<ResponseFuture<Ready<Result<Response<()>, Infallible>>, (), Infallible>>();
};

/// The Redis limiters, async and blocking, on their default connection.
#[cfg(feature = "redis")]
const _: () = {
    use turnstile::redis::lease::RedisLeasedTokenBucket;
    use turnstile::redis::{
        BlockingRedisFixedWindow, BlockingRedisTokenBucket, RedisFixedWindow, RedisTokenBucket,
    };

    shared_and_printable::<RedisTokenBucket>();
    shared_and_printable::<RedisFixedWindow>();
    shared_and_printable::<RedisLeasedTokenBucket>();
    shared_and_printable::<BlockingRedisTokenBucket>();
    shared_and_printable::<BlockingRedisFixedWindow>();
};

/// Compiles only for an error a caller can box into `Box<dyn Error + Send + Sync>`
/// and keep: one error type per concern, each `Error + Send + Sync + 'static`.
const fn an_error<T: std::error::Error + Send + Sync + 'static>() {}

const _: () = {
    an_error::<turnstile::QuotaError>();
    an_error::<turnstile::policy::PolicyError>();
};

#[cfg(feature = "tower")]
const _: () = {
    an_error::<turnstile::http::LayerConfigError>();
    an_error::<turnstile::http::CidrError>();
};

#[cfg(feature = "redis")]
const _: () = {
    an_error::<turnstile::redis::RedisConfigError>();
    an_error::<turnstile::redis::CheckError>();
};

/// Shared limiters of different types in one collection: the contract is object safe.
#[cfg(feature = "redis")]
const _: () = {
    use turnstile::policy::SharedLimiter;
    shared_and_printable::<turnstile::SharedDecision>();
    // Naming `dyn SharedLimiter` compiles only for an object-safe trait; each limiter
    // below then coerces to it.
    const fn boxable<T: SharedLimiter>(_: Option<&dyn SharedLimiter>) {}
    boxable::<turnstile::redis::RedisTokenBucket>(None);
    boxable::<turnstile::redis::RedisFixedWindow>(None);
    boxable::<turnstile::redis::lease::RedisLeasedTokenBucket>(None);
};

#[test]
fn a_limiter_prints_its_quota_not_its_keys() {
    let quota = Quota::new(3, Duration::from_secs(2)).unwrap();
    let keyed = TokenBucket::<String>::new(quota).unwrap();
    assert!(keyed.try_acquire("a key that must not be printed"));
    let printed = format!("{keyed:?}");
    assert!(printed.contains(&format!("{quota:?}")), "{printed}");
    assert!(!printed.contains("must not be printed"), "{printed}");

    let direct = DirectTokenBucket::new(quota).unwrap();
    assert!(format!("{direct:?}").contains(&format!("{quota:?}")));
}
