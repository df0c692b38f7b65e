//! The RateLimit header fields' syntax, as draft-ietf-httpapi-ratelimit-headers-11
//! defines it (sections 3.1 and 4.1), checked with a structured-field parser: first
//! against the draft's own examples, then against what the layer sends in every kind
//! of response.

use crate::server::{get, per_ip, per_user, serve};
use http::StatusCode;
use sfv::{BareItem, ListEntry, Parser};
use std::sync::Arc;
use std::time::Duration;
use turnstile::http::RateLimitLayer;
use turnstile::policy::{Check, Limit, Policy};
use turnstile::{ManualClock, Overflow, Quota, TokenBucket};

/// The parameters a field's items must and may carry.
struct Rules {
    /// Required: a non-negative Integer.
    required: &'static str,
    /// Optional non-negative Integers, and whether each must be non-zero.
    integers: &'static [(&'static str, bool)],
}

/// `RateLimit-Policy` (section 3.1): `q` required, `w` optional and non-zero, `qu` a
/// String, `pk` a Byte Sequence.
const POLICY: Rules = Rules {
    required: "q",
    integers: &[("w", true)],
};

/// `RateLimit` (section 4.1): `r` required, `t` optional, `pk` a Byte Sequence.
const LIMIT: Rules = Rules {
    required: "r",
    integers: &[("t", false)],
};

/// Why `field` is not a valid value under `rules`, if it is not: a List of Items, each
/// a String naming a policy, with the parameters the rules ask for. Other parameters
/// are allowed ("regarded as comments").
fn invalid(field: &str, rules: &Rules) -> Option<String> {
    let list = match Parser::new(field).parse_list::<sfv::List>() {
        Ok(list) => list,
        Err(error) => return Some(format!("not a structured-field List: {error}")),
    };
    if list.is_empty() {
        return Some("an empty List".into());
    }
    for entry in list {
        let ListEntry::Item(item) = entry else {
            return Some("an inner list".into());
        };
        if !matches!(item.bare_item, BareItem::String(_)) {
            return Some(format!("{:?} is not a String", item.bare_item));
        }
        let non_negative = |name: &str, non_zero: bool| match item.params.get(name) {
            Some(BareItem::Integer(n))
                if i64::from(*n) > 0 || (!non_zero && i64::from(*n) == 0) =>
            {
                Ok(true)
            }
            Some(other) => Err(format!("{name}={other:?}")),
            None => Ok(false),
        };
        match non_negative(rules.required, false) {
            Ok(true) => {}
            Ok(false) => return Some(format!("no {}", rules.required)),
            Err(bad) => return Some(bad),
        }
        for &(name, non_zero) in rules.integers {
            if let Err(bad) = non_negative(name, non_zero) {
                return Some(bad);
            }
        }
        match item.params.get("qu") {
            None | Some(BareItem::String(_)) => {}
            Some(other) => return Some(format!("qu={other:?}")),
        }
        match item.params.get("pk") {
            None | Some(BareItem::ByteSequence(_)) => {}
            Some(other) => return Some(format!("pk={other:?}")),
        }
    }
    None
}

