//! An API behind turnstile's tower layer. The API key in `x-api-key` names the user;
//! each endpoint has its own per-user limit, and one per-IP limit covers them all —
//! the endpoint table of `examples/limits.toml`:
//!
//! | endpoint       | per user       |
//! |----------------|----------------|
//! | GET /balance   | 100 per minute |
//! | POST /transfer | 10 per minute  |
//! | POST /login    | 5 per minute   |
//! | POST /chat     | 300 tokens per minute |
//! | anything else  | 50 per minute  |
//!
//! plus 300 per minute per IP address. A request without an API key gets 400.
//!
//! **Tokens, reserved and settled**: `/chat` stands for a model call. A request
//! reserves an estimate of its tokens — a quarter of its body's `Content-Length`, at
//! most the capacity — and its handler answers with the tokens it used in
//! `x-tokens-used` (`?used=N` makes it report N; otherwise the estimate), from which
//! the layer settles the request: unused tokens go back, extra ones are charged, even
//! into debt, which the next request's `Retry-After` counts. In the limits file the
//! check is `cost = { estimate = "chat" }, settled = true` (the program registers the
//! estimate as `"chat"`) and the layer's `settle_from = { header = "x-tokens-used" }`.
//! Try
//! `curl -i -X POST -H 'x-api-key: alice' -d 'hello, model' 'http://127.0.0.1:3000/chat?used=500'`
//! twice.
//!
//! **Limits from a file, reloaded live** (feature `config`): the server reads its table
//! from `examples/limits.toml` (`--limits PATH` for another file) and reloads it on
//! SIGHUP and within two seconds of the file changing (a tokio task polls its
//! modification time and length each second and reads a change once two polls agree:
//! no file-watching dependency for one file), logging what changed; a file with a mistake is refused with its line and
//! field, and the running limits stay. Keys keep their state across a reload (a
//! lowered quota caps what a key has left; a throttled key stays throttled).
//! `/metrics` reports the running version as `turnstile_config_version` and whether
//! the last reload was applied as `turnstile_config_last_reload_successful`.
//!
//! Every limiter and policy is named, so their decisions, keys and sweeps are exported
//! for Prometheus at `/metrics` (which is not rate-limited).
//!
//! Run:  `cargo run --release --example http_server --features tower,metrics,redis,config [-- ADDR] [--limits PATH] [--generous | --no-limits] [--in-code] [--no-recorder] [--trust-proxy CIDR ... [--forwarded]] [--redis URL [--leased] [--one-check] [--bare]]`
//! Then: `curl -i -H 'x-api-key: alice' http://127.0.0.1:3000/balance`
//! and   `curl http://127.0.0.1:3000/metrics`
//!
//! `--generous` keeps the same layer and checks but with quotas of a million per
//! second (and bursts of a million) (so every request passes: the cost of checking, not of refusing),
//! read from `examples/limits-generous.toml`;
//! `--no-limits` serves without the layer; `--no-recorder` installs no metrics
//! recorder (the limiters are named, but report to no one: the cost of the `metrics`
//! feature alone). They exist for `results/http.md`.
//!
//! **The table in code**: `--in-code` builds the same table in code as a fixed layer
//! (no reloads: the comparison for what reading routes through a reloadable table
//! costs), and so do `--trust-proxy`, `--one-check` and the Redis modes below, which
//! `results/http.md`'s scripts call. (A limits file says the same with
//! `[client_address] trusted_proxies = [...]` and `store = { redis = "URL" }`, leased
//! with `lease = {}` in the store.)
//!
//! **Behind a reverse proxy**: `--trust-proxy CIDR` (repeatable) trusts the proxies in
//! that range, and the per-IP limit keys on the client's address from the
//! `X-Forwarded-For` they append to (`--forwarded`: from `Forwarded`, RFC 7239),
//! through `RealIp`: a client that is not a trusted proxy is keyed by its own address,
//! whatever it sends. Without it the per-IP limit keys on the peer (`PeerIp`) and
//! reads no header.
//!
//! **Shared mode**, for a fleet: `--redis URL` keeps every limit in Redis (one
//! `RedisTokenBucket` per endpoint's per-user limit and one for the per-IP limit,
//! fixed prefixes), so any number of these servers on one Redis admit each user and
//! address its quota once between them; `--leased` with it leases the tokens
//! (`RedisLeasedTokenBucket`) and serves them in process. The shared limits fail
//! closed: while Redis is down a request is refused with 503 (no `RateLimit` field).
//! For `results/http.md` also:
//! `--one-check` (policies with the per-user check alone), and `--bare` (no layer:
//! the `/balance` handler asks the per-user Redis limiter itself, 429 on a denial —
//! what the layer is compared with).

