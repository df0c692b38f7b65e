//! A tower layer that rate-limits HTTP requests by per-route [`Policy`]s, answers
//! `429 Too Many Requests` with `Retry-After`, and reports the limits in the IETF
//! `RateLimit-Policy` and `RateLimit` header fields. Feature `tower`.
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use std::net::{IpAddr, SocketAddr};
//! use std::sync::Arc;
//! use turnstile::http::{HeaderKey, PeerIp, RateLimitLayer};
//! use turnstile::policy::{Check, Limit, Policy};
//! use turnstile::{Quota, TokenBucket};
//! # use axum::{Router, extract::ConnectInfo, routing::get};
//!
//! let per_user = Quota::per_minute(100)?;
//! let per_ip = Quota::per_minute(300)?;
//! let users = Arc::new(TokenBucket::<String>::new(per_user)?);
//! let ips = Arc::new(TokenBucket::<IpAddr>::new(per_ip)?);
//! let policy = Policy::builder()
//!     .check(Check::new("per-user", users, Limit::steady(per_user),
//!         HeaderKey::new(http::HeaderName::from_static("x-api-key"))))
//!     .check(Check::new("per-ip", ips, Limit::steady(per_ip),
//!         PeerIp::from_extension(|info: &ConnectInfo<SocketAddr>| info.0)))
//!     .build()?;
//! let layer = RateLimitLayer::builder(policy).build()?;
//!
//! let app = Router::new().route("/", get(|| async { "hello" })).layer(layer);
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
//! axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>()).await?;
//! # Ok(()) }
//! ```
//!
//! # What it answers
//! Each request is matched to a route (path prefixes on whole segments, or predicates
//! over the request head, in the order given; else the fallback) and asked of that
//! route's policy, all or nothing (see [`crate::policy`]).
//!
//! | outcome | status | `Retry-After` |
//! |---|---|---|
//! | allowed | the inner service's | — |
//! | denied | 429 Too Many Requests | the exact wait in whole seconds, rounded up, ≥ 1 |
//! | overflow (a limiter's `max_keys` cap is full) | 503 Service Unavailable | the hint, rounded up, ≥ 1 |
//! | cost exceeds what the key's quota can ever hold | 429 (configurable), no `Retry-After`: waiting does not help | — |
//! | no usable key, under [`MissingKey::Reject`](crate::policy::MissingKey) | 400 Bad Request (configurable) | — |
//! | a shared (Redis) check got no decision and its failure policy denies ([`Outcome::Unavailable`](crate::policy::Outcome::Unavailable)) | 503 Service Unavailable (configurable), no `RateLimit` field | — |
//!
//! - **`Retry-After` is rounded up, never down**: a client that waits exactly that long
//!   gets through (if nothing else takes from its keys meanwhile), so a wait of
//!   1.000000001 s is `Retry-After: 2`, and exactly 1 s is `1`. It is never 0.
//! - Overflow is the server short of room to track clients, not the client over its
//!   quota, hence 503 — the draft's "temporary reduced capacity" — with its hint.
//! - **A shared check answered by its failure policy** (Redis down, slow, or its
//!   circuit breaker open) knows nothing of its key: a refusal is 503 with the
//!   `temporary-reduced-capacity` problem type and **no `Retry-After`** (nobody knows
//!   when Redis answers again), and any response with such a check — refused, or
//!   served by `FailurePolicy::Open` — carries **no `RateLimit` field**: the field
//!   names the most restrictive check, and the unknown one may be it, so reporting
//!   another check's `r` could tell the client it has quota it has not.
//!   `RateLimit-Policy` stays: the quotas are known. A route whose policy has shared
//!   checks is awaited ([`Policy::acquire_async`](crate::policy::Policy::acquire_async)),
//!   in the response future, without blocking a thread; a policy of in-process checks
//!   is asked in `call` as before, and a leased policy whose leases hold the cost too.
//! - Refusals carry an RFC 9457 problem-details body (`application/problem+json`)
//!   with the draft's problem types (`quota-exceeded`, `temporary-reduced-capacity`)
//!   and `violated-policies`: the checks that refused.
//! - Requests without a usable key: each check decides ([`MissingKey`]: reject,
//!   skip the check, or share one fallback key). A header key is usable when present
//!   once, non-empty, at most 256 bytes (configurable) and visible ASCII; anything
//!   else — absent, repeated, empty, huge, non-UTF-8 or control bytes — counts as
//!   missing. Bad input never panics and never yields a 500.
//! - Behind reverse proxies, [`RealIp`] keys on the client's address, read from the
//!   header that the proxies you trust append to, and only past them: a client that is
//!   not a trusted proxy can make its key nothing but its own address, whatever
//!   headers it sends (see [`RealIp`] and the guide's
//!   [behind a proxy](crate::guide::behind_a_proxy)).
//!
//! [`MissingKey`]: crate::policy::MissingKey
//!
//! # The RateLimit header fields
//! Every response of a route with a policy — allowed or refused — carries, following
//! [draft-ietf-httpapi-ratelimit-headers-11] (May 2026; both fields are
//! structured-field Lists, appended to any the inner service set):
//!
//! - `RateLimit-Policy: "per-user";q=100;w=60, "per-ip";q=300;w=60` — one item per
//!   check: `q` is the quota's capacity, `w` the window (capacity × refill interval)
//!   in whole seconds, rounded up (see [`Limit::window_secs`]).
//! - `RateLimit: "per-user";r=42;t=1` — one item, for the most restrictive check
//!   ([`Verdict::binding`]; the draft lets a server report only the limit closest to
//!   exhaustion): `r` is the quota available to its key, `t` the *effective window*:
//!   the seconds within which the key can use no more than `r`.
//!
//! **How `t` is computed** — it is an upper bound, rounded up: a limiter does not say
//! when a key's next unit arrives, only what it decided. The key can use more than `r`
//! once its next unit arrives; for a token bucket an admitted key short of tokens gains
//! one at the next point of its refill grid, within one refill interval. A denied key
//! may owe (a [settle](#charging-from-the-response) charged it more than it had) and
//! then gains nothing until refill has repaid the debt, however many intervals that
//! takes; its exact `retry_after` counts the debt, and bounds the next unit. So `t` =
//! the refill interval for an allowed request and `retry_after` for a denial (exact
//! for a cost-1 denial, later than the next unit for a larger cost), each rounded up
//! to whole seconds; for window limiters ([`Limit::windowed`]) the window replaces the
//! refill interval. Rounding up only lengthens the window a client spreads `r` over,
//! which the draft names as the server's safe side (its section 8.5: "return … a
//! higher effective window"). A denial's `Retry-After` is never earlier than the end
//! of its `t`, as the draft asks: they are equal.
//!
//! **Draft 10** defined `t` differently — the seconds "until additional quota … is
//! made available" — but for every limiter here the two definitions name the same
//! instant: the key can use no more than `r` exactly until its next unit arrives, so
//! the bound above is the value under either draft, and a client written for draft 10
//! reads these fields correctly. The syntax did not change between the drafts; the
//! tests check the fields the layer sends against the draft's own examples with a
//! structured-field parser.
//!
//! Headers report the quota each check advertises ([`Limit`]); a limiter whose
//! quota differs per key would need its own per-key `q`.
//!
//! # Charging from the response
//! Some costs are known only once the response is: the tokens a model call used, a
//! login that failed. A route's policy takes an estimate with each request and marks
//! the checks to settle ([`Check::cost_with`](crate::policy::Check::cost_with),
//! [`Check::settled`](crate::policy::Check::settled); see
//! [reserve, then settle](crate::policy#reserve-then-settle)), and
//! [`RateLimitLayerBuilder::settle_from`] reads the actual cost off each response's
//! head — a header the handler sets ([`cost_in_header`]), the status, or an extension
//! of the response:
//!
//! - **When**: as soon as the inner service returns the response head, before the
//!   layer returns the response: the client's next request sees the charge. The body
//!   is not waited for: a streaming body's cost must be known when its head is sent
//!   (a trailer is not read). A cost known only at the end of a stream is settled by
//!   the handler itself, with [`Policy::settle`](crate::policy::Policy::settle).
//! - **No report** (`None`) leaves the request at its estimate; so does a response
//!   future dropped before the response (the client went away) and an error from the
//!   inner service.
//! - **Counting only some responses** (a failed login, not a successful one) is a
//!   settlement at 1 for the responses that count and 0 for the others, from an
//!   estimate of 0 (refused once the key owes: after the quota's failures and the one
//!   that put it in debt, until refill has repaid it) or of 1 (refused once the
//!   quota's failures are charged; see
//!   [reserve, then settle](crate::policy#reserve-then-settle)).
//! - The response's `RateLimit` field reports its key as the request left it when
//!   admitted (its estimate taken), not after the settlement, which is read from the
//!   same head: the next response reports the settled state, and a refusal's
//!   `Retry-After` counts any debt.
//! - What each settlement did is left in the response's extensions as a
//!   [`Settlement`](crate::Settlement) (absent when there was none, or when a shared
//!   check's settlement did not reach its store); a route whose policy settles nothing
//!   is not affected, and costs nothing more.
//!
//! # Delay mode
//! With [`RateLimitLayerBuilder::delay`], a denied request (or a `max_keys`
//! overflow, on its hint) whose wait fits the maximum is held, re-asked after its exact `retry_after` (plus optional jitter,
//! which only adds), and forwarded once its policy allows it; one whose wait does not
//! fit is refused at once, without sleeping — like nginx's `burst` with `delay`. It
//! sleeps on tokio's timer, so it needs a tokio runtime with time enabled. See
//! [`crate::wait`] for the exact waiting semantics.
//!
//! # Dry run, metrics and logs
//! [`RateLimitLayerBuilder::dry_run`] runs every route's policy in dry run (shadow
//! mode): every check is asked and counted, the RateLimit fields are sent as they
//! would be were the limits enforced, and no request is refused or delayed. A single
//! check can be tried inside an enforced policy
//! ([`Check::dry_run`](crate::policy::Check::dry_run)); see
//! [dry run](crate::policy#dry-run). Such a check stays out of the RateLimit fields,
//! which report the enforced checks only: clients that follow them would otherwise
//! throttle themselves on a limit that is not enforced. The inner service finds the
//! policy's [`Verdict`](crate::policy::Verdict) in the request's extensions when the route's policy has
//! dry-run checks (`Extension<Verdict>` in axum), with what the dry run would have
//! refused. Named policies and limiters report their
//! decisions as metrics and events (features `metrics`, `tracing`: see
//! `turnstile::observe`); the example server exports them at `/metrics`.
//!
//! # Cost
//! In-process checks allocate nothing; the layer makes its `RateLimit` value and,
//! for refusals, the body per response (the HTTP stack allocates per request anyway).
//! A request whose policy awaits Redis also boxes its response future once, and the
//! policy allocates what a Redis check allocates anyway (its key, its command). A
//! request on a route that settles from the response copies its request head and
//! boxes its response future.
//! `results/http.md` measures the whole layer under a load generator.
//!
//! [draft-ietf-httpapi-ratelimit-headers-11]:
//!     https://datatracker.ietf.org/doc/draft-ietf-httpapi-ratelimit-headers/11/
//! [`Policy`]: crate::policy::Policy
//! [`Limit`]: crate::policy::Limit
//! [`Limit::windowed`]: crate::policy::Limit::windowed
//! [`Limit::window_secs`]: crate::policy::Limit::window_secs
//! [`Verdict::binding`]: crate::policy::Verdict::binding

mod address;
mod cidr;
mod fields;
mod forwarded;
mod key;
mod layer;
mod real_ip;
mod refusal;
mod routes;
mod service;
mod settle;
mod table;

pub use cidr::{Cidr, CidrError};
pub use fields::{RATELIMIT, RATELIMIT_POLICY};
pub use forwarded::ProxyHeader;
pub use key::{HeaderKey, PeerIp};
pub use layer::{LayerConfigError, RateLimitLayer, RateLimitLayerBuilder};
pub use real_ip::RealIp;
pub use service::{RateLimitService, ResponseFuture};
pub use settle::cost_in_header;
#[cfg(feature = "config")]
pub(crate) use {routes::Routes, table::Table};
