//! Shared limits read from a limits file, against a real server: a token bucket and a
//! leased token bucket (`store = { ..., lease = { ... } }`) admit their quota across
//! requests and then refuse, as the limiters built in code do.

use crate::server::RedisServer;
use turnstile::config::{Change, Config, Extractors, LiveLimits, Replaced};

/// A request of `user`.
fn request(user: &str) -> http::request::Parts {
    let request = http::Request::builder().header("x-api-key", user);
    request.body(()).unwrap().into_parts().0
}

/// Limit `s` of `quota` in Redis at `url`, with `store`'s extra settings, in policy `p`.
fn shared(url: &str, quota: &str, store: &str) -> Config {
    let text = format!(
        "[limits.s]\nquota = \"{quota}\"\nkey = {{ header = \"x-api-key\" }}\n\
         store = {{ redis = \"{url}\"{store} }}\n[policies.p]\nchecks = [\"s\"]\n"
    );
    Config::from_toml(&text, "test.toml").unwrap()
}

/// How many of `n` requests of `user` the running policy `p` admits, each awaited.
async fn admitted(limits: &LiveLimits, user: &str, n: u32) -> u32 {
    let mut admitted = 0;
    for _ in 0..n {
        let policy = limits.policy("p").unwrap();
        admitted += u32::from(policy.acquire_async(&request(user)).await.is_allowed());
    }
    admitted
}

#[tokio::test]
async fn a_leased_limit_from_a_file_admits_its_quota_and_no_more() {
    let server = RedisServer::start();
    // 5 a day: nothing refills within the test.
    for store in [
        "",
        ", lease = {}",
        ", lease = { lifetime = \"2s\", max = 2 }",
    ] {
        let config = shared(&server.url(), "5/d", store);
        let limits = LiveLimits::new(config, Extractors::new()).unwrap();
        // A key of its own per store, under the limit's one prefix.
        let user = format!("alice{}", store.len());
        assert_eq!(admitted(&limits, &user, 8).await, 5, "{store:?}");
    }
}

#[tokio::test]
async fn a_change_of_lease_settings_is_a_new_limiter() {
    let server = RedisServer::start();
    let url = server.url();
    let limits = LiveLimits::new(shared(&url, "5/d", ""), Extractors::new()).unwrap();
    let changes = limits
        .reload(shared(&url, "5/d", ", lease = { max = 2 }"))
        .unwrap();
    assert_eq!(
        changes.changes(),
        [Change::LimitReplaced {
            limit: "s".into(),
            why: Replaced::Store
        }]
    );
    assert_eq!(limits.version(), 2);
}
