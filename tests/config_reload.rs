//! Reloading a limits file into running limits: a key's state survives every change
//! but its own limit's removal, a changed quota moves keys without a fresh allowance
//! for a throttled one, a refused file changes nothing, and requests racing reloads
//! are never admitted beyond what any configuration allows.

use http::request::Parts;
use proptest::prelude::*;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;
use turnstile::ManualClock;
use turnstile::config::{Change, Config, Extractors, LiveLimits, Replaced};

/// One limit `a` of `algorithm` and `quota`, keyed by `x-api-key`, in policy `p`
/// (when `quota` is `None`, the limit removed: `p` checks nothing, and an unused limit
/// `z` stands in, as a file must define one), the fallback of the layer.
fn config(algorithm: &str, quota: Option<&str>) -> Config {
    let text = match quota {
        Some(quota) => format!(
            "[limits.a]\nalgorithm = \"{algorithm}\"\nquota = {quota}\nkey = {{ header = \"x-api-key\" }}\n\
             [policies.p]\nchecks = [\"a\"]\n[layer]\nfallback = \"p\"\n"
        ),
        None => "[limits.z]\nquota = \"1/h\"\nkey = \"client_address\"\n\
                 [policies.p]\nchecks = []\n[layer]\nfallback = \"p\"\n"
            .to_owned(),
    };
    Config::from_toml(&text, "test.toml").unwrap()
}

/// `capacity` tokens, one a second.
fn per_second(capacity: u32) -> String {
    format!("{{ capacity = {capacity}, refill_every = \"1s\" }}")
}

fn request(user: &str) -> Parts {
    http::Request::builder()
        .uri("/anything")
        .header("x-api-key", user)
        .body(())
        .unwrap()
        .into_parts()
        .0
}

/// Whether `limits`' policy `p`, as running now, admits `user`'s request.
fn admits(limits: &LiveLimits, user: &str) -> bool {
    limits
        .policy("p")
        .unwrap()
        .acquire(&request(user))
        .is_allowed()
}

/// How many of `n` requests of `user` are admitted.
fn admitted(limits: &LiveLimits, user: &str, n: u32) -> u32 {
    (0..n).filter(|_| admits(limits, user)).count() as u32
}

fn live(config: Config, clock: &ManualClock) -> LiveLimits {
    LiveLimits::with_clock(config, Extractors::new(), clock.clone()).unwrap()
}

#[test]
fn an_unchanged_limit_keeps_every_keys_state_across_a_reload() {
    let clock = ManualClock::new();
    let limits = live(config("token_bucket", Some("\"3/h\"")), &clock);
    assert_eq!(admitted(&limits, "alice", 2), 2);
    // The same limit, and a new one beside it: alice's key is as it was.
    let text = "[limits.a]\nquota = \"3/h\"\nkey = { header = \"x-api-key\" }\n\
                [limits.b]\nquota = \"9/h\"\nkey = \"client_address\"\n\
                [policies.p]\nchecks = [\"a\"]\n[layer]\nfallback = \"p\"\n";
    let changes = limits
        .reload(Config::from_toml(text, "test.toml").unwrap())
        .unwrap();
    assert_eq!(
        changes.changes(),
        [Change::LimitAdded { limit: "b".into() }]
    );
    assert_eq!(changes.version(), 2);
    assert_eq!(admitted(&limits, "alice", 5), 1);
}

/// A reload of the same file is applied and counted (a version is each file applied),
/// says it changed nothing, and leaves every key as it was.
#[test]
fn a_reload_that_changes_nothing_is_counted_and_says_so() {
    let clock = ManualClock::new();
    let limits = live(config("token_bucket", Some("\"3/h\"")), &clock);
    assert_eq!(admitted(&limits, "alice", 2), 2);
    let changes = limits
        .reload(config("token_bucket", Some("\"3/h\"")))
        .unwrap();
    assert!(changes.is_empty());
    assert_eq!(changes.version(), 2);
    assert_eq!(limits.version(), 2);
    assert_eq!(changes.to_string(), "version 2: no change");
    assert_eq!(admitted(&limits, "alice", 5), 1);
}

#[test]
fn a_lowered_quota_caps_what_a_key_has_left_and_never_refills_a_throttled_key() {
    let clock = ManualClock::new();
    let limits = live(config("token_bucket", Some("\"10/h\"")), &clock);
    assert_eq!(admitted(&limits, "alice", 2), 2); // 8 left
    assert_eq!(admitted(&limits, "bob", 10), 10); // throttled
    let changes = limits
        .reload(config("token_bucket", Some("\"5/h\"")))
        .unwrap();
    assert_eq!(
        changes.changes(),
        [Change::QuotaChanged {
            limit: "a".into(),
            from: "\"10/h\"".into(),
            to: "\"5/h\"".into()
        }]
    );
    assert_eq!(admitted(&limits, "alice", 10), 5); // min(8, 5)
    assert_eq!(admitted(&limits, "bob", 10), 0); // still throttled
    assert_eq!(admitted(&limits, "carol", 10), 5); // a new key: the new quota
    // Raised again: a throttled key gains nothing but refill.
    limits
        .reload(config("token_bucket", Some("\"50/h\"")))
        .unwrap();
    assert_eq!(admitted(&limits, "bob", 10), 0);
}

