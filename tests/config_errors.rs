//! Each kind of mistake in a limits file is refused with its file, line, column and
//! field, and says what was expected.

use turnstile::config::{Config, ConfigError, Extractors, Format, LiveLimits};

/// A valid file, to which each test adds one mistake.
const GOOD: &str = r#"
[limits.per-user]
quota = "100/min"
key = { header = "x-api-key" }

[policies.api]
checks = ["per-user"]

[layer]
fallback = "api"
"#;

fn toml_error(text: &str) -> ConfigError {
    Config::from_toml(text, "limits.toml").unwrap_err()
}

#[test]
fn the_good_file_loads() {
    let config = Config::from_toml(GOOD, "limits.toml").unwrap();
    assert!(LiveLimits::new(config, Extractors::new()).is_ok());
}

#[test]
fn an_unknown_field_is_refused_where_it_is() {
    let text = GOOD.replace("quota = \"100/min\"", "quota = \"100/min\"\nburts = 5");
    let error = toml_error(&text);
    println!("{error}");
    assert_eq!(error.origin(), "limits.toml");
    assert_eq!((error.line(), error.column()), (Some(4), Some(1)));
    assert_eq!(error.field(), "limits.per-user.burts");
    assert!(error.message().contains("unknown field `burts`"), "{error}");
    assert!(error.message().contains("expected one of"), "{error}");
}

#[test]
fn a_bad_quota_string_says_what_a_quota_looks_like() {
    let error = toml_error(&GOOD.replace("\"100/min\"", "\"100 per minute\""));
    println!("{error}");
    assert_eq!((error.line(), error.column()), (Some(3), Some(9)));
    assert_eq!(error.field(), "limits.per-user.quota");
    assert!(error.message().contains("\"100/min\""), "{error}");
}

#[test]
fn a_quota_the_algorithm_refuses_carries_the_algorithms_own_error() {
    let text = GOOD.replace(
        "quota = \"100/min\"",
        "algorithm = \"sliding_window\"\nquota = { capacity = 4294967295, refill_every = \"1ns\" }",
    );
    let error = toml_error(&text);
    println!("{error}");
    assert_eq!(error.field(), "limits.per-user");
    assert!(error.line().is_some());
    let own = turnstile::SlidingWindowCounter::<String>::new(
        turnstile::Quota::new(u32::MAX, std::time::Duration::from_nanos(1)).unwrap(),
    )
    .unwrap_err()
    .to_string();
    assert!(error.message().contains(&own), "{error} lacks {own}");
    assert!(
        error.message().contains("sliding_window cannot hold"),
        "{error}"
    );
}

#[test]
fn an_unknown_algorithm_lists_the_known_ones() {
    let text = GOOD.replace(
        "quota = \"100/min\"",
        "algorithm = \"leaky_bucket\"\nquota = \"100/min\"",
    );
    let error = toml_error(&text);
    println!("{error}");
    assert_eq!(error.field(), "limits.per-user.algorithm");
    assert_eq!(error.line(), Some(3));
    assert!(error.message().contains("leaky_bucket"), "{error}");
    assert!(error.message().contains("token_bucket"), "{error}");
}

#[test]
fn a_bad_cidr_is_refused_with_the_cidr_error() {
    let text =
        format!("{GOOD}\n[client_address]\ntrusted_proxies = [\"10.0.0.0/8\", \"10.0.0.300/8\"]\n");
    let error = toml_error(&text);
    println!("{error}");
    assert_eq!(error.field(), "client_address.trusted_proxies[1]");
    assert_eq!(error.line(), Some(13));
    assert!(
        error
            .message()
            .contains("\"10.0.0.300/8\" is not a CIDR range"),
        "{error}"
    );
}

#[test]
fn a_name_that_points_nowhere_is_refused_at_its_own_line() {
    let error = toml_error(&GOOD.replace(
        "checks = [\"per-user\"]",
        "checks = [\"per-user\", \"per-ip\"]",
    ));
    println!("{error}");
    assert_eq!(error.field(), "policies.api.checks[1]");
    assert_eq!(error.line(), Some(7));
    assert!(
        error.message().contains("unknown limit \"per-ip\""),
        "{error}"
    );
    assert!(error.message().contains("per-user"), "{error}");

    let error = toml_error(&GOOD.replace("fallback = \"api\"", "fallback = \"apl\""));
    assert_eq!(error.field(), "layer.fallback");
    assert_eq!(error.line(), Some(10));
    assert!(
        error.message().contains("unknown policy \"apl\""),
        "{error}"
    );
}

