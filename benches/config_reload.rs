//! What a reloadable table costs (feature `config`), for the numbers of issue 48:
//! - a request through the layer of a [`LiveLimits`] (routes behind an `ArcSwap`)
//!   beside the same table as a fixed layer, one in-process check, every request
//!   allowed (quotas of a million a second), the service's response future polled
//!   once;
//! - a reload of a table of 1,000 routes on a limiter holding 1,000,000 keys, the
//!   quota changed each time: the whole reload on the reloading thread (building the
//!   1,000 routes and their policies, then the swap; the keys move lazily, at their
//!   own next requests, so their number does not enter it).
//!
//! Run: `cargo bench --features config --bench config_reload`. CI only builds it.

use criterion::{Criterion, criterion_group, criterion_main};
use http::Request;
use std::future::Future;
use std::hint::black_box;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use tower::{Layer, Service};
use turnstile::config::{Config, Extractors, LiveLimits};
use turnstile::http::{HeaderKey, RateLimitLayer};
use turnstile::policy::{Check, Limit, Policy};
use turnstile::{Quota, TokenBucket};

#[path = "common/answer.rs"]
mod answer;
use answer::Ok200;

const GENEROUS: &str = "{ capacity = 1000000, refill_every = \"1us\" }";

/// A table of `routes` prefixes, every one under the policy of the one limit `a`.
fn table(routes: usize, quota: &str) -> Config {
    let mut text = format!(
        "[limits.a]\nquota = {quota}\nkey = {{ header = \"x-api-key\" }}\n\
         [policies.p]\nchecks = [\"a\"]\n[layer]\nfallback = \"p\"\nroutes = [\n"
    );
    for route in 0..routes {
        text.push_str(&format!(
            "  {{ prefix = \"/r{route}\", policy = \"p\" }},\n"
        ));
    }
    text.push_str("]\n");
    Config::from_toml(&text, "bench.toml").unwrap()
}

/// The same one-route table, fixed, built in code.
fn fixed_layer() -> RateLimitLayer {
    let quota = Quota::new(1_000_000, std::time::Duration::from_micros(1)).unwrap();
    let limiter = Arc::new(TokenBucket::<String>::new(quota).unwrap());
    let policy = || {
        let key = HeaderKey::new(http::HeaderName::from_static("x-api-key"));
        let check = Check::new("a", Arc::clone(&limiter), Limit::steady(quota), key);
        Policy::builder().check(check).build().unwrap()
    };
    RateLimitLayer::builder(policy())
        .prefix("/r0", policy())
        .build()
        .unwrap()
}

/// One request through `service`, its future polled once (it is ready).
fn one_request<S>(service: &mut S) -> u16
where
    S: Service<Request<String>, Response = http::Response<String>>,
{
    let request = Request::builder()
        .uri("/r0")
        .header("x-api-key", "alice")
        .body(String::new())
        .unwrap();
    let mut context = Context::from_waker(Waker::noop());
    match pin!(service.call(request)).as_mut().poll(&mut context) {
        Poll::Ready(Ok(response)) => response.status().as_u16(),
        _ => 0,
    }
}

fn request(c: &mut Criterion) {
    let mut group = c.benchmark_group("config/request");
    let mut fixed = fixed_layer().layer(Ok200);
    group.bench_function("fixed layer", |b| {
        b.iter(|| black_box(one_request(&mut fixed)))
    });
    let limits = LiveLimits::new(table(1, GENEROUS), Extractors::new()).unwrap();
    let mut live = limits.layer().layer(Ok200);
    group.bench_function("reloadable layer", |b| {
        b.iter(|| black_box(one_request(&mut live)))
    });
    group.finish();
}

fn reload(c: &mut Criterion) {
    let (small, large) = (table(1_000, "\"100/s\""), table(1_000, "\"200/s\""));
    let limits = LiveLimits::new(small.clone(), Extractors::new()).unwrap();
    let policy = limits.policy("p").unwrap();
    for key in 0..1_000_000u32 {
        let request = Request::builder()
            .header("x-api-key", key.to_string())
            .body(())
            .unwrap();
        assert!(policy.acquire(&request.into_parts().0).is_allowed());
    }
    let mut group = c.benchmark_group("config/reload");
    group.sample_size(20);
    let mut next = [large, small].into_iter().cycle();
    group.bench_function("1000 routes, 1M keys", |b| {
        b.iter(|| black_box(limits.reload(next.next().unwrap()).unwrap()))
    });
    group.finish();
}

criterion_group!(benches, request, reload);
criterion_main!(benches);
