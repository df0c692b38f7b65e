//! A policy allocates nothing once its keys exist — allowed, denied with refunds, or
//! refused for a missing key. `allocation-counter` installs a counting
//! `#[global_allocator]` in this test binary; every allocation made on this thread
//! inside `measure` is counted.

use std::sync::Arc;
use std::time::Duration;
use turnstile::policy::{Check, KeyExtractor, Limit, Outcome, Policy};
use turnstile::{ManualClock, Quota, TokenBucket};

struct Request {
    user: String,
    ip: u64,
}

/// Lends the user name borrowed from the request, as the HTTP header extractor
/// does: a `String`-keyed limiter looks it up as `&str`, with no copy.
struct ByUser;

impl KeyExtractor<Request> for ByUser {
    type Key = str;

    fn with_key<T>(&self, request: &Request, with: impl FnOnce(&str) -> T) -> Option<T> {
        (!request.user.is_empty()).then(|| with(&request.user))
    }
}

#[test]
fn existing_keys_allocate_nothing_when_allowed_denied_or_refused() {
    let clock = ManualClock::new();
    let user_quota = Quota::new(10, Duration::from_millis(1)).unwrap();
    let ip_quota = Quota::new(4, Duration::from_millis(1)).unwrap();
    let users = Arc::new(TokenBucket::<String, _>::with_clock(user_quota, clock.clone()).unwrap());
    let ips = Arc::new(TokenBucket::<u64, _>::with_clock(ip_quota, clock.clone()).unwrap());
    let policy: Policy<Request> = Policy::builder()
        .check(Check::new(
            "per-user",
            users,
            Limit::steady(user_quota),
            ByUser,
        ))
        .check(Check::new(
            "per-ip",
            ips,
            Limit::steady(ip_quota),
            |r: &Request| Some(r.ip),
        ))
        .build()
        .unwrap();
    let requests: Vec<Request> = (0..300)
        .map(|i| Request {
            user: format!("user-{}", i % 100),
            ip: i % 7,
        })
        .collect();
    let keyless = Request {
        user: String::new(),
        ip: 0,
    };
    for request in &requests {
        let _ = policy.acquire(request); // every key now exists
    }

    // Denied by the per-IP check alone: the per-user check took, then gave back.
    let (mut allowed, mut refunded, mut refused) = (0u32, 0u32, 0u32);
    let info = allocation_counter::measure(|| {
        for _ in 0..20 {
            clock.advance(Duration::from_micros(300));
            for request in &requests {
                let verdict = policy.acquire(request);
                allowed += u32::from(verdict.is_allowed());
                refunded += u32::from(verdict.refused().eq([1]));
            }
            if policy.acquire(&keyless).outcome() == Outcome::MissingKey {
                refused += 1;
            }
        }
    });
    assert_eq!(info.count_total, 0, "allocations: {info:?}");
    assert!(
        allowed > 20 && refunded > 1000 && refused == 20,
        "allowed {allowed}, refunded {refunded}, refused {refused}"
    );
}

#[test]
fn settling_existing_keys_allocates_nothing() {
    let clock = ManualClock::new();
    let quota = Quota::new(1_000, Duration::from_millis(1)).unwrap();
    let tokens = Arc::new(TokenBucket::<String, _>::with_clock(quota, clock.clone()).unwrap());
    let policy: Policy<Request> = Policy::builder()
        .check(
            Check::new("tokens", tokens, Limit::steady(quota), ByUser)
                .cost_with(|r: &Request| u32::try_from(r.ip).unwrap())
                .settled(),
        )
        .build()
        .unwrap();
    let requests: Vec<Request> = (0..100)
        .map(|i| Request {
            user: format!("user-{i}"),
            ip: i % 20,
        })
        .collect();
    for request in &requests {
        let _ = policy.acquire(request); // every key now exists
    }
    let (mut refunded, mut charged) = (0u32, 0u32);
    let info = allocation_counter::measure(|| {
        for round in 0..20 {
            clock.advance(Duration::from_millis(50));
            for request in &requests {
                let verdict = policy.acquire(request);
                // Half used less than estimated, half more.
                let settled = policy.settle(request, &verdict, 10 + round % 2 * 20);
                refunded += settled.refunded;
                charged += settled.charged;
            }
        }
    });
    assert_eq!(info.count_total, 0, "allocations: {info:?}");
    assert!(
        refunded > 0 && charged > 0,
        "refunded {refunded}, charged {charged}"
    );
}