#[test]
fn a_refused_reload_leaves_the_running_limits_untouched() {
    let clock = ManualClock::new();
    let limits = live(config("gcra", Some("\"4/h\"")), &clock);
    assert_eq!(admitted(&limits, "alice", 3), 3);
    // A GCRA's keys cannot move to a new quota: refused, and said why.
    let error = limits.reload(config("gcra", Some("\"8/h\""))).unwrap_err();
    assert_eq!(error.field(), "limits.a.quota");
    assert!(error.message().contains("cannot move its keys"), "{error}");
    // The quota to keep is the running one, not the one refused.
    assert!(
        error.message().contains("keep its quota \"4/h\""),
        "{error}"
    );
    // A file with a mistake in it, reloaded from disk: refused.
    let broken = "[limits.a]\nquota = \"8/hour and a bit\"\nkey = \"client_address\"\n";
    assert!(Config::from_toml(broken, "test.toml").is_err());
    let path = std::env::temp_dir().join(format!("turnstile-broken-{}.toml", std::process::id()));
    std::fs::write(&path, broken).unwrap();
    let error = limits.reload_file(&path).unwrap_err();
    std::fs::remove_file(&path).unwrap();
    assert_eq!(error.field(), "limits.a.quota", "{error}");
    assert_eq!(limits.version(), 1);
    assert_eq!(admitted(&limits, "alice", 3), 1);
}

#[test]
fn a_reload_refused_after_a_quota_move_was_planned_moves_nothing() {
    let clock = ManualClock::new();
    let limits = live(config("token_bucket", Some("\"10/h\"")), &clock);
    assert_eq!(admitted(&limits, "alice", 2), 2); // 8 left
    // a's quota would move to 2/h, but the policy after it asks a cost of 5: the
    // policy is refused once the move is planned, and nothing moves.
    let text = "[limits.a]\nquota = \"2/h\"\nkey = { header = \"x-api-key\" }\n\
                [policies.p]\nchecks = [{ limit = \"a\", cost = 5 }]\n[layer]\nfallback = \"p\"\n";
    let error = limits
        .reload(Config::from_toml(text, "test.toml").unwrap())
        .unwrap_err();
    assert_eq!(error.field(), "policies.p", "{error}");
    assert_eq!(limits.version(), 1);
    assert_eq!(admitted(&limits, "alice", 10), 8); // still under 10/h
}

/// Refused reloads publish their quotas on the running limiter while they are planned
/// (each a configuration no check carries): the running file decides as before, for
/// its keys and for keys made meanwhile, and a later reload moves every key from the
/// quota the running file gave it.
#[test]
fn refused_reloads_change_no_decision_before_or_after_a_later_reload() {
    let clock = ManualClock::new(); // frozen: nothing refills
    let limits = live(config("token_bucket", Some("\"10/h\"")), &clock);
    assert_eq!(admitted(&limits, "alice", 2), 2); // 8 left
    for refused in [2, 3, 4] {
        let text = format!(
            "[limits.a]\nquota = \"{refused}/h\"\nkey = {{ header = \"x-api-key\" }}\n\
             [policies.p]\nchecks = [{{ limit = \"a\", cost = 5 }}]\n[layer]\nfallback = \"p\"\n"
        );
        assert!(
            limits
                .reload(Config::from_toml(&text, "t.toml").unwrap())
                .is_err()
        );
    }
    assert_eq!(limits.version(), 1);
    // A key made now is under the running 10/h, not a refused quota.
    assert_eq!(admitted(&limits, "bob", 11), 10);
    assert_eq!(admitted(&limits, "alice", 1), 1); // 7 left
    // The next reload moves alice from 10/h: 7 left, capped at 6.
    limits
        .reload(config("token_bucket", Some("\"6/h\"")))
        .unwrap();
    assert_eq!(admitted(&limits, "alice", 7), 6);
    assert_eq!(admitted(&limits, "bob", 1), 0, "bob stays throttled");
    assert_eq!(admitted(&limits, "carol", 7), 6);
}

