//! A request through a fixed layer beside the same table through a reloadable one
//! (feature `config`), shaped for callgrind as `benches/instructions.rs` is:
//! `results/layer-instructions.sh` runs this binary under
//! `valgrind --tool=callgrind --toggle-collect=*measured*`, so only the requests
//! inside `measured` are counted, and divides by their number. Each request is
//! `benches/config_reload.rs`'s: built (path `/r0`, an `x-api-key` header), passed to
//! the service, its response future polled once; one in-process token bucket check,
//! allowed (a quota of a million a second). The keys cycle over KEYS of them (a power
//! of two, 16 unless given), all stored before counting.
//!
//! Usage: `layer_instructions LAYER REQUESTS [KEYS]`, LAYER one of
//! - `fixed`: the table built in code, as a user would (a `TokenBucket<String>`);
//! - `fixed-reconfigurable`: the same, its limiter built with `build_reconfigurable`
//!   (per-key rules, `PerKey`, as a configuration file's token buckets are);
//! - `fixed-dyn`: that limiter behind an `Arc<dyn DynRateLimiter<String, str>>`, as
//!   the file's checks hold theirs;
//! - `live`: the same table from a file, through `LiveLimits::layer()`.
//!
//! Each step from one to the next adds one thing the reloadable layer has, so the
//! differences between them are what each costs.

use http::{HeaderValue, Request};
use std::future::Future;
use std::hint::black_box;
use std::pin::pin;
use std::process::ExitCode;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;
use tower::{Layer, Service};
use turnstile::config::{Config, Extractors, LiveLimits};
use turnstile::http::{HeaderKey, RateLimitLayer};
use turnstile::policy::{Check, Limit, Policy};
use turnstile::{DynRateLimiter, Quota, TokenBucket};

#[path = "common/answer.rs"]
mod answer;
use answer::Ok200;

/// The quota every layer's one limit has: every request allowed.
fn quota() -> Quota {
    Quota::new(1_000_000, Duration::from_micros(1)).expect("a valid quota")
}

/// The table of `benches/config_reload.rs`, fallback and one route under one policy.
const TABLE: &str = "[limits.a]\n\
    quota = { capacity = 1000000, refill_every = \"1us\" }\n\
    key = { header = \"x-api-key\" }\n\
    [policies.p]\nchecks = [\"a\"]\n\
    [layer]\nfallback = \"p\"\nroutes = [ { prefix = \"/r0\", policy = \"p\" } ]\n";

/// The one-route table, fixed, built in code around `limiter`.
fn fixed_layer<L>(limiter: Arc<L>) -> RateLimitLayer
where
    L: ?Sized,
    Check<L, String, HeaderKey>: Into<turnstile::policy::PolicyCheck<http::request::Parts>>,
{
    let policy = || {
        let key = HeaderKey::new(http::HeaderName::from_static("x-api-key"));
        let check = Check::new("a", Arc::clone(&limiter), Limit::steady(quota()), key);
        Policy::builder()
            .check(check)
            .build()
            .expect("a valid policy")
    };
    RateLimitLayer::builder(policy())
        .prefix("/r0", policy())
        .build()
        .expect("a valid layer")
}

/// One request through `service` with key `key`, its future polled once (it is
/// ready): 1 when it was answered 200.
#[inline(always)]
fn one_request<S>(service: &mut S, key: &HeaderValue) -> u64
where
    S: Service<Request<String>, Response = http::Response<String>>,
{
    let request = Request::builder()
        .uri("/r0")
        .header("x-api-key", key.clone())
        .body(String::new())
        .expect("a valid request");
    let mut context = Context::from_waker(Waker::noop());
    match pin!(service.call(request)).as_mut().poll(&mut context) {
        Poll::Ready(Ok(response)) => u64::from(response.status() == 200),
        _ => 0,
    }
}

/// The counted part: `requests` requests over `keys`. Not inlined, so callgrind can
/// switch counting on at its entry and off at its exit.
#[inline(never)]
fn measured<S>(service: &mut S, keys: &[HeaderValue], requests: u64) -> u64
where
    S: Service<Request<String>, Response = http::Response<String>>,
{
    let mask = keys.len() - 1;
    let mut answered = 0;
    for i in 0..requests as usize {
        answered += one_request(service, black_box(&keys[i & mask]));
    }
    answered
}

/// Stores `keys` keys (one request each, not counted), then counts `requests`.
fn count<S>(mut service: S, requests: u64, keys: usize) -> u64
where
    S: Service<Request<String>, Response = http::Response<String>>,
{
    let keys: Vec<HeaderValue> = (0..keys)
        .map(|key| HeaderValue::from_str(&format!("key-{key}")).expect("a valid value"))
        .collect();
    for key in &keys {
        assert_eq!(
            one_request(&mut service, key),
            1,
            "every request is allowed"
        );
    }
    measured(&mut service, &keys, requests)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // `cargo bench` passes `--bench`; with no layer named there is nothing to count.
    let [layer, requests, keys] = match args.as_slice() {
        [layer, requests] => [layer.as_str(), requests.as_str(), "16"],
        [layer, requests, keys] => [layer.as_str(), requests.as_str(), keys.as_str()],
        _ => {
            eprintln!(
                "usage: layer_instructions fixed|fixed-reconfigurable|fixed-dyn|live REQUESTS [KEYS] (see results/layer-instructions.sh)"
            );
            return ExitCode::SUCCESS;
        }
    };
    let Ok(requests) = requests.parse::<u64>() else {
        eprintln!("REQUESTS is a number, not {requests:?}");
        return ExitCode::FAILURE;
    };
    let keys = match keys.parse::<usize>() {
        Ok(keys) if keys.is_power_of_two() => keys,
        _ => {
            eprintln!("KEYS is a power of two, not {keys:?}");
            return ExitCode::FAILURE;
        }
    };
    let reconfigurable =
        || Arc::new(TokenBucket::<String>::builder(quota()).build_reconfigurable());
    let answered = match layer {
        "fixed" => {
            let limiter = Arc::new(TokenBucket::<String>::new(quota()).expect("a valid quota"));
            count(fixed_layer(limiter).layer(Ok200), requests, keys)
        }
        "fixed-reconfigurable" => count(fixed_layer(reconfigurable()).layer(Ok200), requests, keys),
        "fixed-dyn" => {
            let limiter: Arc<dyn DynRateLimiter<String, str>> = reconfigurable();
            count(fixed_layer(limiter).layer(Ok200), requests, keys)
        }
        "live" => {
            let config = Config::from_toml(TABLE, "bench.toml").expect("a valid table");
            let limits = LiveLimits::new(config, Extractors::new()).expect("a valid table");
            count(limits.layer().layer(Ok200), requests, keys)
        }
        _ => {
            eprintln!("no layer {layer:?}");
            return ExitCode::FAILURE;
        }
    };
    assert_eq!(answered, requests, "every request is allowed");
    ExitCode::SUCCESS
}