#[test]
fn an_extractor_the_program_did_not_register_is_refused_when_the_limits_are_built() {
    let text = GOOD.replace(
        "key = { header = \"x-api-key\" }",
        "key = { extractor = \"tenant\" }",
    );
    // Read alone, the file cannot know the program's extractors…
    let config = Config::from_toml(&text, "limits.toml").unwrap();
    // …built, it is refused at the name's line.
    let error = LiveLimits::new(config, Extractors::new()).unwrap_err();
    println!("{error}");
    assert_eq!(error.field(), "limits.per-user.key.extractor");
    assert_eq!(error.line(), Some(4));
    assert!(
        error.message().contains("unknown extractor \"tenant\""),
        "{error}"
    );
}

#[test]
fn bad_statuses_prefixes_and_durations_are_refused() {
    let status = toml_error(&format!("{GOOD}statuses = {{ missing_key = 200 }}\n"));
    println!("{status}");
    assert_eq!(status.field(), "layer.statuses.missing_key");
    assert!(
        status.message().contains("must be a 4xx or 5xx"),
        "{status}"
    );

    let prefix = toml_error(&format!(
        "{GOOD}routes = [{{ prefix = \"balance\", policy = \"api\" }}]\n"
    ));
    assert_eq!(prefix.field(), "layer.routes[0].prefix");
    assert!(prefix.message().contains("must start with '/'"), "{prefix}");

    let delay = toml_error(&format!("{GOOD}delay = \"soon\"\n"));
    assert_eq!(delay.field(), "layer.delay");
    assert!(delay.message().contains("a duration such as"), "{delay}");
}

#[test]
fn a_syntax_error_has_a_place_and_no_field() {
    let error = toml_error("[limits.a\nquota = 1");
    println!("{error}");
    assert_eq!(error.field(), "");
    assert_eq!(error.line(), Some(1));
}

#[test]
fn json_and_yaml_mistakes_are_located_too() {
    let json = r#"{
  "limits": {
    "per-user": { "quota": "100/fortnight", "key": { "header": "x-api-key" } }
  }
}"#;
    let error = Config::from_json(json, "limits.json").unwrap_err();
    println!("{error}");
    assert_eq!(error.field(), "limits.per-user.quota");
    assert_eq!(error.line(), Some(3));
    assert!(
        error.message().contains("is not a quota such as"),
        "{error}"
    );

    let yaml = "limits:\n  per-user:\n    quota: 100/min\n    key:\n      header: x-api-key\n    colour: blue\n";
    let error = Config::from_yaml(yaml, "limits.yaml").unwrap_err();
    println!("{error}");
    assert_eq!(error.field(), "limits.per-user.colour");
    assert_eq!(error.line(), Some(6));
    assert!(
        error.message().contains("unknown field `colour`"),
        "{error}"
    );

    let yaml = "limits:\n  per-user:\n    quota: 100/min\n    key: {header: x-api-key}\npolicies:\n  api:\n    checks: [per-user, nobody]\n";
    let error = Config::from_yaml(yaml, "limits.yaml").unwrap_err();
    println!("{error}");
    assert_eq!(error.field(), "policies.api.checks[1]");
    assert_eq!(error.line(), Some(7));
}

#[test]
fn the_three_formats_say_the_same() {
    let toml = Config::from_toml(GOOD, "a.toml").unwrap();
    let json = r#"{ "limits": { "per-user": { "quota": "100/min", "key": { "header": "x-api-key" } } },
        "policies": { "api": { "checks": ["per-user"] } }, "layer": { "fallback": "api" } }"#;
    let yaml = "limits:\n  per-user:\n    quota: 100/min\n    key: {header: x-api-key}\npolicies:\n  api:\n    checks: [per-user]\nlayer:\n  fallback: api\n";
    assert_eq!(Config::parse(json, Format::Json, "a.json").unwrap(), toml);
    assert_eq!(Config::parse(yaml, Format::Yaml, "a.yaml").unwrap(), toml);
}

#[test]
fn the_example_servers_files_load() {
    for path in [
        concat!(env!("CARGO_MANIFEST_DIR"), "/examples/limits.toml"),
        concat!(env!("CARGO_MANIFEST_DIR"), "/examples/limits-generous.toml"),
    ] {
        let config = Config::load(path).unwrap();
        // The server registers `/chat`'s estimate; the files name it.
        let extractors = Extractors::new().estimate("chat", |_: &http::request::Parts| 1);
        assert!(
            LiveLimits::new(config.clone(), extractors).is_ok(),
            "{path}"
        );
        let unregistered = LiveLimits::new(config, Extractors::new()).unwrap_err();
        assert_eq!(
            unregistered.field(),
            "policies.chat.checks[0].cost.estimate"
        );
    }
}