#[test]
fn a_removed_limit_drops_its_state_and_a_changed_algorithm_starts_a_new_limiter() {
    let clock = ManualClock::new();
    let limits = live(config("fixed_window", Some("\"2/h\"")), &clock);
    assert_eq!(admitted(&limits, "alice", 5), 2);
    let changes = limits.reload(config("fixed_window", None)).unwrap();
    assert!(
        changes
            .changes()
            .contains(&Change::LimitRemoved { limit: "a".into() })
    );
    assert_eq!(admitted(&limits, "alice", 5), 5); // no check left
    limits
        .reload(config("fixed_window", Some("\"2/h\"")))
        .unwrap();
    assert_eq!(admitted(&limits, "alice", 5), 2); // a new limiter
    let changes = limits
        .reload(config("sliding_log", Some("\"2/h\"")))
        .unwrap();
    assert_eq!(
        changes.changes()[0],
        Change::LimitReplaced {
            limit: "a".into(),
            why: Replaced::Algorithm
        }
    );
    assert_eq!(changes.version(), 4);
}

/// Limit `a` at 5 an hour with the memory `settings` given, in policy `p`.
fn holding(settings: &str) -> Config {
    let text = format!(
        "[limits.a]\nquota = \"5/h\"\nkey = {{ header = \"x-api-key\" }}\n{settings}\n\
         [policies.p]\nchecks = [\"a\"]\n[layer]\nfallback = \"p\"\n"
    );
    Config::from_toml(&text, "test.toml").unwrap()
}

#[test]
fn max_keys_from_the_file_caps_the_keys_and_a_change_of_it_replaces_the_limiter() {
    let clock = ManualClock::new();
    let limits = live(holding("max_keys = 2"), &clock);
    assert!(admits(&limits, "alice"));
    assert!(admits(&limits, "bob"));
    // At the cap a new key is refused ("deny" unless said), and no stored key is
    // forgettable (each has taken a token), so none is forgotten to make room.
    assert!(!admits(&limits, "carol"));
    assert!(admits(&limits, "alice"));
    // The same settings keep the limiter and every key's state.
    assert!(limits.reload(holding("max_keys = 2")).unwrap().is_empty());
    assert_eq!(admitted(&limits, "alice", 5), 3);
    // Changed settings replace it, as the change says.
    let changes = limits.reload(holding("max_keys = 3")).unwrap();
    assert_eq!(
        changes.changes(),
        [Change::LimitReplaced {
            limit: "a".into(),
            why: Replaced::Memory
        }]
    );
    assert_eq!(admitted(&limits, "alice", 6), 5);
    // A shared overflow: the keys over the cap share one allowance of 2 an hour.
    limits
        .reload(holding("max_keys = 1\noverflow = \"2/h\""))
        .unwrap();
    assert!(admits(&limits, "alice"));
    assert!(admits(&limits, "bob"));
    assert!(admits(&limits, "carol"));
    assert!(!admits(&limits, "dave"));
    assert!(!admits(&limits, "bob"));
    assert_eq!(admitted(&limits, "alice", 5), 4);
}

#[test]
fn memory_settings_written_as_they_already_are_change_nothing_and_keep_every_key() {
    let clock = ManualClock::new();
    let limits = live(holding(""), &clock);
    assert!(admits(&limits, "alice"));
    // The default margin written out says what the file said without it: the same
    // configuration, no change, every key's state kept.
    assert_eq!(holding(""), holding("eviction_margin = \"1s\""));
    assert!(
        limits
            .reload(holding("eviction_margin = \"1s\""))
            .unwrap()
            .is_empty()
    );
    assert_eq!(admitted(&limits, "alice", 5), 4);
    // And removed again: no change either.
    assert!(limits.reload(holding("")).unwrap().is_empty());
    assert!(!admits(&limits, "alice"));
    // An overflow quota is compared as a quota, however written.
    limits
        .reload(holding("max_keys = 2\noverflow = \"2/h\""))
        .unwrap();
    assert!(admits(&limits, "bob"));
    assert!(
        limits
            .reload(holding(
                "max_keys = 2\noverflow = { capacity = 2, refill_every = \"30m\" }"
            ))
            .unwrap()
            .is_empty()
    );
    assert_eq!(admitted(&limits, "bob", 5), 4);
}

#[test]
fn a_request_through_live_limits_allocates_nothing_once_its_key_exists() {
    let clock = ManualClock::new();
    let limits = live(config("token_bucket", Some("\"3/h\"")), &clock);
    let alice = request("alice");
    // The key's first request stores it, and this thread's first `ArcSwap` load
    // registers the thread with arc-swap: both allocate, once.
    assert!(limits.policy("p").unwrap().acquire(&alice).is_allowed());
    let mut allowed = [true; 4];
    let info = allocation_counter::measure(|| {
        // The policy looked up by name for each request.
        for allowed in &mut allowed {
            *allowed = limits.policy("p").unwrap().acquire(&alice).is_allowed();
        }
    });
    assert_eq!(allowed, [true, true, false, false]);
    assert_eq!(info.count_total, 0, "allocations: {info:?}");
}

