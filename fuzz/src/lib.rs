//! What the fuzz targets share: a service behind a layer driven to its response, and
//! the checks every response of the layer must pass.
//!
//! The targets live in `fuzz_targets/`, one per surface an attacker or a
//! misconfiguration reaches:
//! - `http_layer`: arbitrary requests (method, path, many and huge header values,
//!   non-UTF-8 bytes, IPv4, IPv6 and mapped peers) through real policies;
//! - `http_routes`: the layer's route matching against a plain reference matcher;
//! - `quota`: `Quota` and every algorithm's constructor on arbitrary numbers, then
//!   arbitrary traffic on a clock that also runs backwards, against each algorithm's
//!   documented bound;
//! - `redis_reply`: the Redis limiters on a connection that answers anything.
//!
//! Run one with `cargo +nightly fuzz run <target> fuzz/corpus/<target>` from the
//! repository root (CONTRIBUTING.md says more).

use http::{Request, Response, StatusCode};
use std::convert::Infallible;
use std::sync::OnceLock;
use tower::{Layer, ServiceExt, service_fn};
use turnstile::http::RateLimitLayer;

/// One current-thread runtime for every input, its clock paused: nothing in the
/// targets waits for real time (a silent Redis connection's timeout passes at once).
pub fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .expect("a current-thread runtime")
    })
}

/// A response of the layer, and whether the inner service was reached.
pub struct Reply {
    /// The response.
    pub response: Response<String>,
    /// The inner service answered (the request went ahead).
    pub forwarded: bool,
}

/// Sends `request` through `layer` to a service that answers 200 "ok".
pub fn send(layer: &RateLimitLayer, request: Request<()>) -> Reply {
    let service = layer.layer(service_fn(|_: Request<()>| async {
        Ok::<_, Infallible>(Response::new(String::from("ok")))
    }));
    let response = runtime()
        .block_on(service.oneshot(request))
        .expect("the inner service never fails");
    let forwarded = response.status() == StatusCode::OK && response.body() == "ok";
    Reply {
        response,
        forwarded,
    }
}

/// The checks every response of the layer passes, whatever the request: no 500, a
/// body only on refusals, `Retry-After` a positive whole number of seconds when
/// present, and the `RateLimit-Policy` and `RateLimit` fields, when present, lists
/// of structured fields (RFC 9651) whose items name a check.
pub fn assert_well_formed(reply: &Reply) {
    let response = &reply.response;
    let status = response.status();
    assert_ne!(status, StatusCode::INTERNAL_SERVER_ERROR, "{response:?}");
    assert_eq!(
        reply.forwarded,
        status == StatusCode::OK,
        "only a forwarded request is 200: {response:?}"
    );
    let headers = response.headers();
    if let Some(retry_after) = headers.get("retry-after") {
        let seconds: u64 = retry_after
            .to_str()
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("Retry-After is not whole seconds: {retry_after:?}"));
        assert!(seconds > 0, "Retry-After 0 sends the client straight back");
    }
    for name in ["ratelimit-policy", "ratelimit"] {
        let values: Vec<_> = headers.get_all(name).iter().collect();
        assert!(values.len() <= 1, "{name} appears {} times", values.len());
        if let Some(value) = values.first() {
            let list = sfv::Parser::new(value.as_bytes())
                .parse_list::<sfv::List>()
                .unwrap_or_else(|e| panic!("{name}: {value:?} is not a structured list: {e}"));
            assert!(!list.is_empty(), "{name} is an empty list");
            for member in &list {
                let sfv::ListEntry::Item(item) = member else {
                    panic!("{name}: an inner list in {value:?}");
                };
                assert!(
                    matches!(item.bare_item, sfv::BareItem::String(_)),
                    "{name}: an item that is not a check's name in {value:?}"
                );
            }
        }
    }
}

/// Whether `path` lies under `prefix`, matched on whole segments, written plainly as
/// the layer documents it: the path starts with the prefix, and either they are
/// equal, or the prefix ends with `/`, or the path's next character is `/`.
pub fn under_prefix(path: &str, prefix: &str) -> bool {
    let (path, prefix) = (path.as_bytes(), prefix.as_bytes());
    if path.len() < prefix.len() || path[..prefix.len()] != *prefix {
        return false;
    }
    path.len() == prefix.len() || prefix.last() == Some(&b'/') || path[prefix.len()] == b'/'
}