#[test]
fn the_guides_example_file_loads() {
    let page = include_str!("../src/guide/limits_from_a_file.rs");
    let block: String = page
        .lines()
        .skip_while(|line| *line != "//! ```toml")
        .skip(1)
        .take_while(|line| *line != "//! ```")
        .map(|line| format!("{}\n", line.trim_start_matches("//!").trim_start()))
        .collect();
    assert!(block.contains("[limits.login]"));
    let config = Config::from_toml(&block, "guide.toml").unwrap();
    let tenant = |request: &http::request::Parts| {
        request
            .headers
            .get("x-tenant")
            .and_then(|value| value.to_str().ok())
            .map(str::to_owned)
    };
    let prompt = |request: &http::request::Parts| request.headers.len() as u32;
    let extractors = Extractors::new()
        .register("tenant", tenant)
        .estimate("prompt", prompt);
    assert!(LiveLimits::new(config, extractors).is_ok());
}

#[cfg(feature = "redis")]
#[test]
fn a_shared_limit_of_an_algorithm_without_a_script_is_refused() {
    let text = GOOD.replace(
        "quota = \"100/min\"",
        "algorithm = \"gcra\"\nquota = \"100/min\"\nstore = { redis = \"redis://127.0.0.1/\" }",
    );
    let error = toml_error(&text);
    assert_eq!(error.field(), "limits.per-user");
    assert!(
        error
            .message()
            .contains("token_bucket or a fixed_window, not gcra"),
        "{error}"
    );
}

/// `GOOD` with `settings` added to its limit.
fn with_memory(settings: &str) -> String {
    GOOD.replace(
        "quota = \"100/min\"",
        &format!("quota = \"100/min\"\n{settings}"),
    )
}

#[test]
fn memory_settings_load_and_overflow_defaults_to_deny() {
    for settings in [
        "max_keys = 250000",
        "max_keys = 250000\noverflow = \"deny\"",
        "max_keys = 1\noverflow = \"50/s\"",
        "max_keys = 10\noverflow = { capacity = 5, refill_every = \"1s\" }",
        "eviction_margin = \"0s\"",
        "eviction_margin = \"5m\"",
    ] {
        let config = Config::from_toml(&with_memory(settings), "limits.toml")
            .unwrap_or_else(|error| panic!("{settings}: {error}"));
        assert!(
            LiveLimits::new(config, Extractors::new()).is_ok(),
            "{settings}"
        );
    }
    // "deny" is trimmed as a quota's text is: not read as a quota, said of "deny".
    assert_eq!(
        Config::from_toml(
            &with_memory("max_keys = 7\noverflow = \" deny \""),
            "limits.toml"
        )
        .unwrap(),
        Config::from_toml(&with_memory("max_keys = 7"), "limits.toml").unwrap()
    );
    // Unset and explicit "deny" say the same.
    assert_eq!(
        Config::from_toml(&with_memory("max_keys = 7"), "limits.toml").unwrap(),
        Config::from_toml(
            &with_memory("max_keys = 7\noverflow = \"deny\""),
            "limits.toml"
        )
        .unwrap()
    );
}

#[test]
fn an_overflow_without_max_keys_is_refused() {
    let error = toml_error(&with_memory("overflow = \"deny\""));
    println!("{error}");
    assert_eq!(error.field(), "limits.per-user");
    assert!(error.line().is_some());
    assert!(error.message().contains("set max_keys too"), "{error}");
}

#[test]
fn max_keys_that_is_not_a_count_of_at_least_1_is_refused_at_its_own_line() {
    // 0 is a mistake of max_keys alone: said at max_keys (line 4, after its `=`),
    // as a negative number or a fraction is, in words a file's author reads (not
    // serde's `usize`).
    for (value, says) in [
        ("0", "at least 1"),
        ("-5", "-5"),
        ("1.5", "1.5"),
        ("\"10\"", "\"10\""),
    ] {
        let error = toml_error(&with_memory(&format!("max_keys = {value}")));
        println!("{error}");
        assert_eq!(error.field(), "limits.per-user.max_keys", "{error}");
        assert_eq!(
            (error.line(), error.column()),
            (Some(4), Some(12)),
            "{error}"
        );
        assert!(error.message().contains(says), "{error}");
        assert!(
            error
                .message()
                .contains("a whole number of keys, at least 1"),
            "{error}"
        );
        assert!(!error.message().contains("usize"), "{error}");
    }
    // The same in YAML and JSON: at max_keys's own line.
    let yaml = "limits:\n  a:\n    quota: 5/h\n    key: { header: x-api-key }\n    \
                max_keys: 0\npolicies:\n  p:\n    checks: [a]\n";
    let error = Config::from_yaml(yaml, "limits.yaml").unwrap_err();
    println!("{error}");
    assert_eq!(error.field(), "limits.a.max_keys");
    assert_eq!(error.line(), Some(5));
    assert!(error.message().contains("at least 1"), "{error}");
    let json = "{\"limits\": {\"a\": {\"quota\": \"5/h\", \"key\": {\"header\": \"x-api-key\"},\n\
                \"max_keys\": 0}},\n\"policies\": {\"p\": {\"checks\": [\"a\"]}}}";
    let error = Config::from_json(json, "limits.json").unwrap_err();
    println!("{error}");
    assert_eq!(error.field(), "limits.a.max_keys");
    assert_eq!(error.line(), Some(2));
    assert!(error.message().contains("at least 1"), "{error}");
}

