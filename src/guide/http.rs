//! Rate limiting an HTTP service with the tower layer (feature `tower`): routes,
//! the example server and what a client sees, one limit for a whole fleet, and what
//! the layer costs.
//!
//! What the layer answers in each case (429, 503, 400, `Retry-After` rounding), the
//! `RateLimit-Policy` and `RateLimit` fields and how their `t` is computed, delay mode
//! and dry run are stated once, on [`crate::http`]; the rules of the policies it asks
//! are on [`crate::policy`].
//!
//! ```toml
//! turnstile-ratelimit = { version = "0.2", features = ["tower"] }
//! ```
//!
//! # Routes
//! A [`RateLimitLayer`] (axum, hyper, tonic) holds one [`Policy`] per route: path
//! prefixes on whole segments (`/balance` covers `/balance/eur`, not `/balances`) or
//! predicates over the request head, first match wins, else the fallback policy. Its
//! state is shared by every clone of the layer and the service. A limiter can serve
//! several routes' policies, as the per-IP one does here:
//!
//! ```rust,no_run
//! # #[cfg(feature = "tower")]
//! # mod example {
//! use axum::{Router, extract::ConnectInfo, routing::get};
//! use http::HeaderName;
//! use std::net::{IpAddr, SocketAddr};
//! use std::sync::Arc;
//! use turnstile::http::{HeaderKey, PeerIp, RateLimitLayer};
//! use turnstile::policy::{Check, Policy};
//! use turnstile::{Quota, TokenBucket};
//!
//! fn app() -> Result<Router, Box<dyn std::error::Error>> {
//!     let (user_quota, ip_quota) = (Quota::per_minute(100)?, Quota::per_minute(300)?);
//!     let per_ip = Arc::new(TokenBucket::<IpAddr>::new(ip_quota)?);
//!     let policy = |name: &str, quota: Quota| -> Result<_, Box<dyn std::error::Error>> {
//!         let per_user = Arc::new(TokenBucket::<String>::new(quota)?);
//!         Ok(Policy::builder()
//!             .check(Check::from_limiter(name, per_user,
//!                 HeaderKey::new(HeaderName::from_static("x-api-key"))))
//!             .check(Check::from_limiter("per-ip", per_ip.clone(),
//!                 PeerIp::from_extension(|info: &ConnectInfo<SocketAddr>| info.0)))
//!             .build()?)
//!     };
//!     let layer = RateLimitLayer::builder(policy("default", user_quota)?) // every other path
//!         .prefix("/transfer", policy("transfer", Quota::per_minute(10)?)?)
//!         .build()?;
//!     // Serve with .into_make_service_with_connect_info::<SocketAddr>() for the peer address.
//!     Ok(Router::new().route("/transfer", get(|| async { "ok" })).layer(layer))
//! }
//! # }
//! ```
//!
//! Keys: [`PeerIp`] (the connection's peer address; IPv4-mapped IPv6 counted as IPv4;
//! one key per IPv6 `/64` by default, `ipv6_prefix` to change it), [`RealIp`] (the
//! client's address behind reverse proxies you trust: [`behind_a_proxy`](super::behind_a_proxy)),
//! [`HeaderKey`] (an API key; what makes one usable is on [`crate::http`]), or any
//! closure.
//!
//! # The example server, and what a client sees
//! `examples/http_server.rs` serves an endpoint table: `GET /balance` 100 per minute
//! per user, `POST /transfer` 10, `POST /login` 5, `POST /chat` 300 tokens (reserved
//! from the request, settled from the tokens its response reports:
//! [`llm_token_budgets`](super::llm_token_budgets)), anything else 50; plus 300 per
//! minute per IP; the user is the `x-api-key` header. It reads the table from
//! `examples/limits.toml` and reloads it live ([`limits_from_a_file`](super::limits_from_a_file)).
//!
//! ```sh
//! cargo run --release --example http_server --features tower,metrics,redis,config
//! ```
//!
//! With `-- --redis redis://127.0.0.1/` every limit lives in Redis (add `--leased` for
//! leased tokens), so any number of these servers share them: two processes admit a
//! client spread across both exactly its quota once (`results/http.md`, "One limit for
//! two servers"). Its limiters and policies are named, so
//! `curl http://127.0.0.1:3000/metrics` shows their decisions in Prometheus format
//! (`turnstile::observe`, features `metrics` and `tracing`). Captured with `curl -i`:
//!
//! ```text
//! $ curl -i -H "x-api-key: alice" http://127.0.0.1:3000/balance
//! HTTP/1.1 200 OK
//! content-type: text/plain; charset=utf-8
//! ratelimit-policy: "balance";q=100;w=60, "per-ip";q=300;w=60
//! ratelimit: "balance";r=99;t=1
//! content-length: 20
//! date: Sun, 29 Nov 2026 20:33:35 GMT
//!
//! balance: 100.00 EUR
//!
//! $ for i in 1 2 3 4 5; do curl -s -o /dev/null -w "%{http_code} " -X POST -H "x-api-key: alice" http://127.0.0.1:3000/login; done
//! 200 200 200 200 200
//! $ curl -i -X POST -H "x-api-key: alice" http://127.0.0.1:3000/login
//! HTTP/1.1 429 Too Many Requests
//! content-type: application/problem+json
//! retry-after: 11
//! ratelimit-policy: "login";q=5;w=60, "per-ip";q=300;w=60
//! ratelimit: "login";r=0;t=11
//! content-length: 141
//! date: Sun, 29 Nov 2026 20:33:35 GMT
//!
//! {"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Quota Exceeded","status":429,"violated-policies":["login"]}
//!
//! $ curl -i http://127.0.0.1:3000/balance
//! HTTP/1.1 400 Bad Request
//! content-type: application/problem+json
//! ratelimit-policy: "balance";q=100;w=60, "per-ip";q=300;w=60
//! content-length: 149
//! date: Sun, 29 Nov 2026 20:33:35 GMT
//!
//! {"type":"about:blank","title":"Bad Request","status":400,"detail":"the request has no usable key for the rate limit","violated-policies":["balance"]}
//! ```
//!
//! # One limit for the whole fleet
//! A check on a Redis limiter ([`Check::shared`], keys as bytes) joins a policy beside
//! in-process checks, with every rule policies have. The layer awaits such a route in
//! its response future; a route of in-process checks is asked synchronously, at no
//! cost. When Redis cannot answer, the check's failure policy does; what the layer
//! then sends is on [`crate::http`].
//!
//! ```rust,no_run
//! # #[cfg(all(feature = "tower", feature = "redis"))]
//! # mod example {
//! use axum::{Router, extract::ConnectInfo, routing::get};
//! use std::net::{IpAddr, SocketAddr};
//! use std::sync::Arc;
//! use turnstile::http::{HeaderKey, PeerIp, RateLimitLayer};
//! use turnstile::policy::{Check, Limit, Policy};
//! use turnstile::redis::{FailurePolicy, RedisTokenBucket};
//! use turnstile::{Quota, TokenBucket};
//!
//! // Inside a tokio runtime: every server of the fleet runs this, on one Redis.
//! fn app() -> Result<Router, Box<dyn std::error::Error>> {
//!     let (per_user, per_ip) = (Quota::per_minute(100)?, Quota::per_minute(300)?);
//!     let users = RedisTokenBucket::builder(per_user, FailurePolicy::Closed)
//!         .prefix("api:per-user:")
//!         .connect("redis://127.0.0.1/")?;
//!     let policy = Policy::builder() // 100 a minute per user across the fleet
//!         .check(Check::shared("per-user", Arc::new(users), Limit::steady(per_user),
//!             HeaderKey::new(http::HeaderName::from_static("x-api-key"))))
//!         .check(Check::from_limiter("per-ip", Arc::new(TokenBucket::<IpAddr>::new(per_ip)?),
//!             PeerIp::from_extension(|i: &ConnectInfo<SocketAddr>| i.0)))
//!         .build()?;
//!     let layer = RateLimitLayer::builder(policy).build()?;
//!     Ok(Router::new().route("/", get(|| async { "ok" })).layer(layer))
//! }
//! # }
//! ```
//!
//! A request the per-IP check refuses gives its per-user token back to Redis (one
//! atomic script, capped at the capacity); leased checks
//! ([`redis`](super::redis#leases-global-limits-at-local-speed)) answer from their
//! lease without a round trip. Tested against real `redis-server` processes
//! (`tests/redis/policy.rs`, `tests/http/shared.rs`): refunds exact across Redis and
//! in-process keys, exact admission counts under concurrency, fallbacks, dry run.
//!
//! # What it costs
//! Measured through the example server under `wrk`, with and without the layer, on a
//! handler that does nothing (so the layer's share is as large as it gets): requests
//! per second and instructions per request when checking and allowing, when refusing,
//! with metrics recorded, behind proxies and with checks in Redis. The figures,
//! commands and caveats are in `results/http.md`; `results/ANALYSIS.md` ("HTTP") says
//! where the instructions go.
//!
//! [`RateLimitLayer`]: crate::http::RateLimitLayer
//! [`PeerIp`]: crate::http::PeerIp
//! [`RealIp`]: crate::http::RealIp
//! [`HeaderKey`]: crate::http::HeaderKey
//! [`Policy`]: crate::policy::Policy
//! [`Check::shared`]: crate::policy::Check::shared