use axum::Router;
use axum::extract::ConnectInfo;
use axum::routing::{get, post};
use http::HeaderName;
use http::request::Parts;
use metrics_exporter_prometheus::PrometheusBuilder;
use std::error::Error;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use turnstile::config::{Config, Extractors, LiveLimits};
use turnstile::http::{
    Cidr, HeaderKey, PeerIp, ProxyHeader, RateLimitLayer, RealIp, cost_in_header,
};
use turnstile::policy::{Check, KeyExtractor, Limit, PerRequest, Policy, PolicyCheck};
use turnstile::redis::lease::RedisLeasedTokenBucket;
use turnstile::redis::{FailurePolicy, RedisTokenBucket};
use turnstile::{Quota, QuotaError, TokenBucket};

const API_KEY: HeaderName = HeaderName::from_static("x-api-key");

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    let mut addr: SocketAddr = "127.0.0.1:3000".parse()?;
    let (mut generous, mut no_limits, mut recorder) = (false, false, true);
    let mut store = Store::InProcess;
    let (mut one_check, mut bare, mut in_code) = (false, false, false);
    let mut limits_file = None;
    let (mut trusted, mut header) = (Vec::new(), ProxyHeader::XForwardedFor);
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--generous" => generous = true,
            "--no-limits" => no_limits = true,
            "--no-recorder" => recorder = false,
            "--redis" => store = Store::Redis(args.next().ok_or("--redis needs a URL")?),
            "--leased" => store = store.leased()?,
            "--one-check" => one_check = true,
            "--bare" => bare = true,
            "--in-code" => in_code = true,
            "--limits" => {
                limits_file = Some(PathBuf::from(args.next().ok_or("--limits needs a path")?))
            }
            "--trust-proxy" => {
                let range = args.next().ok_or("--trust-proxy needs a CIDR")?;
                trusted.push(range.parse::<Cidr>()?);
            }
            "--forwarded" => header = ProxyHeader::Forwarded,
            other => addr = other.parse()?,
        }
    }
    // Installed before the limiters are built: they register their metrics then.
    let prometheus = if recorder {
        Some(PrometheusBuilder::new().install_recorder()?)
    } else {
        None
    };

    let proxies = (!trusted.is_empty()).then_some(Proxies { trusted, header });
    // The file, unless a flag asks for what only the table in code does.
    let from_file =
        !(in_code || one_check || proxies.is_some() || !matches!(store, Store::InProcess));
    let limits_file = limits_file.unwrap_or_else(|| {
        let name = if generous {
            "limits-generous.toml"
        } else {
            "limits.toml"
        };
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("examples")
            .join(name)
    });
    let limits = Limits {
        generous,
        store,
        one_check,
        proxies,
    };
    let app = if bare {
        bare_balance(&limits)?
    } else {
        Router::new().route("/balance", get(|| async { "balance: 100.00 EUR\n" }))
    };
    let app = app
        .route("/transfer", post(|| async { "transfer accepted\n" }))
        .route("/login", post(|| async { "welcome\n" }))
        .route("/chat", post(chat))
        .fallback(|| async { "hello\n" });
    let app = if no_limits || bare {
        app
    } else if from_file {
        app.layer(live_limits(limits_file.clone())?)
    } else {
        app.layer(rate_limits(&limits)?)
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
    let store = match from_file && !(no_limits || bare) {
        true => format!("in process, from {}", limits_file.display()),
        false => limits.store.describe(),
    };
    let peers = match &limits.proxies {
        None => "per-IP by the peer address".to_owned(),
        Some(proxies) => proxies.describe(),
    };
    println!(
        "listening on http://{} ({mode}, {store}, {peers})",
        listener.local_addr()?
    );
    let app = app.into_make_service_with_connect_info::<SocketAddr>();
    axum::serve(listener, app).await?;
    Ok(())
}