#[test]
fn an_overflow_that_is_not_deny_or_a_quota_says_what_it_takes() {
    let error = toml_error(&with_memory("max_keys = 10\noverflow = \"allow\""));
    println!("{error}");
    assert_eq!(error.field(), "limits.per-user.overflow");
    assert_eq!(error.line(), Some(5));
    assert!(error.message().contains("\"deny\", or a quota"), "{error}");
    let error = toml_error(&with_memory("max_keys = 10\noverflow = 5"));
    assert_eq!(error.field(), "limits.per-user.overflow");
    assert!(error.message().contains("\"deny\", or a quota"), "{error}");
}

#[test]
fn an_overflow_quota_the_algorithm_refuses_carries_its_own_error() {
    let error = toml_error(&with_memory(
        "algorithm = \"sliding_window\"\nmax_keys = 10\n\
         overflow = { capacity = 4294967295, refill_every = \"1ns\" }",
    ));
    println!("{error}");
    assert_eq!(error.field(), "limits.per-user");
    assert!(
        error
            .message()
            .contains("sliding_window cannot hold the overflow quota"),
        "{error}"
    );
}

// Without the `redis` feature a shared limit is refused first, for that.
#[cfg(feature = "redis")]
#[test]
fn memory_settings_on_a_shared_limit_are_refused() {
    // The default margin written out too: a shared limit takes none of them.
    for settings in [
        "max_keys = 10",
        "eviction_margin = \"2s\"",
        "eviction_margin = \"1s\"",
    ] {
        let error = toml_error(&with_memory(&format!(
            "{settings}\nstore = {{ redis = \"redis://127.0.0.1/\" }}"
        )));
        println!("{error}");
        assert_eq!(error.field(), "limits.per-user");
        assert!(error.message().contains("in-process limit's"), "{error}");
    }
}

#[test]
fn a_missing_refill_every_is_reported_as_missing() {
    let error = toml_error(&GOOD.replace("\"100/min\"", "{ capacity = 5 }"));
    println!("{error}");
    assert_eq!(error.field(), "limits.per-user.quota");
    assert!(
        error.message().contains("missing field `refill_every`"),
        "{error}"
    );
    let error = toml_error(&GOOD.replace("\"100/min\"", "{ capacity = 5, refill_every = 5 }"));
    assert_eq!(error.field(), "limits.per-user.quota.refill_every");
    assert!(error.message().contains("a duration such as"), "{error}");
}

#[test]
fn loose_quota_text_is_refused() {
    for (loose, says) in [
        ("10/sburst50", "is not a quota"),
        ("10/s burst50", "is not a quota"),
        ("+5/s", "must be a whole number"),
        (
            "1/99999999999999999999d",
            "longer than the clocks can measure",
        ),
    ] {
        let error = toml_error(&GOOD.replace("100/min", loose));
        println!("{error}");
        assert_eq!(error.field(), "limits.per-user.quota", "{loose}");
        assert_eq!(error.line(), Some(3), "{loose}");
        assert!(error.message().contains(says), "{loose}: {error}");
    }
    // The Greek mu reads as the micro sign does.
    let micro =
        |text: &str| Config::from_toml(&GOOD.replace("\"100/min\"", text), "limits.toml").unwrap();
    assert_eq!(
        micro("{ capacity = 5, refill_every = \"10\u{3bc}s\" }"),
        micro("{ capacity = 5, refill_every = \"10\u{b5}s\" }")
    );
}

#[test]
fn an_ipv6_prefix_outside_1_to_128_is_refused_not_clamped() {
    for bits in [0, 129, 200] {
        let error = toml_error(&format!("{GOOD}\n[client_address]\nipv6_prefix = {bits}\n"));
        println!("{error}");
        assert_eq!(error.field(), "client_address.ipv6_prefix");
        assert!(error.line().is_some());
        assert!(error.message().contains("from 1 to 128"), "{error}");
    }
    for bits in [1, 64, 128] {
        let text = format!("{GOOD}\n[client_address]\nipv6_prefix = {bits}\n");
        assert!(Config::from_toml(&text, "limits.toml").is_ok(), "{bits}");
    }
}

