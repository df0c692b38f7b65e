//! An API behind turnstile's tower layer. The API key in `x-api-key` names the user;
//! each endpoint has its own per-user limit, and one per-IP limit covers them all:
//!
//! | endpoint       | per user       |
//! |----------------|----------------|
//! | GET /balance   | 100 per minute |
//! | POST /transfer | 10 per minute  |
//! | POST /login    | 5 per minute   |
//! | anything else  | 50 per minute  |
//!
//! plus 300 per minute per IP address. A request without an API key gets 400.
//!
//! Every limiter and policy is named, so their decisions, keys and sweeps are exported
//! for Prometheus at `/metrics` (which is not rate-limited).
//!
//! Run:  `cargo run --release --example http_server --features tower,metrics [-- ADDR] [--generous | --no-limits] [--no-recorder]`
//! Then: `curl -i -H 'x-api-key: alice' http://127.0.0.1:3000/balance`
//! and   `curl http://127.0.0.1:3000/metrics`
//!
//! `--generous` keeps the same layer and checks but with quotas of a million per
//! second (so every request passes: the cost of checking, not of refusing);
//! `--no-limits` serves without the layer; `--no-recorder` installs no metrics
//! recorder (the limiters are named, but report to no one: the cost of the `metrics`
//! feature alone). They exist for `results/http.md`.

use axum::Router;
use axum::extract::ConnectInfo;
use axum::routing::{get, post};
use http::HeaderName;
use http::request::Parts;
use metrics_exporter_prometheus::PrometheusBuilder;
use std::error::Error;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;
use turnstile::http::{HeaderKey, PeerIp, RateLimitLayer};
use turnstile::policy::{Check, Limit, Policy};
use turnstile::{Quota, QuotaError, TokenBucket};

const API_KEY: HeaderName = HeaderName::from_static("x-api-key");

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    let mut addr: SocketAddr = "127.0.0.1:3000".parse()?;
    let (mut generous, mut no_limits, mut recorder) = (false, false, true);
    for arg in std::env::args().skip(1) {
        match arg.as_str() {
            "--generous" => generous = true,
            "--no-limits" => no_limits = true,
            "--no-recorder" => recorder = false,
            other => addr = other.parse()?,
        }
    }
    // Installed before the limiters are built: they register their metrics then.
    let prometheus = if recorder {
        Some(PrometheusBuilder::new().install_recorder()?)
    } else {
        None
    };

    let app = Router::new()
        .route("/balance", get(|| async { "balance: 100.00 EUR\n" }))
        .route("/transfer", post(|| async { "transfer accepted\n" }))
        .route("/login", post(|| async { "welcome\n" }))
        .fallback(|| async { "hello\n" });
    let app = if no_limits {
        app
    } else {
        app.layer(rate_limits(generous)?)
    };
    // Added after the layer, so scrapes are not rate-limited.
    let app = match prometheus {
        Some(handle) => app.route("/metrics", get(move || async move { handle.render() })),
        None => app,
    };

    let listener = tokio::net::TcpListener::bind(addr).await?;
    let mode = match (no_limits, generous) {
        (true, _) => "no limits",
        (false, true) => "generous limits",
        (false, false) => "limits on",
    };
    println!("listening on http://{} ({mode})", listener.local_addr()?);
    let app = app.into_make_service_with_connect_info::<SocketAddr>();
    axum::serve(listener, app).await?;
    Ok(())
}

/// The endpoint table, keyed by user, and one per-IP limit shared by every endpoint.
fn rate_limits(generous: bool) -> Result<RateLimitLayer, Box<dyn Error>> {
    let quota = |per_minute: u32| -> Result<Quota, QuotaError> {
        if generous {
            // One token per microsecond, bursts of 500: a million per second.
            Quota::new(500, Duration::from_micros(1))
        } else {
            Quota::per_minute(per_minute)
        }
    };
    let ip_quota = quota(300)?;
    // One limiter: an address's requests to every endpoint count together.
    let per_ip = Arc::new(
        TokenBucket::<IpAddr>::builder(ip_quota)
            .name("per-ip")
            .build(),
    );

    let endpoint = |name: &str, per_minute: u32| -> Result<Policy<Parts>, Box<dyn Error>> {
        let user_quota = quota(per_minute)?;
        let per_user = Arc::new(
            TokenBucket::<String>::builder(user_quota)
                .name(format!("{name}-per-user"))
                .build(),
        );
        let policy = Policy::builder()
            .check(Check::new(
                name,
                per_user,
                Limit::steady(user_quota),
                HeaderKey::new(API_KEY),
            ))
            .check(Check::new(
                "per-ip",
                Arc::clone(&per_ip),
                Limit::steady(ip_quota),
                PeerIp::from_extension(|info: &ConnectInfo<SocketAddr>| info.0),
            ))
            .name(name)
            .build()?;
        Ok(policy)
    };

    let layer = RateLimitLayer::builder(endpoint("default", 50)?)
        .prefix("/balance", endpoint("balance", 100)?)
        .prefix("/transfer", endpoint("transfer", 10)?)
        .prefix("/login", endpoint("login", 5)?)
        .build()?;
    Ok(layer)
}