/// The header in which `/chat` reports the tokens it used.
const TOKENS_USED: HeaderName = HeaderName::from_static("x-tokens-used");

/// `/chat`'s per-user tokens a minute.
const CHAT_TOKENS_PER_MINUTE: u32 = 300;

/// What a `/chat` request reserves: a quarter of its body's declared length (about
/// four bytes a token), at most the capacity, so a long prompt waits rather than being
/// refused outright. A body without a length (chunked) or with one that is not a
/// number reserves the capacity: the worst case, so that leaving the length out, or
/// declaring more than fits, never starts a call for free.
fn chat_estimate(request: &Parts) -> u32 {
    estimate_from(&request.headers)
}

fn estimate_from(headers: &http::HeaderMap) -> u32 {
    let length = headers.get(http::header::CONTENT_LENGTH);
    match length.map(|value| value.to_str().ok()?.trim().parse::<u64>().ok()) {
        Some(Some(bytes)) => u32::try_from(bytes / 4)
            .unwrap_or(u32::MAX)
            .min(CHAT_TOKENS_PER_MINUTE),
        None | Some(None) => CHAT_TOKENS_PER_MINUTE,
    }
}

/// A stand-in for a model call: answers, reporting the tokens it used in
/// `x-tokens-used` — `?used=N` in the query, or else the estimate (the layer reads the
/// header and settles the request).
async fn chat(uri: http::Uri, headers: http::HeaderMap) -> impl axum::response::IntoResponse {
    let asked = uri.query().and_then(|query| {
        let used = query
            .split('&')
            .find_map(|pair| pair.strip_prefix("used="))?;
        used.parse::<u32>().ok()
    });
    let used = asked.unwrap_or_else(|| estimate_from(&headers));
    (
        [(TOKENS_USED, used.to_string())],
        format!("answer ({used} tokens)\n"),
    )
}

/// A per-request cost made from the request head.
type Estimate = fn(&Parts) -> u32;

/// `check` as a policy check; with an `estimate`, costing that per request and
/// settled at the cost its response reports.
fn costed<L: ?Sized, K, E>(check: Check<L, K, E>, estimate: Option<Estimate>) -> PolicyCheck<Parts>
where
    Check<L, K, E>: Into<PolicyCheck<Parts>>,
    Check<L, K, E, PerRequest<Estimate>>: Into<PolicyCheck<Parts>>,
{
    match estimate {
        None => check.into(),
        Some(estimate) => check.cost_with(estimate).settled().into(),
    }
}

/// Where the limits live.
enum Store {
    InProcess,
    /// Redis at this URL, a script call per check.
    Redis(String),
    /// Redis at this URL, tokens leased.
    Leased(String),
}

impl Store {
    fn leased(self) -> Result<Self, &'static str> {
        match self {
            Store::Redis(url) | Store::Leased(url) => Ok(Store::Leased(url)),
            Store::InProcess => Err("--leased comes after --redis URL"),
        }
    }

    fn describe(&self) -> String {
        match self {
            Store::InProcess => "in process".into(),
            Store::Redis(url) => format!("shared through Redis at {url}"),
            Store::Leased(url) => format!("leased from Redis at {url}"),
        }
    }
}

