//! Limits from a file, reloaded while running (feature `config`): the format, what a
//! reload does to each key, and the example server's live table.
//!
//! Operators change quotas without a build: the limits, policies and the HTTP layer's
//! routes are a file, read by [`Config`](crate::config::Config) and run by
//! [`LiveLimits`](crate::config::LiveLimits), which swaps in an edited file while
//! requests flow — Envoy's and limitador's limits file, nginx's reload of `limit_req`
//! zones.
//!
//! # The format
//! TOML, YAML or JSON, read through serde (`toml`, `serde_yaml_ng` — the maintained
//! fork of the archived `serde_yaml` — and `serde_json`): one schema, the same names.
//!
//! ```toml
//! # (tests/config_errors.rs reads this very block.)
//! # A limit: an algorithm (default token_bucket), a quota, where the key is.
//! [limits.login]
//! quota = "5/min"                     # 5 per minute, in bursts of 5
//! key = { header = "x-api-key" }      # a header's value
//!
//! [limits.search]
//! algorithm = "gcra"                  # token_bucket, gcra, fixed_window,
//!                                     # sliding_window, sliding_log
//! quota = "10/s burst 50"             # 10 a second, in bursts of 50
//! key = { extractor = "tenant" }      # an extractor the program registered
//!
//! [limits.per-ip]
//! quota = { capacity = 300, refill_every = "200ms" }
//! key = "client_address"              # the peer, or behind trusted proxies RealIp
//! max_keys = 250000                   # at most about this many keys held, and at
//! overflow = "50/s"                   # the cap new keys share 50/s ("deny": refused)
//! eviction_margin = "1s"              # a full key forgotten after this (the default)
//! # Shared by many servers (feature redis; a token_bucket or a fixed_window):
//! # store = { redis = "redis://10.0.0.5/", failure = "closed" }   # or "open"
//! # A token bucket can lease tokens and spend them in process (defaults: 1 s, 1/32):
//! # store = { redis = "redis://10.0.0.5/", lease = { lifetime = "1s", max = 8 } }
//!
//! [limits.tokens]
//! quota = "100000/h"                  # a model's tokens an hour
//! key = { header = "x-api-key" }
//!
//! # A policy: the checks a request must pass, all or nothing.
//! [policies.login]
//! checks = ["login", { limit = "per-ip", cost = 1, dry_run = true, missing_key = "skip" }]
//! dry_run = false                     # every check of the policy on trial
//!
//! [policies.search]                  # per-ip on trial here too: a limit is in dry
//! checks = ["search", { limit = "per-ip", dry_run = true }]   # run everywhere or nowhere
//!
//! [policies.complete]                # the cost known from the response: an estimate
//! checks = [{ limit = "tokens", cost = { estimate = "prompt" }, settled = true }]
//!                                     # ("prompt": registered by the program), taken,
//!                                     # then settled at what the response reports
//!
//! # The HTTP layer: routes by path prefix (whole segments), tried in order.
//! [layer]
//! fallback = "search"
//! routes = [
//!     { prefix = "/login", policy = "login" },
//!     { prefix = "/v1/complete", policy = "complete" },
//! ]
//! statuses = { missing_key = 400, exceeds_capacity = 429, unavailable = 503 }
//! delay = "500ms"                     # delay mode: wait up to this long, then refuse
//! dry_run = false                     # the whole layer on trial
//! settle_from = { header = "x-tokens-used" }   # where a response reports its cost
//!
//! # How the client's address is found (defaults: the peer, IPv6 by /64).
//! [client_address]
//! trusted_proxies = ["10.0.0.0/8"]
//! header = "x-forwarded-for"          # or "forwarded" (RFC 7239)
//! ipv6_prefix = 64
//! ```
//!
//! - **Quotas** read as people write them: `"N/UNIT"` is `Quota::per_minute(N)` and
//!   its kind (capacity N, one token every UNIT / N, rounded up to the nanosecond),
//!   with an optional count (`"5/10s"`) and a unit, in lower case: `ns`; `us`, `µs`,
//!   `μs`; `ms`; `s`, `sec`, `second`, `seconds`; `m`, `min`, `minute`, `minutes`;
//!   `h`, `hour`, `hours`; `d`, `day`, `days` (durations such as `refill_every` and
//!   `delay` take the same units, with a count);
//!   `burst B` sets the capacity and keeps the rate. A table `{ capacity,
//!   refill_every }` is [`Quota::new`](crate::Quota::new)'s two arguments.
//! - **Checks** are a limit's name, or a table with its `cost` (default 1, at least
//!   1; or `{ estimate = "NAME" }`, made from each request's head by an estimate the
//!   program registered: [`Extractors::estimate`](crate::config::Extractors::estimate)), `dry_run` (see [dry run](crate::policy#dry-run)), `missing_key`
//!   (`"reject"`, the default, or `"skip"`) and `settled`: a settled check's cost is
//!   an estimate, taken when the request is admitted, and the request is then charged
//!   what its response reports — the `[layer]`'s `settle_from` header (ASCII digits;
//!   absent, repeated or anything else leaves the estimate), or
//!   [`Policy::settle`](crate::policy::Policy::settle) for a policy the program asks
//!   by name. Beyond what the key has left, the key owes, and is refused until refill
//!   has repaid it ([charging from the response](crate::http#charging-from-the-response)). The check reports under the limit's name
//!   in the `RateLimit` fields. A limit is in dry run in every policy that checks it,
//!   or in none: its trial requests would otherwise use up an enforced allowance.
//! - **A file says what it limits**: at least one limit and one policy. An empty file
//!   (`""`, `{}`) or one cut short before its policies is refused, not read as "limit
//!   nothing" — reloaded, that would drop every key's state, and a throttled key would
//!   start afresh once the whole file came back. To limit nothing on purpose, write
//!   `unlimited = true` and nothing else. A reload that would drop the running
//!   `[layer]` is refused the same way.
//! - **What a reload cannot refuse**: a file cut short after its `[layer]` has begun,
//!   that is still valid — fewer routes, say. Nothing tells it from an intended edit,
//!   so it is applied: the requests of the routes it lost move to the policies the file
//!   now gives them (the fallback), whose keys have their own state, and a key
//!   throttled on its old route starts fresh there. **Write the file atomically**:
//!   write a temporary file in the same directory and rename it over the limits file
//!   (as for nginx's configuration), so that a reload never reads a half-written one.
//! - **Only a regular file is read** ([`Config::load`](crate::config::Config::load)),
//!   after following symbolic links, and at most 16 MiB of it: a FIFO, a device or a
//!   directory is refused at once, never waited on, and a larger file is refused with
//!   its size.
//! - **Routes**: a prefix given twice is refused (the first match applies, so the
//!   second could never); `ipv6_prefix` is 1 to 128.
//! - **Keys**: `{ header = "NAME" }`, `"client_address"`, or `{ extractor = "NAME" }`
//!   for a key the program finds itself
//!   ([`Extractors::register`](crate::config::Extractors::register)); where the server records
//!   the peer address is [`Extractors::peer_address`](crate::config::Extractors::peer_address).
//! - **Shared limits**: `store = { redis = "URL", failure = "closed" }` keeps a
//!   token bucket's or fixed window's state in Redis
//!   ([`RedisTokenBucket`](crate::redis::RedisTokenBucket),
//!   [`RedisFixedWindow`](crate::redis::RedisFixedWindow), under the prefix
//!   `turnstile:NAME:`), with its failure policy; it connects on the tokio runtime
//!   the limits are built and reloaded in. A key of text is its UTF-8, an address its
//!   octets. A token bucket's `lease = { lifetime, max }` (each optional; `lease = {}`
//!   takes the defaults) makes it a
//!   [`RedisLeasedTokenBucket`](crate::redis::lease::RedisLeasedTokenBucket): this
//!   process takes up to `max` tokens of a key at a time from Redis and spends them
//!   without a round trip, for `lifetime` at most. `max` is 1 to the quota's
//!   capacity and `lifetime` about 10 ms to 2^52 µs (that type's bounds), each
//!   refused otherwise as the file is read.
//! - **Memory**, for an in-process limit: `max_keys` caps the keys it holds
//!   ([`Builder::max_keys`](crate::Builder::max_keys); at least 1), and `overflow`
//!   says what a new key gets at the cap: `"deny"` (the default when only `max_keys`
//!   is given: [`Overflow::Deny`](crate::Overflow::Deny)) or a quota every such key
//!   shares ([`Overflow::Shared`](crate::Overflow::Shared), which the limit's
//!   algorithm must hold). `eviction_margin` is how long a key that carries no
//!   information is kept ([`Builder::eviction_margin`](crate::Builder::eviction_margin),
//!   1 s by default; `"1s"` written out is the same setting as none), and so how
//!   often a limit at its `max_keys` asks for room (at most once per margin): a long
//!   margin keeps a full cap full longer. Without them a limit's memory follows its active keys
//!   ([bounded memory](crate::guide::bounded_memory)); a shared limit takes none of
//!   them (Redis expires its keys).
//! - **Not in the format**: `expected_keys` (a presized map is allocated whole when
//!   the limit is built, and an operator's typo of a few digits would then abort the
//!   process on a failed allocation rather than be refused), and routes chosen by a
//!   predicate (code, not data: a file routes by path prefix). Build those in code.
//!
//! Every table refuses a field it does not know, and a mistake is reported with its
//! file, line, column and field, and what was expected —
//! [`ConfigError`](crate::config::ConfigError):
//!
//! ```text
//! limits.toml:3:9: limits.login.quota: "5 per minute" is not a quota such as "100/min", "10/s burst 50" or "5/10s" (units: ns, us, ms, s, m or min, h, d), or a table { capacity = 50, refill_every = "100ms" }
//! limits.toml:4:1: limits.login.burts: unknown field `burts`, expected one of `algorithm`, `quota`, `key`, `store`, `max_keys`, `overflow`, `eviction_margin`
//! limits.toml:7:23: policies.api.checks[1]: unknown limit "per-ip": expected one of the names under [limits]: per-user
//! ```
//!
//! A quota no algorithm of its limit can hold (a GCRA or sliding window counter has
//! bounds) is refused when the file is read, with the algorithm's own
//! [`QuotaError`](crate::QuotaError). A name that points nowhere is found once the
//! whole file is read, and located by reading the file a second time, knowing every
//! name.
//!
//! # Reloading
//! [`LiveLimits::reload`](crate::config::LiveLimits::reload) builds the new file beside
//! the running one, and only once all of it was built swaps it in: one pointer store
//! (arc-swap's `ArcSwap`). A file that fails to load or build leaves the running one
//! untouched, and the error says why. Each reload applied counts a version, one that
//! changes nothing included (its [`Changes`](crate::config::Changes) is empty, and
//! says `no change`). What happens to each limit:
//!
//! | the limit in the new file | its limiter | its keys |
//! |---|---|---|
//! | the same algorithm, quota, key, store and memory settings | kept (the same `Arc`) | every key's state kept |
//! | the quota changed | kept | each key moves at its first request under the new file, by [`crate::per_key`]'s rules: it keeps what it had left, capped at the new quota; a key with its whole allowance starts afresh under the new one; a throttled key stays throttled |
//! | the quota of a `gcra` or `sliding_window` limit changed | — | refused: their keys cannot move (rename the limit to start it afresh) |
//! | the quota of a shared (Redis) limit changed | — | refused: its state is Redis's, under the old quota (rename the limit to start it afresh) |
//! | the algorithm, key, store or memory settings (`max_keys`, `overflow`, `eviction_margin`) changed | a new one | the old state dropped (a new limit under the old name) |
//! | gone | dropped once no request holds it | dropped |
//!
//! Policies and routes are rebuilt on those limiters each time. **On the request
//! path** the layer reads its routes with one lock-free `ArcSwap` load at the start of
//! each request, and keeps them to its end: a request in flight finishes under the
//! routes it started with (a delayed or Redis-awaiting request holds them), and a new
//! one sees the new routes. A policy asked by name
//! ([`LiveLimits::policy`](crate::config::LiveLimits::policy)) is the running one's,
//! an `Arc` to keep for the request.
//!
//! **Each request carries its file's quotas.** A limiter's quota is the limiter's
//! own state, not the table's, so it cannot change in the same pointer store as the
//! routes. Instead a reload publishes each changed quota on its limiter while it
//! builds the new file, and each check of a file carries that file's quota into the
//! limiter with every request (a configuration number and the quota's rules). A
//! request of the new file moves each key it meets to the new quota at that request;
//! a request of the old one decides under the old quota. So, with nothing waiting:
//! - a request that starts after the swap sees only the new file: its routes, costs,
//!   `RateLimit` fields and quotas;
//! - a request in flight finishes under the old file, its later checks and settles
//!   under the old quotas, except on a key that a request of the new file has moved
//!   already. A key's state is under one quota at a time and moves forward only, so
//!   there the old request is decided under the new quota (the key kept what it had
//!   left, capped: never a fresh allowance). A moved key forgotten since (full, idle
//!   past the eviction margin) is new again, and such a request makes it under the
//!   old quota. This is the one way a request can see anything of the other file,
//!   and it cannot be closed without a request waiting for another.
//!
//! **Key moves are lazy**: a reload only publishes each changed limiter's new quota
//! (as [`KeyedLimiter::set_quota`](crate::KeyedLimiter::set_quota) does), and each key
//! moves at its own first request under the new file — so the moves cost the same
//! whatever the number of keys, and no thread walks them. (A moving key is frozen for the moment of its own move;
//! requests to other keys never wait.) Reloads run one at a time; requests never wait
//! for one.
//!
//! ```
//! # #[cfg(feature = "config")]
//! # fn main() -> Result<(), turnstile::config::ConfigError> {
//! use turnstile::ManualClock;
//! use turnstile::config::{Config, Extractors, LiveLimits};
//!
//! let file = |quota: &str| {
//!     let text = format!(r#"
//!         [limits.login]
//!         quota = "{quota}"
//!         key = {{ header = "x-api-key" }}
//!
//!         [policies.login]
//!         checks = ["login"]
//!
//!         [layer]
//!         fallback = "login"
//!     "#);
//!     Config::from_toml(&text, "limits.toml")
//! };
//! let request = |user: &str| {
//!     let request = http::Request::builder().header("x-api-key", user).body(()).unwrap();
//!     request.into_parts().0
//! };
//! let clock = ManualClock::new(); // a service uses the default clock: LiveLimits::new
//! let limits = LiveLimits::with_clock(file("5/min")?, Extractors::new(), clock)?;
//! let layer = limits.layer(); // in front of the service: reloads reach it
//! # let _ = layer;
//! let login = |user: &str| limits.policy("login").unwrap().acquire(&request(user)).is_allowed();
//! for _ in 0..4 {
//!     assert!(login("alice")); // 1 of her 5 left
//! }
//!
//! // The quota lowered on disk, and reloaded:
//! let changes = limits.reload(file("2/min")?)?;
//! assert_eq!(changes.version(), 2);
//! println!("{changes}"); // version 2: limit "login": quota "5/min" -> "2/min" (...)
//! assert!(login("alice")); // she keeps her 1 (capped at 2, not reset to 2)
//! assert!(!login("alice"));
//! assert!(login("bob") && login("bob") && !login("bob")); // a new key: the new quota
//!
//! // A file with a mistake is refused where it is read; version 2 runs on.
//! let error = file("2 a minute").unwrap_err();
//! assert_eq!((error.field(), error.line()), ("limits.login.quota", Some(3)));
//! assert_eq!(limits.version(), 2);
//! # Ok(()) }
//! # #[cfg(not(feature = "config"))]
//! # fn main() {}
//! ```
//!
//! # The example server
//! `examples/http_server.rs` reads its endpoint table from `examples/limits.toml`,
//! reloads it on SIGHUP and within two seconds of the file changing (a tokio task
//! polls the file's modification time and length each second, and reads a change
//! once two polls in a row agree, so a file being written in place is read when the
//! writing pauses: one file needs no watcher dependency; rename a finished file over
//! it to be exact — a file written in place and read mid-way may be valid and
//! shorter, and is then applied), reads and parses it on tokio's blocking pool, logs what changed
//! (the [`Changes`](crate::config::Changes) of each reload, or why a file was
//! refused), and reports at `/metrics` (feature `metrics`) the running version as the
//! gauge `turnstile_config_version` and the last reload's outcome as
//! `turnstile_config_last_reload_successful` (1 applied, 0 refused). A transcript — a quota
//! lowered on disk, then 429s at the new rate with no key reset — is in
//! `results/http.md`, "Limits reloaded live" (`results/http-reload.sh`).
//!
//! # What it costs
//! A request through a reloadable layer pays one `ArcSwap` load (a thread-local debt
//! slot and an atomic or two, no reference count) over a fixed layer's pointer read.
//! [`LiveLimits::policy`](crate::config::LiveLimits::policy) pays more: an `ArcSwap`
//! load, a search for the name and an `Arc` clone (one contended atomic increment
//! and decrement per request). On a hot path resolve the name once instead:
//! [`LiveLimits::policy_handle`](crate::config::LiveLimits::policy_handle) gives a
//! [`PolicyHandle`](crate::config::PolicyHandle) whose requests pay one `ArcSwap`
//! load and a comparison of the name at the place it remembers, as the layer does.
//!
//! Every in-process `token_bucket`, `fixed_window` and `sliding_log` limit is built
//! reconfigurable ([`build_reconfigurable`](crate::Builder::build_reconfigurable), a
//! [`PerKey`](crate::per_key::PerKey) limiter), whether its quota ever changes or
//! not, since a reload may change it: only `PerKey` keys can move. A known key's
//! request is still one lookup and one compare-and-set (against the configuration
//! number its check carries), but a *new* key, and each key's first request after a
//! quota change, stores a boxed entry (the rules beside the state) where a fixed
//! limiter stores a word in place: an allocation per new key under churn. (A check of
//! a file takes no lock for a new key: the quota's rules come with the check, not from
//! the limiter's resolver.) `benches/config_reload.rs` measures a request through a
//! fixed and a reloadable layer side by side, and the swap of a 1,000-route table
//! while a limiter holds a million keys; `benches/layer_instructions.rs` counts the
//! instructions. The figures are in `results/config-reload.md`.
