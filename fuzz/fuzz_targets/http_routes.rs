//! Route matching against a plain reference matcher: arbitrary prefixes (a layer
//! refuses those without a leading `/` at build time, never later) and arbitrary
//! paths. Each route's policy has one check named after the route, so a response's
//! `RateLimit-Policy` field says which route the layer chose; the reference says
//! which it should have: the first prefix the path lies under on whole segments
//! ([`turnstile_fuzz::under_prefix`]), else the fallback.
#![no_main]

use arbitrary::Arbitrary;
use http::{Request, Uri};
use libfuzzer_sys::fuzz_target;
use std::sync::Arc;
use turnstile::http::{HeaderKey, LayerConfigError, RateLimitLayer};
use turnstile::policy::{Check, Limit, MissingKey, Policy};
use turnstile::{ManualClock, Quota, TokenBucket};
use turnstile_fuzz::{assert_well_formed, send, under_prefix};

#[derive(Arbitrary, Debug)]
struct Input {
    prefixes: Vec<String>,
    paths: Vec<Vec<u8>>,
}

/// A policy whose one check is named `name` and never refuses in this target (a
/// keyless request is allowed, and the quota is far above what one input sends).
fn named(name: &str, clock: &ManualClock) -> Policy<http::request::Parts> {
    let quota = Quota::per_second(1_000_000).expect("a valid quota");
    Policy::builder()
        .check(
            Check::new(
                name,
                Arc::new(TokenBucket::<String, _>::with_clock(quota, clock.clone()).unwrap()),
                Limit::steady(quota),
                HeaderKey::new(http::HeaderName::from_static("x-api-key")),
            )
            .on_missing_key(MissingKey::Skip),
        )
        .build()
        .expect("a valid policy")
}

fuzz_target!(|input: Input| {
    let clock = ManualClock::new();
    let prefixes: Vec<&String> = input.prefixes.iter().take(16).collect();
    let mut builder = RateLimitLayer::builder(named("fallback", &clock));
    for (i, prefix) in prefixes.iter().enumerate() {
        builder = builder.prefix(prefix.as_str(), named(&format!("route{i}"), &clock));
    }
    let layer = match builder.build() {
        Ok(layer) => layer,
        Err(LayerConfigError::Prefix(refused)) => {
            // The first prefix without a leading slash is the one refused.
            let first_bad = prefixes.iter().find(|p| !p.starts_with('/'));
            assert_eq!(Some(&&refused), first_bad);
            return;
        }
        Err(other) => panic!("only prefixes are wrong here: {other}"),
    };
    assert!(prefixes.iter().all(|p| p.starts_with('/')));

    for path in input.paths.iter().take(16) {
        let Ok(uri) = Uri::try_from(path.as_slice()) else {
            continue;
        };
        let expected = match prefixes
            .iter()
            .position(|prefix| under_prefix(uri.path(), prefix))
        {
            Some(i) => format!("route{i}"),
            None => "fallback".to_owned(),
        };
        let mut request = Request::new(());
        *request.uri_mut() = uri.clone();
        let reply = send(&layer, request);
        assert_well_formed(&reply);
        assert!(
            reply.forwarded,
            "nothing is refused here: {:?}",
            reply.response
        );
        let field = reply.response.headers()["ratelimit-policy"]
            .to_str()
            .expect("the field is ASCII");
        assert!(
            field.starts_with(&format!("\"{expected}\";")),
            "{:?} went to {field}, not {expected}",
            uri.path()
        );
    }
});