/// The reverse proxies trusted to say who the client is.
struct Proxies {
    trusted: Vec<Cidr>,
    header: ProxyHeader,
}

impl Proxies {
    fn describe(&self) -> String {
        let ranges: Vec<String> = self.trusted.iter().map(Cidr::to_string).collect();
        let header = self.header.name();
        format!(
            "per-IP by the client behind proxies in {} ({header})",
            ranges.join(", ")
        )
    }
}

/// How the server limits.
struct Limits {
    generous: bool,
    store: Store,
    one_check: bool,
    /// `None`: the peer is the client.
    proxies: Option<Proxies>,
}

impl Limits {
    fn quota(&self, per_minute: u32) -> Result<Quota, QuotaError> {
        if self.generous {
            // One token per microsecond: a million per second, and as large a burst
            // (a leased limiter's leases are up to 1/32 of it).
            Quota::new(1_000_000, Duration::from_micros(1))
        } else {
            Quota::per_minute(per_minute)
        }
    }

    /// A check named `name` under `quota`, keyed by `key`, on a limiter in the store:
    /// in process (`local` makes it), or in Redis under the prefix `turnstile:NAME:`;
    /// costing 1, or with an `estimate` that per request, settled from the response.
    fn check<E, K>(
        &self,
        name: &str,
        quota: Quota,
        key: E,
        local: impl FnOnce() -> Arc<TokenBucket<K>>,
        estimate: Option<Estimate>,
    ) -> Result<PolicyCheck<Parts>, Box<dyn Error>>
    where
        E: KeyExtractor<Parts> + 'static,
        E::Key: turnstile::KeyRef<K> + AsRef<[u8]>,
        K: std::borrow::Borrow<E::Key> + std::hash::Hash + Eq + Clone + Send + Sync + 'static,
    {
        let limit = Limit::steady(quota);
        let prefix = format!("turnstile:{name}:");
        let check = match &self.store {
            Store::InProcess => costed(Check::new(name, local(), limit, key), estimate),
            Store::Redis(url) => {
                let limiter = RedisTokenBucket::builder(quota, FailurePolicy::Closed)
                    .prefix(prefix)
                    .name(name.to_owned())
                    .connect(url.as_str())?;
                costed(Check::shared(name, Arc::new(limiter), limit, key), estimate)
            }
            Store::Leased(url) => {
                let limiter = RedisLeasedTokenBucket::builder(quota, FailurePolicy::Closed)
                    .prefix(prefix)
                    .name(name.to_owned())
                    .connect(url.as_str())?;
                costed(Check::shared(name, Arc::new(limiter), limit, key), estimate)
            }
        };
        Ok(check)
    }
}

/// The client's address as a key of bytes, for Redis: `PeerIp`'s or, behind trusted
/// proxies, `RealIp`'s address (IPv4-mapped IPv6 as IPv4, IPv6 by its /64), as its
/// octets.
enum ClientIpBytes {
    Peer(PeerIp<ConnectInfo<SocketAddr>>),
    BehindProxies(RealIp<ConnectInfo<SocketAddr>>),
}

impl KeyExtractor<Parts> for ClientIpBytes {
    type Key = IpBytes;

    fn with_key<T>(&self, request: &Parts, with: impl FnOnce(&IpBytes) -> T) -> Option<T> {
        let with = |ip: &IpAddr| with(&IpBytes::of(*ip));
        match self {
            Self::Peer(peer) => peer.with_key(request, with),
            Self::BehindProxies(real) => real.with_key(request, with),
        }
    }
}

/// An IP address's octets (4 or 16), as an in-process key and as Redis bytes alike.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct IpBytes {
    octets: [u8; 16],
    len: u8,
}

impl IpBytes {
    fn of(ip: IpAddr) -> Self {
        let mut octets = [0; 16];
        let len = match ip {
            IpAddr::V4(v4) => {
                octets[..4].copy_from_slice(&v4.octets());
                4
            }
            IpAddr::V6(v6) => {
                octets = v6.octets();
                16
            }
        };
        Self { octets, len }
    }
}