#[test]
fn a_check_of_cost_0_is_refused() {
    let error = toml_error(&GOOD.replace(
        "checks = [\"per-user\"]",
        "checks = [{ limit = \"per-user\", cost = 0 }]",
    ));
    println!("{error}");
    assert_eq!(error.field(), "policies.api.checks[0].cost");
    assert_eq!(error.line(), Some(7));
    assert!(error.message().contains("at least 1"), "{error}");
}

#[test]
fn a_route_prefix_given_twice_is_refused() {
    let error = toml_error(&format!(
        "{GOOD}routes = [{{ prefix = \"/a\", policy = \"api\" }}, {{ prefix = \"/a\", policy = \"api\" }}]\n"
    ));
    println!("{error}");
    assert_eq!(error.field(), "layer.routes");
    assert!(error.line().is_some());
    assert!(error.message().contains("routes[1]"), "{error}");
    assert!(error.message().contains("routes[0]'s already"), "{error}");
}

#[test]
fn a_limit_in_dry_run_in_one_policy_and_enforced_in_another_is_refused() {
    let text = format!(
        "{GOOD}\n[policies.trial]\nchecks = [{{ limit = \"per-user\", dry_run = true }}]\n"
    );
    let error = toml_error(&text);
    println!("{error}");
    assert_eq!(error.origin(), "limits.toml");
    assert_eq!(error.field(), "policies.trial");
    assert_eq!(error.line(), Some(12), "{error}");
    assert!(
        error
            .message()
            .contains("in dry run at policies.trial.checks[0]"),
        "{error}"
    );
    assert!(
        error
            .message()
            .contains("enforced at policies.api.checks[0]"),
        "{error}"
    );
    // A policy in dry run as a whole counts as its checks.
    let text = format!("{GOOD}\n[policies.trial]\nchecks = [\"per-user\"]\ndry_run = true\n");
    assert_eq!(toml_error(&text).field(), "policies.trial");
    // Located in JSON too.
    let json = r#"{ "limits": { "a": { "quota": "1/s", "key": "client_address" } },
      "policies": {
        "p": { "checks": ["a"] },
        "q": { "checks": [{ "limit": "a", "dry_run": true }] } } }"#;
    let error = Config::from_json(json, "limits.json").unwrap_err();
    println!("{error}");
    assert_eq!(error.field(), "policies.q");
    assert_eq!(error.line(), Some(4));
}

#[test]
fn a_limit_defined_twice_is_refused_in_every_format() {
    let json = r#"{ "limits": {
        "a": { "quota": "1/s", "key": "client_address" },
        "a": { "quota": "2/s", "key": "client_address" } },
      "policies": { "p": { "checks": ["a"] } } }"#;
    let error = Config::from_json(json, "limits.json").unwrap_err();
    println!("{error}");
    assert_eq!(error.field(), "limits");
    assert_eq!(error.line(), Some(3));
    assert!(
        error.message().contains("limit \"a\" is defined twice"),
        "{error}"
    );

    let yaml = "limits:\n  a: {quota: 1/s, key: client_address}\n  a: {quota: 2/s, key: client_address}\npolicies:\n  p: {checks: [a]}\n";
    let error = Config::from_yaml(yaml, "limits.yaml").unwrap_err();
    println!("{error}");
    assert!(error.message().contains("is defined twice"), "{error}");
    assert!(error.line().is_some(), "{error}");

    let toml = "[limits.a]\nquota = \"1/s\"\nkey = \"client_address\"\n[limits.a]\nquota = \"2/s\"\nkey = \"client_address\"\n";
    assert!(Config::from_toml(toml, "limits.toml").is_err());
}

#[test]
fn the_format_follows_the_extension_in_any_case() {
    use std::path::Path;
    assert_eq!(Format::from_path(Path::new("a.TOML")), Some(Format::Toml));
    assert_eq!(Format::from_path(Path::new("a.Yml")), Some(Format::Yaml));
    assert_eq!(Format::from_path(Path::new("a.json")), Some(Format::Json));
    assert_eq!(Format::from_path(Path::new("a.ini")), None);
}