#[test]
fn a_policy_handle_follows_reloads_without_allocating() {
    let clock = ManualClock::new();
    let limits = live(config("token_bucket", Some("\"3/h\"")), &clock);
    let handle = limits.policy_handle("p").unwrap();
    assert!(limits.policy_handle("nobody").is_none());
    let alice = request("alice");
    assert!(handle.acquire(&alice).unwrap().is_allowed()); // the key stored
    let mut allowed = [true; 3];
    let info = allocation_counter::measure(|| {
        for allowed in &mut allowed {
            *allowed = handle.acquire(&alice).unwrap().is_allowed();
        }
    });
    assert_eq!(allowed, [true, true, false]);
    assert_eq!(info.count_total, 0, "allocations: {info:?}");
    // A new policy sorted before `p` moves it: the handle finds it again, under the
    // reloaded quota (bob, a new key, gets the new 1).
    let text = "[limits.a]\nquota = \"1/h\"\nkey = { header = \"x-api-key\" }\n\
                [policies.a-first]\nchecks = [\"a\"]\n[policies.p]\nchecks = [\"a\"]\n\
                [layer]\nfallback = \"p\"\n";
    limits
        .reload(Config::from_toml(text, "test.toml").unwrap())
        .unwrap();
    assert_eq!(handle.name(), "p");
    assert!(handle.acquire(&request("bob")).unwrap().is_allowed());
    assert!(!handle.acquire(&request("bob")).unwrap().is_allowed());
    // Removed: `None`.
    let text = "[limits.a]\nquota = \"1/h\"\nkey = { header = \"x-api-key\" }\n\
                [policies.q]\nchecks = [\"a\"]\n[layer]\nfallback = \"q\"\n";
    limits
        .reload(Config::from_toml(text, "test.toml").unwrap())
        .unwrap();
    assert!(handle.acquire(&alice).is_none());
}

/// A service that answers 200 to everything.
#[derive(Clone)]
struct Ok200;

impl tower::Service<http::Request<String>> for Ok200 {
    type Response = http::Response<String>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: http::Request<String>) -> Self::Future {
        Box::pin(async { Ok(http::Response::new(String::new())) })
    }
}

#[tokio::test]
async fn a_service_built_before_a_reload_answers_under_the_new_quota() {
    use tower::{Layer, Service};
    let clock = ManualClock::new();
    let limits = live(config("token_bucket", Some("\"4/h\"")), &clock);
    let mut service = limits.layer().layer(Ok200);
    let mut status = async |user: &str| {
        let request = http::Request::builder()
            .uri("/")
            .header("x-api-key", user)
            .body(String::new())
            .unwrap();
        service.call(request).await.unwrap().status().as_u16()
    };
    for _ in 0..3 {
        assert_eq!(status("alice").await, 200);
    }
    limits
        .reload(config("token_bucket", Some("\"2/h\"")))
        .unwrap();
    // alice had 1 left, and keeps it (a fresh limiter would give her 2).
    assert_eq!(status("alice").await, 200);
    assert_eq!(status("alice").await, 429);
    assert_eq!(status("bob").await, 200);
}

/// A service whose responses each wait for a permit.
#[derive(Clone)]
struct Held(Arc<tokio::sync::Semaphore>);

impl tower::Service<http::Request<String>> for Held {
    type Response = http::Response<String>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: http::Request<String>) -> Self::Future {
        let release = Arc::clone(&self.0);
        Box::pin(async move {
            let _permit = release.acquire().await;
            Ok(http::Response::new(String::new()))
        })
    }
}

#[tokio::test]
async fn a_request_in_flight_finishes_under_the_routes_it_started_with() {
    use tower::{Layer, Service};
    let clock = ManualClock::new();
    let limits = live(config("token_bucket", Some("\"4/h\"")), &clock);
    let release = Arc::new(tokio::sync::Semaphore::new(0));
    let mut service = limits.layer().layer(Held(Arc::clone(&release)));
    let request = || {
        let request = http::Request::builder()
            .uri("/")
            .header("x-api-key", "alice");
        request.body(String::new()).unwrap()
    };
    let in_flight = tokio::spawn(service.call(request()));
    tokio::task::yield_now().await; // admitted; its response waits
    limits
        .reload(config("token_bucket", Some("\"2/h\"")))
        .unwrap();
    let after = tokio::spawn(service.call(request()));
    release.add_permits(2);
    let policy = |response: http::Response<String>| {
        let field = response.headers().get("ratelimit-policy").unwrap();
        field.to_str().unwrap().to_owned()
    };
    // Admitted and answered under the old routes: their quota in its fields.
    assert_eq!(
        policy(in_flight.await.unwrap().unwrap()),
        "\"a\";q=4;w=3600"
    );
    assert_eq!(policy(after.await.unwrap().unwrap()), "\"a\";q=2;w=3600");
}

/// A service whose responses report that their request used `0` tokens.
#[derive(Clone)]
struct Reports(u32);