impl AsRef<[u8]> for IpBytes {
    fn as_ref(&self) -> &[u8] {
        &self.octets[..usize::from(self.len)]
    }
}

/// `--bare`: a `/balance` whose handler asks the per-user Redis limiter itself (the
/// comparison for the layer's cost), without the layer.
fn bare_balance(limits: &Limits) -> Result<Router, Box<dyn Error>> {
    let (Store::Redis(url) | Store::Leased(url)) = &limits.store else {
        return Err("--bare needs --redis URL".into());
    };
    let limiter = RedisTokenBucket::builder(limits.quota(100)?, FailurePolicy::Closed)
        .prefix("turnstile:balance:")
        .connect(url.as_str())?;
    let handler = move |headers: http::HeaderMap| {
        let limiter = limiter.clone();
        async move {
            let Some(user) = headers.get(&API_KEY) else {
                return (http::StatusCode::BAD_REQUEST, "no API key\n");
            };
            if limiter.acquire(user.as_bytes(), 1).await.is_allowed() {
                (http::StatusCode::OK, "balance: 100.00 EUR\n")
            } else {
                (http::StatusCode::TOO_MANY_REQUESTS, "slow down\n")
            }
        }
    };
    Ok(Router::new().route("/balance", get(handler)))
}

/// The endpoint table, keyed by user, and one per-IP limit shared by every endpoint.
fn rate_limits(limits: &Limits) -> Result<RateLimitLayer, Box<dyn Error>> {
    let ip_quota = limits.quota(300)?;
    // One limiter: an address's requests to every endpoint count together.
    let per_ip = Arc::new(
        TokenBucket::<IpBytes>::builder(ip_quota)
            .name("per-ip")
            .build()?,
    );
    let peer_address = |info: &ConnectInfo<SocketAddr>| info.0;
    let peer = || match &limits.proxies {
        None => ClientIpBytes::Peer(PeerIp::from_extension(peer_address)),
        Some(proxies) => {
            let real = RealIp::from_extension(proxies.header, peer_address);
            let real = proxies
                .trusted
                .iter()
                .fold(real, |real, &range| real.trust(range));
            ClientIpBytes::BehindProxies(real)
        }
    };

    let settled_endpoint = |name: &str,
                            per_minute: u32,
                            estimate: Option<Estimate>|
     -> Result<Policy<Parts>, Box<dyn Error>> {
        let user_quota = limits.quota(per_minute)?;
        let per_user = || {
            Arc::new(
                TokenBucket::<String>::builder(user_quota)
                    .name(format!("{name}-per-user"))
                    .build()
                    .expect("a token bucket holds every quota"),
            )
        };
        let key = HeaderKey::new(API_KEY);
        let per_user = limits.check(name, user_quota, key, per_user, estimate)?;
        let mut policy = Policy::builder().check(per_user);
        if !limits.one_check {
            // One limit per address across endpoints: the one in-process limiter, or
            // in Redis the one prefix.
            let per_ip = || Arc::clone(&per_ip);
            let per_ip = limits.check("per-ip", ip_quota, peer(), per_ip, None)?;
            policy = policy.check(per_ip);
        }
        Ok(policy.name(name).build()?)
    };
    let endpoint = |name: &str, per_minute: u32| settled_endpoint(name, per_minute, None);

    let layer = RateLimitLayer::builder(endpoint("default", 50)?)
        .prefix("/balance", endpoint("balance", 100)?)
        .prefix("/transfer", endpoint("transfer", 10)?)
        .prefix("/login", endpoint("login", 5)?)
        .prefix(
            "/chat",
            settled_endpoint("chat", CHAT_TOKENS_PER_MINUTE, Some(chat_estimate))?,
        )
        // `/chat`'s handler reports the tokens it used; the other routes settle nothing.
        .settle_from(|response| cost_in_header(response, &TOKENS_USED))
        .build()?;
    Ok(layer)
}