#[test]
fn the_drafts_own_examples_are_valid_and_broken_ones_are_not() {
    let policies = [
        r#""burst";q=100;w=60,"daily";q=1000;w=86400"#,
        r#""default";q=100;w=10"#,
        r#""permin";q=50;w=60,"perhr";q=1000;w=3600"#,
        r#""peruser";q=100;w=60;pk=:cHsdsRa894==:"#,
        r#""peruser";q=65535;qu="content-bytes";w=10;pk=:sdfjLJUOUH==:"#,
        r#""basic";q=100;w=60"#,
        r#""hour";q=1000;w=3600, "day";q=5000;w=86400"#,
        r#""somepolicy";q=10000;w=1000"#,
    ];
    let limits = [
        r#""default";r=50;t=30"#,
        r#""default";r=999;pk=:dHJpYWwxMjEzMjM=:"#,
        r#""default";r=300000000;t=60;pk=:QXBwLTk5OQ==:"#,
        r#""problemPolicy";r=0;t=10"#,
        r#""default";r=1;t=7"#,
        r#""default";r=0;t=50"#,
        r#""dayLimit";r=100;t=36000"#,
        r#""basic";r=60;t=58"#,
        r#""fixedwindow";r=99;t=50"#,
        r#""dynamic";r=15;t=40"#,
        r#""sliding";q=12;r=6;t=1"#,
    ];
    for field in policies {
        assert_eq!(invalid(field, &POLICY), None, "{field}");
    }
    for field in limits {
        assert_eq!(invalid(field, &LIMIT), None, "{field}");
    }
    let broken = [
        (r#""default";t=30"#, &LIMIT),       // no r
        (r#"default;r=5;t=30"#, &LIMIT),     // a Token, not a String
        (r#""default";r=-1"#, &LIMIT),       // negative
        (r#""default";r=5;t=1.5"#, &LIMIT),  // a Decimal
        (r#""default";q=100;w=0"#, &POLICY), // a zero window
        (r#""default";w=60"#, &POLICY),      // no q
        (r#""default";r=5;pk="x""#, &LIMIT), // pk not a Byte Sequence
        (r#""default";r=5,"#, &LIMIT),       // a trailing comma
    ];
    for (field, rules) in broken {
        assert!(invalid(field, rules).is_some(), "{field} accepted");
    }
}

/// Every RateLimit field of `reply`, checked.
fn assert_valid(reply: &crate::server::Reply) {
    for value in reply.headers.get_all("ratelimit-policy") {
        let value = value.to_str().unwrap();
        assert_eq!(invalid(value, &POLICY), None, "RateLimit-Policy: {value}");
    }
    for value in reply.headers.get_all("ratelimit") {
        let value = value.to_str().unwrap();
        assert_eq!(invalid(value, &LIMIT), None, "RateLimit: {value}");
    }
}

#[tokio::test]
async fn every_kind_of_response_sends_valid_fields() {
    let clock = ManualClock::new();
    // Two checks, one a windowed limit of a sub-second window; a third route at a key
    // cap of one; a fourth whose cost no key can ever hold.
    let two = Policy::builder()
        .check(per_user("per-user", Quota::per_minute(2).unwrap(), &clock))
        .check(per_ip(
            "per-ip",
            Quota::new(50, Duration::from_millis(3)).unwrap(),
            &clock,
        ))
        .build()
        .unwrap();
    let capped_quota = Quota::per_minute(5).unwrap();
    let capped = Arc::new(
        TokenBucket::<String, _>::builder(capped_quota)
            .clock(clock.clone())
            .max_keys(1, Overflow::Deny)
            .manual_eviction()
            .build()
            .unwrap(),
    );
    let capped = Policy::builder()
        .check(Check::new(
            "capped",
            capped,
            Limit::windowed(capped_quota),
            turnstile::http::HeaderKey::new(crate::server::API_KEY),
        ))
        .build()
        .unwrap();
    let advertised = Quota::per_minute(10).unwrap();
    let never = Policy::builder()
        .check(
            Check::new(
                "never",
                crate::server::bucket::<String, _>(Quota::per_minute(3).unwrap(), &clock),
                Limit::steady(advertised),
                turnstile::http::HeaderKey::new(crate::server::API_KEY),
            )
            .cost(5),
        )
        .build()
        .unwrap();
    let layer = RateLimitLayer::builder(two)
        .prefix("/capped", capped)
        .prefix("/never", never)
        .build()
        .unwrap();
    let server = serve(layer).await;
    let mut statuses = Vec::new();
    // Each request, and whether its response reports a limit (every response of a
    // route with checks lists them; a request without a key has none to report).
    for (path, key, reports) in [
        ("/", Some("alice"), true),
        ("/", Some("alice"), true),
        ("/", Some("alice"), true), // denied
        ("/", None, false),         // no key
        ("/capped", Some("bob"), true),
        ("/capped", Some("carol"), true), // over the key cap
        ("/never", Some("dave"), true),   // cost above capacity
    ] {
        let reply = get(server, 1, path, key).await;
        assert_valid(&reply);
        assert!(reply.header("ratelimit-policy").is_some(), "{path} {key:?}");
        assert_eq!(
            reply.header("ratelimit").is_some(),
            reports,
            "{path} {key:?}"
        );
        statuses.push(reply.status);
    }
    assert_eq!(
        statuses,
        [
            StatusCode::OK,
            StatusCode::OK,
            StatusCode::TOO_MANY_REQUESTS,
            StatusCode::BAD_REQUEST,
            StatusCode::OK,
            StatusCode::SERVICE_UNAVAILABLE,
            StatusCode::TOO_MANY_REQUESTS,
        ]
    );
}