/// A fresh directory of the system's temporary one, for this test alone.
fn scratch_dir(test: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("turnstile-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn a_file_over_16_mib_is_refused_before_it_is_read() {
    let dir = scratch_dir("oversized");
    let path = dir.join("limits.toml");
    std::fs::write(&path, GOOD).unwrap();
    assert!(Config::load(&path).is_ok(), "the good file, small, loads");
    // Sparse: 16 MiB and a byte, of which nothing is written.
    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    file.set_len(16 * 1024 * 1024 + 1).unwrap();
    let error = Config::load(&path).unwrap_err();
    assert_eq!(error.origin(), path.display().to_string());
    assert!(error.message().contains("16777217 bytes"), "{error}");
    assert!(error.message().contains("larger than"), "{error}");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_directory_is_refused_as_not_a_regular_file() {
    let dir = scratch_dir("directory");
    let path = dir.join("limits.toml");
    std::fs::create_dir(&path).unwrap();
    let error = Config::load(&path).unwrap_err();
    assert_eq!(error.origin(), path.display().to_string());
    assert!(error.message().contains("not a regular file"), "{error}");
    std::fs::remove_dir_all(dir).unwrap();
}

/// A FIFO would block its reader until a writer came: it is refused instead, at once.
/// (Were it opened, this test would hang: nothing ever writes to it.)
#[cfg(unix)]
#[test]
fn a_fifo_is_refused_without_waiting_for_a_writer() {
    let dir = scratch_dir("fifo");
    let path = dir.join("limits.toml");
    let made = std::process::Command::new("mkfifo").arg(&path).status();
    assert!(made.is_ok_and(|status| status.success()), "mkfifo");
    let error = Config::load(&path).unwrap_err();
    assert_eq!(error.origin(), path.display().to_string());
    assert!(
        error.message().contains("not a regular file (a FIFO)"),
        "{error}"
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn settle_from_takes_a_header_name_and_nothing_else() {
    for (setting, field, expected) in [
        (
            "settle_from = { header = \"x tokens\" }",
            "layer.settle_from.header",
            "not a valid header name",
        ),
        (
            "settle_from = { header = \"x-tokens\", trailer = true }",
            "layer.settle_from.trailer",
            "unknown field `trailer`, expected `header`",
        ),
        (
            "settle_from = \"x-tokens\"",
            "layer.settle_from",
            "a table { header = \"NAME\" }",
        ),
    ] {
        let error = toml_error(&format!("{GOOD}{setting}\n"));
        println!("{error}");
        assert_eq!(error.field(), field, "{setting}");
        assert_eq!(error.line(), Some(11), "{setting}");
        assert!(error.message().contains(expected), "{error}");
    }
    let good = format!("{GOOD}settle_from = {{ header = \"x-tokens\" }}\n");
    let good = good.replace(
        "checks = [\"per-user\"]",
        "checks = [{ limit = \"per-user\", cost = 10, settled = true }]",
    );
    assert!(Config::from_toml(&good, "limits.toml").is_ok());
}

#[test]
fn a_table_given_as_a_value_of_another_kind_says_what_table_was_expected() {
    let limit = "key = { header = \"x-api-key\" }";
    for (text, field, expected) in [
        (
            format!("{GOOD}statuses = 1\n"),
            "layer.statuses",
            "a table of statuses { missing_key, exceeds_capacity, unavailable }",
        ),
        (
            format!("{GOOD}routes = [1]\n"),
            "layer.routes[0]",
            "a route { prefix = \"/PATH\", policy = \"NAME\" }",
        ),
        (
            GOOD.replace(limit, &format!("{limit}\nstore = 1")),
            "limits.per-user.store",
            "a table { redis = \"URL\", failure = \"closed\" or \"open\", lease = { lifetime, max } }",
        ),
        (
            format!("client_address = 1\n{GOOD}"),
            "client_address",
            "a table { trusted_proxies, header, ipv6_prefix }",
        ),
        (
            GOOD.replace(
                "[limits.per-user]",
                "[limits]\nother = 1\n[limits.per-user]",
            ),
            "limits.other",
            "a limit: a table with its quota and key",
        ),
    ] {
        let error = toml_error(&text);
        println!("{error}");
        assert_eq!(error.field(), field);
        assert!(error.message().contains(expected), "{error}");
        assert!(!error.message().contains("struct"), "{error}");
    }
}

#[test]
fn an_estimate_the_program_did_not_register_is_refused_when_the_limits_are_built() {
    let text = GOOD.replace(
        "checks = [\"per-user\"]",
        "checks = [{ limit = \"per-user\", cost = { estimate = \"prompt\" }, settled = true }]",
    );
    let config = Config::from_toml(&text, "limits.toml").unwrap();
    let error = LiveLimits::new(config.clone(), Extractors::new()).unwrap_err();
    println!("{error}");
    assert_eq!(error.field(), "policies.api.checks[0].cost.estimate");
    assert_eq!(error.line(), Some(7));
    assert!(
        error.message().contains("unknown estimate \"prompt\""),
        "{error}"
    );
    assert!(error.message().contains("Extractors::estimate"), "{error}");
    let registered = Extractors::new().estimate("prompt", |_: &http::request::Parts| 3);
    assert!(LiveLimits::new(config, registered).is_ok());
}

#[test]
fn a_cost_is_a_whole_number_from_1_or_a_named_estimate() {
    for (cost, field, expected) in [
        ("-1", "policies.api.checks[0].cost", "at least 1, not -1"),
        (
            "4294967296",
            "policies.api.checks[0].cost",
            "at most 4294967295",
        ),
        (
            "1.5",
            "policies.api.checks[0].cost",
            "a whole number, at least 1",
        ),
        (
            "\"5\"",
            "policies.api.checks[0].cost",
            "a whole number, at least 1",
        ),
        (
            "{ estimate = \"prompt\", max = 9 }",
            "policies.api.checks[0].cost.max",
            "unknown field `max`, expected `estimate`",
        ),
    ] {
        let error = toml_error(&GOOD.replace(
            "checks = [\"per-user\"]",
            &format!("checks = [{{ limit = \"per-user\", cost = {cost} }}]"),
        ));
        println!("{error}");
        assert_eq!(error.field(), field, "{cost}");
        assert_eq!(error.line(), Some(7), "{cost}");
        assert!(error.message().contains(expected), "{error}");
    }
}

#[cfg(feature = "redis")]
#[test]
fn a_lease_is_a_shared_token_buckets_and_takes_only_its_settings() {
    let limit = "key = { header = \"x-api-key\" }";
    let store = |algorithm: &str, lease: &str| {
        GOOD.replace(
            limit,
            &format!(
                "{limit}\nalgorithm = \"{algorithm}\"\n\
                 store = {{ redis = \"redis://127.0.0.1/\", lease = {lease} }}"
            ),
        )
    };
    let window = toml_error(&store("fixed_window", "{}"));
    println!("{window}");
    assert_eq!(window.field(), "limits.per-user");
    assert!(
        window.message().contains(
            "a leased limit (store = { lease = ... }) is a token_bucket, not fixed_window"
        ),
        "{window}"
    );
    let unknown = toml_error(&store("token_bucket", "{ size = 3 }"));
    println!("{unknown}");
    assert_eq!(unknown.field(), "limits.per-user.store.lease.size");
    assert!(
        unknown
            .message()
            .contains("unknown field `size`, expected `lifetime` or `max`"),
        "{unknown}"
    );
    assert!(Config::from_toml(&store("token_bucket", "{ max = 4 }"), "limits.toml").is_ok());
}

/// A check that is neither a limit's name nor a table lists every field its table
/// takes, `settled` among them.
#[test]
fn a_check_of_the_wrong_kind_lists_every_field_of_its_table() {
    let error = toml_error(&GOOD.replace("checks = [\"per-user\"]", "checks = [1]"));
    println!("{error}");
    assert_eq!(error.field(), "policies.api.checks[0]");
    assert!(
        error
            .message()
            .contains("{ limit = \"NAME\", cost, dry_run, missing_key, settled }"),
        "{error}"
    );
}

/// The same costs read in JSON and YAML, and their mistakes are located there too: a
/// number, an estimate's table, a cost of 0, an estimate the program did not register.
#[test]
fn costs_read_and_are_located_in_json_and_yaml_too() {
    let json = |check: &str| {
        format!(
            "{{ \"limits\": {{ \"per-user\": {{ \"quota\": \"100/min\", \"key\": {{ \"header\": \"x-api-key\" }} }} }},\n\
             \"policies\": {{ \"api\": {{ \"checks\": [{check}] }} }},\n\
             \"layer\": {{ \"fallback\": \"api\" }} }}"
        )
    };
    let yaml = |cost: &str| {
        format!(
            "limits:\n  per-user:\n    quota: 100/min\n    key: {{header: x-api-key}}\npolicies:\n  api:\n    checks:\n      - limit: per-user\n        cost: {cost}\n        settled: true\nlayer:\n  fallback: api\n"
        )
    };
    let toml = |cost: &str| {
        GOOD.replace(
            "checks = [\"per-user\"]",
            &format!("checks = [{{ limit = \"per-user\", cost = {cost}, settled = true }}]"),
        )
    };
    for (json_cost, yaml_cost, toml_cost) in [
        ("5", "5", "5"),
        (
            "{ \"estimate\": \"x\" }",
            "{estimate: x}",
            "{ estimate = \"x\" }",
        ),
    ] {
        let from_toml = Config::from_toml(&toml(toml_cost), "a.toml").unwrap();
        let from_json = Config::from_json(
            &json(&format!(
                "{{ \"limit\": \"per-user\", \"cost\": {json_cost}, \"settled\": true }}"
            )),
            "a.json",
        )
        .unwrap();
        let from_yaml = Config::from_yaml(&yaml(yaml_cost), "a.yaml").unwrap();
        assert_eq!(from_json, from_toml, "{json_cost}");
        assert_eq!(from_yaml, from_toml, "{yaml_cost}");
    }
    let error =
        Config::from_json(&json("{ \"limit\": \"per-user\", \"cost\": 0 }"), "a.json").unwrap_err();
    println!("{error}");
    assert_eq!(error.field(), "policies.api.checks[0].cost");
    assert_eq!(error.line(), Some(2));
    let error = Config::from_yaml(&yaml("-3"), "a.yaml").unwrap_err();
    println!("{error}");
    assert_eq!(error.field(), "policies.api.checks[0].cost");
    assert_eq!(error.line(), Some(9));
    assert!(error.message().contains("at least 1, not -3"), "{error}");
    let unregistered = Config::from_yaml(&yaml("{estimate: x}"), "a.yaml").unwrap();
    let error = LiveLimits::new(unregistered, Extractors::new()).unwrap_err();
    println!("{error}");
    assert_eq!(error.field(), "policies.api.checks[0].cost.estimate");
    assert_eq!(error.line(), Some(9));
}

/// A lease's `max` of 0, or above the quota's capacity, is refused as the file is
/// read, in the file's own words; the capacity itself is a lease's largest `max`.
#[cfg(feature = "redis")]
#[test]
fn a_lease_max_from_1_to_the_capacity_is_refused_otherwise_as_the_file_is_read() {
    let limit = "key = { header = \"x-api-key\" }";
    let leased = |max: &str| {
        GOOD.replace("\"100/min\"", "\"5/d\"").replace(
            limit,
            &format!(
                "{limit}\nstore = {{ redis = \"redis://127.0.0.1/\", lease = {{ max = {max} }} }}"
            ),
        )
    };
    for (max, expected) in [("0", "not 0"), ("6", "capacity (5), not 6")] {
        let error = toml_error(&leased(max));
        println!("{error}");
        assert_eq!(error.field(), "limits.per-user", "{max}");
        assert!(error.line().is_some(), "{max}");
        assert!(error.message().contains("store.lease.max"), "{error}");
        assert!(error.message().contains(expected), "{error}");
    }
    assert!(Config::from_toml(&leased("5"), "limits.toml").is_ok());
}

/// The wrong-kind messages read the same in YAML and JSON: what table was expected,
/// never serde's struct names.
#[test]
fn a_table_of_the_wrong_kind_says_what_was_expected_in_yaml_and_json_too() {
    let yaml = "limits:\n  per-user:\n    quota: 100/min\n    key: {header: x-api-key}\n    store: 1\npolicies:\n  api:\n    checks: [per-user]\nlayer:\n  fallback: api\n  routes: [1]\n";
    let error = Config::from_yaml(yaml, "limits.yaml").unwrap_err();
    println!("{error}");
    assert_eq!(error.field(), "limits.per-user.store");
    assert_eq!(error.line(), Some(5));
    assert!(
        error.message().contains("a table { redis = \"URL\""),
        "{error}"
    );
    assert!(!error.message().contains("struct"), "{error}");
    let json = r#"{ "limits": { "per-user": 1 },
        "policies": { "api": { "checks": ["per-user"] } }, "layer": { "fallback": "api", "statuses": 1 } }"#;
    let error = Config::from_json(json, "limits.json").unwrap_err();
    println!("{error}");
    assert_eq!(error.field(), "limits.per-user");
    assert_eq!(error.line(), Some(1));
    assert!(error.message().contains("a limit: a table"), "{error}");
    assert!(!error.message().contains("struct"), "{error}");
    let json = r#"{ "limits": { "per-user": { "quota": "100/min", "key": { "header": "x-api-key" } } },
        "policies": { "api": { "checks": ["per-user"] } },
        "layer": { "fallback": "api", "routes": [1], "statuses": 1 },
        "client_address": 1 }"#;
    let error = Config::from_json(json, "limits.json").unwrap_err();
    println!("{error}");
    assert_eq!(error.field(), "layer.routes[0]");
    assert_eq!(error.line(), Some(3));
    assert!(error.message().contains("a route { prefix"), "{error}");
}

/// A lease's lifetime the lease cannot keep (under about 10 ms, beyond 2^52 µs) is
/// refused as the file is read, located at its limit, not when the limits are built.
#[cfg(feature = "redis")]
#[test]
fn a_lease_lifetime_out_of_bounds_is_refused_as_the_file_is_read() {
    let limit = "key = { header = \"x-api-key\" }";
    let leased = |lifetime: &str| {
        GOOD.replace(
            limit,
            &format!(
                "{limit}\nstore = {{ redis = \"redis://127.0.0.1/\", lease = {{ lifetime = \"{lifetime}\" }} }}"
            ),
        )
    };
    for lifetime in ["1ms", "200000d"] {
        let error = toml_error(&leased(lifetime));
        println!("{error}");
        assert_eq!(error.field(), "limits.per-user", "{lifetime}");
        assert_eq!(error.line(), Some(2), "{lifetime}");
        assert!(error.message().contains("store.lease.lifetime"), "{error}");
        assert!(error.message().contains("at least 10.5 ms"), "{error}");
    }
    assert!(Config::from_toml(&leased("11ms"), "limits.toml").is_ok());
}