/// The layer of the limits in `path`, reloaded on SIGHUP and when the file changes.
fn live_limits(path: PathBuf) -> Result<RateLimitLayer, Box<dyn Error>> {
    // axum records the peer address as `ConnectInfo<SocketAddr>`.
    let extractors = Extractors::new()
        .peer_address(|info: &ConnectInfo<SocketAddr>| info.0)
        // `/chat`'s estimate, named in the file's check: `cost = { estimate = "chat" }`.
        .estimate("chat", chat_estimate);
    let limits = LiveLimits::new(Config::load(&path)?, extractors)?;
    println!("limits: version 1 from {}", path.display());
    let layer = limits.layer();
    // Installed now, before the server accepts a connection: a SIGHUP that arrives
    // early reloads instead of killing the process (its default action).
    let hangups = {
        use tokio::signal::unix::{SignalKind, signal};
        signal(SignalKind::hangup())?
    };
    tokio::spawn(reload_on_change(limits.clone(), path.clone()));
    tokio::spawn(reload_on_sighup(limits, path, hangups));
    Ok(layer)
}

/// Reloads `path` into `limits` and says what changed, or why nothing did. The file's
/// reading and parsing block: they run on tokio's blocking pool, not on a worker that
/// serves requests. (`LiveLimits` reports each outcome in `/metrics` as
/// `turnstile_config_last_reload_successful`.)
async fn reload(limits: &LiveLimits, path: &Path, why: &str) {
    let (limits, path) = (limits.clone(), path.to_owned());
    let why = why.to_owned();
    let reloaded = tokio::task::spawn_blocking(move || match limits.reload_file(&path) {
        Ok(changes) => println!("limits ({why}): {changes}"),
        Err(error) => eprintln!(
            "limits ({why}): refused, version {} still running: {error}",
            limits.version()
        ),
    });
    if let Err(error) = reloaded.await {
        eprintln!("limits: the reload did not finish: {error}");
    }
}

async fn reload_on_sighup(
    limits: LiveLimits,
    path: PathBuf,
    mut hangups: tokio::signal::unix::Signal,
) {
    while hangups.recv().await.is_some() {
        reload(&limits, &path, "SIGHUP").await;
    }
}

/// Polls the file's modification time and length once a second, and reloads a change
/// once two polls in a row see the same stamp: a file being written in place (`cat >`,
/// an editor that rewrites it) is read when the writing has paused, not half-way.
/// That narrows the window, it does not close it: a writer idle for a second mid-file
/// is read half-written, and a file cut short but valid cannot be told from an edit.
/// The library refuses a file that is empty, defines no limit or no policy, or drops
/// the running `[layer]`, and the running limits stay; it accepts a valid file with
/// fewer routes (`head -n 40 limits.toml > limits.toml` can write one), whose requests
/// then move to the policies the file gives them, with those policies' own keys. So
/// write the file atomically: a temporary file in the same directory, renamed over
/// this one, and no reload ever sees it half-written.
///
/// An edit followed by a SIGHUP is read twice, once for each: harmless, the second
/// finds nothing changed (and logs `version N: no change`, a version being each file
/// applied). Not deduplicated: a SIGHUP is the operator's way to say "read it now".
async fn reload_on_change(limits: LiveLimits, path: PathBuf) {
    let stamp = |path: &Path| -> Option<(SystemTime, u64)> {
        let metadata = std::fs::metadata(path).ok()?;
        Some((metadata.modified().ok()?, metadata.len()))
    };
    let mut loaded = stamp(&path);
    let mut last = loaded;
    let mut ticks = tokio::time::interval(Duration::from_secs(1));
    loop {
        ticks.tick().await;
        let now = stamp(&path);
        // Changed since the last load, and the same as a second ago: settled.
        if now != loaded && now == last {
            loaded = now;
            reload(&limits, &path, "file changed").await;
        }
        last = now;
    }
}