impl tower::Service<http::Request<String>> for Reports {
    type Response = http::Response<String>;
    type Error = Infallible;
    type Future = std::future::Ready<Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: http::Request<String>) -> Self::Future {
        let response = http::Response::builder().header("x-tokens-used", self.0.to_string());
        std::future::ready(Ok(response.body(String::new()).unwrap()))
    }
}

#[tokio::test]
async fn a_settled_check_from_the_file_is_charged_what_the_response_reports() {
    use tower::{Layer, Service};
    let text = "[limits.tokens]\nquota = \"100/h\"\nkey = { header = \"x-api-key\" }\n\
                [policies.p]\nchecks = [{ limit = \"tokens\", cost = 10, settled = true }]\n\
                [layer]\nfallback = \"p\"\nsettle_from = { header = \"x-tokens-used\" }\n";
    let clock = ManualClock::new(); // frozen: nothing refills
    let limits = live(Config::from_toml(text, "test.toml").unwrap(), &clock);
    let mut service = limits.layer().layer(Reports(40));
    let mut call = async || {
        let request = http::Request::builder()
            .uri("/")
            .header("x-api-key", "alice");
        let response = service
            .call(request.body(String::new()).unwrap())
            .await
            .unwrap();
        // The `RateLimit` field's `r`: what the key has left.
        let remaining = response.headers().get("ratelimit").and_then(|field| {
            let field = field.to_str().unwrap();
            let r = field.split(';').find_map(|item| item.strip_prefix("r="));
            r.map(|r| r.parse::<u32>().unwrap())
        });
        (response.status().as_u16(), remaining)
    };
    // Each request takes its estimate of 10 when admitted (its field reports that),
    // then is charged the 40 its response reports: 100 -> 60 -> 20 -> -20 (owing).
    assert_eq!(call().await, (200, Some(90)));
    assert_eq!(call().await, (200, Some(50)));
    assert_eq!(call().await, (200, Some(10)));
    assert_eq!(call().await, (429, Some(0)));
}

#[test]
fn a_named_estimate_from_the_file_costs_each_request_what_it_makes_of_it() {
    let text = "[limits.bytes]\nquota = \"100/h\"\nkey = { header = \"x-api-key\" }\n\
                [policies.p]\nchecks = [{ limit = \"bytes\", cost = { estimate = \"size\" } }]\n";
    // The estimate: the request's `x-size` header, 0 without one.
    let size = |request: &Parts| {
        let size = request
            .headers
            .get("x-size")
            .and_then(|size| size.to_str().ok());
        size.and_then(|size| size.parse().ok()).unwrap_or(0)
    };
    let clock = ManualClock::new(); // frozen: nothing refills
    let config = Config::from_toml(text, "test.toml").unwrap();
    let limits =
        LiveLimits::with_clock(config, Extractors::new().estimate("size", size), clock).unwrap();
    let admits = |bytes: u32| {
        let mut request = request("alice");
        request.headers.insert("x-size", bytes.into());
        limits.policy("p").unwrap().acquire(&request).is_allowed()
    };
    assert!(admits(60)); // 40 left
    assert!(!admits(50)); // refused whole: nothing taken
    assert!(admits(40));
    assert!(!admits(1));
}

