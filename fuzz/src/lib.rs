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
//! - `redis_reply`: the Redis limiters on a connection that answers anything;
//! - `real_ip`: `RealIp` behind arbitrary trusted ranges and proxy chains, with
//!   arbitrary header lines from the client: its key is its own address.
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

/// The longest wait any limit in these targets can tell: every one gains at least
/// one unit an hour, and no target sends a request costing more than one unit.
pub const LONGEST_WAIT_SECS: u64 = 3600;

/// The checks every response of the layer passes, whatever the request:
/// - no 500, and 200 exactly when the request went ahead;
/// - a body of the layer's own only on refusals: a forwarded request's response is
///   the inner service's, and every refusal carries an RFC 9457 problem-details
///   body (`application/problem+json`) naming its status;
/// - `Retry-After`, when present, a whole number of seconds from 1 to
///   [`LONGEST_WAIT_SECS`], and present on every 429 (a 429 is a denial, whose wait
///   this field tells);
/// - `RateLimit-Policy` and `RateLimit`, when present, each once, lists of structured
///   fields (RFC 9651) whose items name a check, with the parameters the layer
///   writes (`src/http/fields.rs`, after the IETF RateLimit header fields draft):
///   `q` (the quota, at least 1) and `w` (the window in seconds, at least 1) on each
///   policy item; `r` (what is left) and `t` (seconds until more, at least 1 on a
///   refusal) on the one `RateLimit` item, which names a check of the policy, with
///   `r` at most that check's `q`.
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
    if !reply.forwarded {
        let problem = headers
            .get(http::header::CONTENT_TYPE)
            .is_some_and(|v| v == "application/problem+json");
        assert!(problem, "a refusal without problem details: {response:?}");
        let body = response.body();
        assert!(
            body.starts_with("{\"type\":\"")
                && body.ends_with("]}")
                && body.contains(&format!(",\"status\":{},", status.as_u16())),
            "a refusal's body is not its problem details: {response:?}"
        );
    }
    match headers.get("retry-after") {
        Some(retry_after) => {
            let seconds = retry_after_secs(response)
                .unwrap_or_else(|| panic!("Retry-After is not whole seconds: {retry_after:?}"));
            assert!(
                (1..=LONGEST_WAIT_SECS).contains(&seconds),
                "Retry-After {seconds}: every limit here gains a unit within the hour"
            );
        }
        None => assert_ne!(
            status,
            StatusCode::TOO_MANY_REQUESTS,
            "a 429 without Retry-After: {response:?}"
        ),
    }
    let policy = field(response, "ratelimit-policy");
    let limit = field(response, "ratelimit");
    for (name, params) in policy.iter().flatten() {
        let (q, w) = (params.get("q"), params.get("w"));
        assert!(
            q.is_some_and(|&q| q >= 1) && w.is_some_and(|&w| w >= 1),
            "RateLimit-Policy {name}: q={q:?}, w={w:?}"
        );
    }
    if let Some(list) = &limit {
        assert_eq!(
            list.len(),
            1,
            "RateLimit names the most restrictive check: {list:?}"
        );
        let (name, params) = &list[0];
        let r = *params
            .get("r")
            .unwrap_or_else(|| panic!("no r in {list:?}"));
        let t = *params
            .get("t")
            .unwrap_or_else(|| panic!("no t in {list:?}"));
        assert!(r >= 0 && t >= 0, "{list:?}");
        if !reply.forwarded && status == StatusCode::TOO_MANY_REQUESTS {
            assert!(
                t >= 1,
                "a refusal whose RateLimit says more is there now: {list:?}"
            );
        }
        if let Some(policy) = &policy {
            let (_, announced) = policy
                .iter()
                .find(|(n, _)| n == name)
                .unwrap_or_else(|| panic!("RateLimit names {name}, not in {policy:?}"));
            assert!(r <= announced["q"], "r above q: {list:?} under {policy:?}");
        }
    }
}

/// `Retry-After` as whole seconds, if present and such.
pub fn retry_after_secs(response: &Response<String>) -> Option<u64> {
    response
        .headers()
        .get("retry-after")?
        .to_str()
        .ok()?
        .parse()
        .ok()
}

/// One item of a RateLimit field: the check's name and its integer parameters.
pub type FieldItem = (String, std::collections::BTreeMap<String, i64>);

/// The field `name` of `response` as its items, each a check's name (a string) and
/// integer parameters; `None` when absent. Panics unless it appears at most once, is
/// a non-empty structured list (RFC 9651) of such items, and names no check twice.
pub fn field(response: &Response<String>, name: &str) -> Option<Vec<FieldItem>> {
    let values: Vec<_> = response.headers().get_all(name).iter().collect();
    assert!(values.len() <= 1, "{name} appears {} times", values.len());
    let value = values.first()?;
    let list = sfv::Parser::new(value.as_bytes())
        .parse_list::<sfv::List>()
        .unwrap_or_else(|e| panic!("{name}: {value:?} is not a structured list: {e}"));
    assert!(!list.is_empty(), "{name} is an empty list");
    let mut items: Vec<FieldItem> = Vec::new();
    for member in &list {
        let sfv::ListEntry::Item(item) = member else {
            panic!("{name}: an inner list in {value:?}");
        };
        let sfv::BareItem::String(check) = &item.bare_item else {
            panic!("{name}: an item that is not a check's name in {value:?}");
        };
        let params = item
            .params
            .iter()
            .map(|(key, param)| {
                let n = param.as_integer().unwrap_or_else(|| {
                    panic!("{name}: parameter {key:?} is not an integer in {value:?}")
                });
                (key.as_str().to_owned(), i64::from(n))
            })
            .collect();
        let check = check.as_str().to_owned();
        assert!(
            items.iter().all(|(n, _)| *n != check),
            "{name} names {check} twice: {value:?}"
        );
        items.push((check, params));
    }
    Some(items)
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