#[test]
fn requests_racing_reloads_are_never_admitted_beyond_the_largest_quota() {
    let clock = ManualClock::new(); // frozen: no refill, so every admission counts
    let limits = live(config("token_bucket", Some("\"10/h\"")), &clock);
    let admitted = Arc::new(AtomicU32::new(0));
    std::thread::scope(|scope| {
        for _ in 0..2 {
            let (limits, admitted) = (limits.clone(), Arc::clone(&admitted));
            scope.spawn(move || {
                for _ in 0..2_000 {
                    if admits(&limits, "hot") {
                        // Relaxed: a count, read once the threads are joined.
                        admitted.fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        }
        let limits = limits.clone();
        scope.spawn(move || {
            for round in 0..200 {
                let quota = if round % 2 == 0 {
                    "\"20/h\""
                } else {
                    "\"10/h\""
                };
                limits.reload(config("token_bucket", Some(quota))).unwrap();
            }
        });
    });
    // The key starts full under 10 or 20; once it has given a token it is never full
    // again (no time passes), so no move refills it: at most 20 in all, and at least
    // the 10 of the smaller quota.
    let admitted = admitted.load(Ordering::Relaxed);
    assert!((10..=20).contains(&admitted), "{admitted} admitted");
    assert_eq!(limits.version(), 201);
}

/// One step of the state machine.
#[derive(Clone, Debug)]
enum Step {
    /// A request of user `0..3`.
    Request(usize),
    /// A request of user `0..3` through the policy kept by the last `Keep`: a request
    /// of that version, still in flight.
    Kept(usize),
    /// The running policy kept, for `Kept` requests.
    Keep,
    /// A reload with limit `a` at this capacity (one token a second), or removed.
    Reload(Option<u32>),
    /// A reload of a file that reads but cannot be built (a cost above the new
    /// capacity): refused, nothing changes.
    Refused(u32),
    /// Time passes: whole seconds.
    Wait(u64),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => (0..3usize).prop_map(Step::Request),
        3 => (0..3usize).prop_map(Step::Kept),
        1 => Just(Step::Keep),
        2 => prop_oneof![4 => (1..6u32).prop_map(Some), 1 => Just(None)].prop_map(Step::Reload),
        1 => (1..6u32).prop_map(Step::Refused),
        1 => prop_oneof![(1..3u64), Just(3_600u64)].prop_map(Step::Wait),
    ]
}

/// A key of the model: the configuration and capacity it was last moved to, and
/// what it had left then, at whole second `at`.
#[derive(Clone, Copy, Debug)]
struct Key {
    configuration: u64,
    capacity: u32,
    left: u32,
    at: u64,
}

/// What a version's policy checks: limit `a`'s limiter (which one: a removed limit
/// added again is a new one), its configuration (one more at each change of quota)
/// and its capacity; `None` when the version has no limit `a`.
type Checked = Option<(usize, u64, u32)>;

/// The rules of `turnstile::per_key` for a token bucket of one token a second, with
/// every key moving lazily, at its first request under a later configuration:
/// refill under the key's own quota, then a full key starts afresh under the new
/// one, any other keeps what it has left, capped. A request of an earlier
/// configuration than its key's is decided under the key's. A removed limit forgets
/// every key (for the new versions; a kept policy of an older one keeps its limiter).
#[derive(Debug, Default)]
struct Model {
    running: Checked,
    /// Each limiter's keys.
    limiters: Vec<[Option<Key>; 3]>,
    now: u64,
}

impl Model {
    fn new(capacity: u32) -> Self {
        Self {
            running: Some((0, 0, capacity)),
            limiters: vec![[None; 3]],
            now: 0,
        }
    }

    fn request(&mut self, checked: Checked, user: usize) -> bool {
        let Some((limiter, configuration, capacity)) = checked else {
            return true;
        };
        let now = self.now;
        let key = self.limiters[limiter][user].get_or_insert(Key {
            configuration,
            capacity,
            left: capacity,
            at: now,
        });
        let refilled = u64::from(key.left) + (now - key.at);
        let left = refilled.min(u64::from(key.capacity)) as u32;
        let (configuration, capacity, left) = if key.configuration >= configuration {
            (key.configuration, key.capacity, left)
        } else if key.capacity == capacity {
            (configuration, capacity, left)
        } else if left == key.capacity {
            (configuration, capacity, capacity)
        } else {
            (configuration, capacity, left.min(capacity))
        };
        let allowed = left >= 1;
        *key = Key {
            configuration,
            capacity,
            left: left - u32::from(allowed),
            at: now,
        };
        allowed
    }

    fn reload(&mut self, capacity: Option<u32>) {
        self.running = match (self.running, capacity) {
            (_, None) => None,
            (None, Some(capacity)) => {
                self.limiters.push([None; 3]);
                Some((self.limiters.len() - 1, 0, capacity))
            }
            (Some(running), Some(capacity)) if running.2 == capacity => Some(running),
            (Some((limiter, configuration, _)), Some(capacity)) => {
                Some((limiter, configuration + 1, capacity))
            }
        };
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Every decision is the model's, for requests of the running version and of
    /// versions still in flight: never an admission it refuses, never a throttled
    /// key reset by a reload, never a request of the new version under the old quota.
    #[test]
    fn reloads_interleaved_with_requests_decide_as_the_model(
        first in 1..6u32,
        steps in proptest::collection::vec(step(), 1..60),
    ) {
        let clock = ManualClock::new();
        let limits = live(config("token_bucket", Some(&per_second(first))), &clock);
        let mut model = Model::new(first);
        let mut kept = (limits.policy("p").unwrap(), model.running);
        let users = ["alice", "bob", "carol"];
        for (index, step) in steps.into_iter().enumerate() {
            match step {
                Step::Request(user) => {
                    let expected = model.request(model.running, user);
                    prop_assert_eq!(admits(&limits, users[user]), expected, "step {}", index);
                }
                Step::Kept(user) => {
                    let expected = model.request(kept.1, user);
                    let admitted = kept.0.acquire(&request(users[user])).is_allowed();
                    prop_assert_eq!(admitted, expected, "step {}", index);
                }
                Step::Keep => kept = (limits.policy("p").unwrap(), model.running),
                Step::Reload(capacity) => {
                    let quota = capacity.map(per_second);
                    limits.reload(config("token_bucket", quota.as_deref())).unwrap();
                    model.reload(capacity);
                }
                Step::Refused(capacity) => {
                    let text = format!(
                        "[limits.a]\nquota = {}\nkey = {{ header = \"x-api-key\" }}\n\
                         [policies.p]\nchecks = [{{ limit = \"a\", cost = {} }}]\n\
                         [layer]\nfallback = \"p\"\n",
                        per_second(capacity),
                        capacity + 1
                    );
                    let version = limits.version();
                    prop_assert!(limits.reload(Config::from_toml(&text, "t.toml").unwrap()).is_err());
                    prop_assert_eq!(limits.version(), version);
                }
                Step::Wait(seconds) => {
                    clock.advance(Duration::from_secs(seconds));
                    model.now += seconds;
                }
            }
        }
    }
}

/// A limit in Redis at `redis://127.0.0.1:1/` (nothing listens there), keyed by
/// `x-api-key`, failing `failure`, in policy `p`.
#[cfg(feature = "redis")]
fn shared(quota: &str, failure: &str) -> Config {
    let text = format!(
        "[limits.s]\nquota = \"{quota}\"\nkey = {{ header = \"x-api-key\" }}\n\
         store = {{ redis = \"redis://127.0.0.1:1/\", failure = \"{failure}\" }}\n\
         [policies.p]\nchecks = [\"s\"]\n"
    );
    Config::from_toml(&text, "test.toml").unwrap()
}

#[cfg(feature = "redis")]
#[tokio::test]
async fn a_shared_limit_answers_by_its_failure_policy_and_keeps_its_quota() {
    use turnstile::policy::Outcome;
    // Built on the runtime its connection runs on. `acquire` never waits for Redis:
    // it answers a shared check by its failure policy.
    let closed = LiveLimits::new(shared("10/min", "closed"), Extractors::new()).unwrap();
    let policy = closed.policy("p").unwrap();
    assert!(policy.is_shared());
    assert_eq!(
        policy.acquire(&request("alice")).outcome(),
        Outcome::Unavailable
    );
    let open = LiveLimits::new(shared("10/min", "open"), Extractors::new()).unwrap();
    assert!(
        open.policy("p")
            .unwrap()
            .acquire(&request("alice"))
            .is_allowed()
    );
    // Its state is Redis's, under its quota: a new quota is refused, the store's
    // change (a new failure policy) makes a new limiter.
    let error = closed.reload(shared("20/min", "closed")).unwrap_err();
    assert_eq!(error.field(), "limits.s.quota");
    assert!(error.message().contains("shared (Redis)"), "{error}");
    let changes = closed.reload(shared("10/min", "open")).unwrap();
    assert_eq!(
        changes.changes(),
        [Change::LimitReplaced {
            limit: "s".into(),
            why: Replaced::Store
        }]
    );
}

/// A request of `user` to `path` from 192.0.2.1 (the peer address a server records).
fn request_from(user: &str, path: &str) -> Parts {
    let mut parts = http::Request::builder()
        .uri(path)
        .header("x-api-key", user)
        .body(())
        .unwrap()
        .into_parts()
        .0;
    parts
        .extensions
        .insert(std::net::SocketAddr::from(([192, 0, 2, 1], 40_000)));
    parts
}

/// Whether the running policy `policy` admits `user`.
fn admits_to(limits: &LiveLimits, policy: &str, user: &str) -> bool {
    limits
        .policy(policy)
        .unwrap()
        .acquire(&request_from(user, "/"))
        .is_allowed()
}

#[test]
fn an_empty_or_cut_short_file_is_refused_and_a_throttled_key_stays_throttled() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/limits.toml");
    let full = std::fs::read_to_string(path).unwrap();
    let clock = ManualClock::new(); // frozen: nothing refills
    let config = Config::from_toml(&full, path).unwrap();
    let extractors = Extractors::new().estimate("chat", |_: &Parts| 1); // as the server's
    let limits = LiveLimits::with_clock(config, extractors, clock.clone()).unwrap();
    let login = (0..10)
        .filter(|_| admits_to(&limits, "login", "alice"))
        .count();
    assert_eq!(login, 5); // "5/min": throttled now
    // Nothing at all, in each format: refused, saying a file must define a limit.
    for (text, format) in [
        ("", turnstile::config::Format::Toml),
        ("{}", turnstile::config::Format::Json),
        ("", turnstile::config::Format::Yaml),
        ("{}", turnstile::config::Format::Yaml),
    ] {
        let error = Config::parse(text, format, "limits").unwrap_err();
        assert_eq!(error.field(), "limits", "{text:?} as {format:?}: {error}");
        assert!(error.message().contains("at least one limit"), "{error}");
    }
    // Cut short before the policies: refused when read.
    let before_policies = &full[..full.find("[policies.").unwrap()];
    let error = Config::from_toml(before_policies, path).unwrap_err();
    assert_eq!(error.field(), "policies", "{error}");
    // Cut short before the layer: a file of policies alone reads, but a reload that
    // would drop the running layer is refused.
    let before_layer = &full[..full.find("[layer]").unwrap()];
    let error = limits
        .reload(Config::from_toml(before_layer, path).unwrap())
        .unwrap_err();
    assert_eq!(error.field(), "layer", "{error}");
    assert_eq!(limits.version(), 1);
    // Every cut at a line's end: refused, or a smaller table that keeps every limit it
    // still defines; with the whole file back, alice is still throttled.
    let mut cut = 0;
    while let Some(newline) = full[cut..].find('\n') {
        cut += newline + 1;
        if let Ok(config) = Config::from_toml(&full[..cut], path) {
            let _ = limits.reload(config);
        }
        limits
            .reload(Config::from_toml(&full, path).unwrap())
            .unwrap();
        assert!(
            !admits_to(&limits, "login", "alice"),
            "after a cut at byte {cut}"
        );
    }
    // Limiting nothing is said, not implied; then every limit goes.
    let unlimited = Config::from_toml("unlimited = true", path).unwrap();
    let changes = limits.reload(unlimited).unwrap();
    assert!(changes.changes().contains(&Change::LimitRemoved {
        limit: "login".into()
    }));
    let error = Config::from_toml(
        "unlimited = true\n[limits.a]\nquota = \"1/s\"\nkey = \"client_address\"\n",
        path,
    )
    .unwrap_err();
    assert_eq!(error.field(), "unlimited", "{error}");
}

#[test]
fn each_request_is_decided_by_its_own_file_and_a_key_moves_forward_only() {
    // Policy p checks a and b; the reload lowers both.
    let file = |a: u32, b: u32| {
        let text = format!(
            "[limits.a]\nquota = \"{a}/h\"\nkey = {{ header = \"x-api-key\" }}\n\
             [limits.b]\nquota = \"{b}/h\"\nkey = \"client_address\"\n\
             [policies.p]\nchecks = [\"a\", \"b\"]\n"
        );
        Config::from_toml(&text, "test.toml").unwrap()
    };
    let clock = ManualClock::new(); // frozen: nothing refills
    let limits = live(file(10, 10), &clock);
    // A request in flight under version 1: it holds version 1's policy.
    let old = limits.policy("p").unwrap();
    let old_admits = |user: &str| old.acquire(&request_from(user, "/")).is_allowed();
    assert!(old_admits("alice"));
    // The reload waits for no request: it returns while version 1's is held.
    assert_eq!(limits.reload(file(1, 1)).unwrap().version(), 2);
    // The old request's checks go on under version 1's quotas for keys no request
    // of version 2 has met: alice has 9 of 10, under a and b alike (under 1/h she
    // would have had nothing left).
    assert!(old_admits("alice") && old_admits("alice"));
    // A request of version 2 meets the new quotas at once: bob has 1. (The test's
    // requests share one client address: b's key, which bob's request moves; alice's
    // own key in a is not moved by it.)
    assert!(admits_to(&limits, "p", "bob"));
    assert!(!admits_to(&limits, "p", "bob"));
    // Version 1's request on alice is decided under the quota b's key has moved to
    // (b's key has nothing left), and a's key, which no new request has met, is
    // still under 10.
    assert!(!old_admits("alice"));
    // Version 2 moves alice's a key: 7 left, capped at 1; b's key has nothing left,
    // so she is refused, and the refusal takes nothing.
    assert!(!admits_to(&limits, "p", "alice"));
    drop(old);
    assert_eq!(limits.version(), 2);
}

/// A reload that changes only whether a check is settled, or only the estimate it
/// names, says its policy changed; the same file again says nothing changed.
#[test]
fn a_reload_of_a_checks_settling_or_estimate_alone_says_its_policy_changed() {
    let file = |check: &str| {
        let text = format!(
            "[limits.a]\nquota = \"3/h\"\nkey = {{ header = \"x-api-key\" }}\n\
             [policies.p]\nchecks = [{check}]\n[layer]\nfallback = \"p\"\n"
        );
        Config::from_toml(&text, "test.toml").unwrap()
    };
    let extractors = Extractors::new()
        .estimate("one", |_: &Parts| 1)
        .estimate("two", |_: &Parts| 2);
    let limits = LiveLimits::with_clock(
        file("{ limit = \"a\", cost = { estimate = \"one\" } }"),
        extractors,
        ManualClock::new(),
    )
    .unwrap();
    let changed = [Change::PolicyChanged { policy: "p".into() }];
    for check in [
        "{ limit = \"a\", cost = { estimate = \"one\" }, settled = true }",
        "{ limit = \"a\", cost = { estimate = \"two\" }, settled = true }",
        "{ limit = \"a\", cost = 1, settled = true }",
    ] {
        let reloaded = limits.reload(file(check)).unwrap();
        assert_eq!(reloaded.changes(), changed, "{check}");
        let again = limits.reload(file(check)).unwrap();
        assert_eq!(again.changes(), [], "{check}");
    }
}
