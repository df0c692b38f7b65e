//! The header field values: `Retry-After`, `RateLimit-Policy` and `RateLimit`.

use crate::Decision;
use crate::policy::{Binding, Limit, Policy};
use http::request::Parts;
use http::{HeaderName, HeaderValue};
use std::fmt::Write;
use std::time::Duration;

/// The `RateLimit-Policy` field name.
pub const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
/// The `RateLimit` field name.
pub const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");

/// `d` in whole seconds, rounded up: a client that waits that long has waited at
/// least `d`. `Duration::MAX` (a wait that never ends) saturates at `u64::MAX`.
pub(crate) fn seconds_rounded_up(d: Duration) -> u64 {
    d.as_secs().saturating_add(u64::from(d.subsec_nanos() > 0))
}

/// `Retry-After` for a refusal that can pass after `retry_after`: whole seconds,
/// rounded up, and never 0 — a refused request always has something to wait for.
pub(crate) fn retry_after(retry_after: Duration) -> HeaderValue {
    HeaderValue::from(seconds_rounded_up(retry_after).max(1))
}

/// `RateLimit-Policy` for `policy`: one item per check, `"name";q=capacity;w=window`
/// (its dry-run checks only when the whole layer is in dry run); `None` for a policy
/// without such checks. The same for every response of the policy, so
/// it is made once.
pub(crate) fn policy_field(policy: &Policy<Parts>, dry_run_layer: bool) -> Option<HeaderValue> {
    let mut field = String::new();
    // A check on trial in an enforced layer is not announced: clients that follow
    // these fields would throttle themselves on a limit that is not enforced. A layer
    // in dry run announces every check, as it will once enforced.
    let reported = (0..policy.len()).filter(|&i| dry_run_layer || !policy.is_dry_run(i));
    for (name, limit) in reported.filter_map(|i| policy.check_info(i)) {
        if !field.is_empty() {
            field.push_str(", ");
        }
        let q = limit.quota().capacity();
        let w = limit.window_secs();
        let _ = write!(field, "\"{name}\";q={q};w={w}");
    }
    // Names are checked when the policy is built, so the value is always valid.
    HeaderValue::try_from(field).ok().filter(|v| !v.is_empty())
}

/// `RateLimit` for the most restrictive check: `"name";r=remaining;t=seconds`.
///
/// Made per response, so written without `format!`: core::fmt cost about as much here
/// as the example's two checks together (`results/http.md`, "Results").
pub(crate) fn limit_field(policy: &Policy<Parts>, binding: Binding) -> Option<HeaderValue> {
    let (name, limit) = policy.check_info(binding.check)?;
    let r = binding.decision.remaining();
    let t = reset_seconds(binding.decision, limit);
    let (mut r_digits, mut t_digits) = (itoa::Buffer::new(), itoa::Buffer::new());
    let (r, t) = (r_digits.format(r), t_digits.format(t));
    // Exactly the length, so turning the String into the value's bytes does not
    // reallocate to shrink it.
    let mut field = String::with_capacity(name.len() + r.len() + t.len() + 8);
    for part in ["\"", name, "\";r=", r, ";t=", t] {
        field.push_str(part);
    }
    // Names are checked when the policy is built, so the value is always valid.
    HeaderValue::try_from(field).ok()
}

/// The `t` parameter, the effective window: whole seconds, rounded up, within which
/// the key can use no more than what it has — until it gains more quota (draft 10's
/// definition of `t`, which names the same instant). An upper bound, never an
/// under-report.
///
/// The limiter does not say when its key's next unit arrives, only what it decided:
/// - a denial's `retry_after` is the exact time until the request's whole cost is
///   there, and the next unit comes no later. It is the denial's whole bound: a key
///   in debt (a settle charged more than it had) regains nothing until refill has
///   repaid the debt, which can take far longer than one refill interval, and
///   `retry_after` counts that debt exactly;
/// - an admitted key regains some within [`Limit::regained_within`] (the refill
///   interval of a token bucket, the window of a window limiter): it is not in debt,
///   or it would have been denied. A cost over the capacity is refused without a
///   look at the key's debt, so its `t` assumes none: the one case where `t` can be
///   short, for a request that can never pass anyway;
/// - an overflow's hint is when its limiter next makes room.
///
/// so `t` is the bound that applies, rounded up. A denial's `t` is its `Retry-After`:
/// for a token bucket denial of cost 1 that is exact to the second (`retry_after` is
/// the next token); for a larger cost it is when that cost is there, later than the
/// next unit, but a denial does not say how much of its wait is debt.
fn reset_seconds(decision: Decision, limit: Limit) -> u64 {
    let bound = match decision {
        Decision::Denied { retry_after, .. } => retry_after,
        Decision::Overflow { retry_hint } => retry_hint,
        Decision::Allowed { .. } | Decision::ExceedsCapacity { .. } => limit.regained_within(),
    };
    seconds_rounded_up(bound)
}

#[cfg(all(test, not(turnstile_loom)))]
mod tests {
    use super::*;
    use crate::Quota;

    #[test]
    fn retry_after_rounds_up_to_whole_seconds_and_is_never_zero() {
        let secs = |d: Duration| retry_after(d).to_str().unwrap().to_owned();
        assert_eq!(secs(Duration::from_secs(1)), "1");
        assert_eq!(secs(Duration::new(1, 1)), "2");
        assert_eq!(secs(Duration::from_nanos(1)), "1");
        assert_eq!(secs(Duration::from_millis(59_001)), "60");
        assert_eq!(secs(Duration::ZERO), "1");
        // A wait that never ends (a denial past the end of a limiter's clock).
        assert_eq!(secs(Duration::MAX), u64::MAX.to_string());
    }

    #[test]
    fn a_window_beyond_durations_range_saturates_t() {
        let endless =
            Limit::windowed(Quota::new(u32::MAX, Duration::from_nanos(u64::MAX)).unwrap());
        let allowed = Decision::Allowed { remaining: 5 };
        assert_eq!(reset_seconds(allowed, endless), u64::MAX);
        let never = Decision::Denied {
            remaining: 0,
            retry_after: Duration::MAX,
        };
        assert_eq!(reset_seconds(never, endless), u64::MAX);
    }

    #[test]
    fn t_bounds_the_next_unit_from_above() {
        let steady = Limit::steady(Quota::per_minute(100).unwrap()); // a token per 600 ms
        let windowed = Limit::windowed(Quota::per_minute(100).unwrap());
        let denied = |ms| Decision::Denied {
            remaining: 0,
            retry_after: Duration::from_millis(ms),
        };
        let allowed = Decision::Allowed { remaining: 5 };
        assert_eq!(reset_seconds(denied(400), steady), 1);
        assert_eq!(
            reset_seconds(denied(3_000), steady),
            3,
            "a cost of 5 waits 3 s; the denial does not say how much of that is debt"
        );
        assert_eq!(
            reset_seconds(denied(41_000), steady),
            41,
            "a key in debt regains nothing until the debt is repaid"
        );
        assert_eq!(reset_seconds(denied(3_000), windowed), 3);
        assert_eq!(reset_seconds(allowed, steady), 1);
        assert_eq!(reset_seconds(allowed, windowed), 60);
        let overflow = Decision::Overflow {
            retry_hint: Duration::from_millis(2_500),
        };
        assert_eq!(reset_seconds(overflow, steady), 3);
    }
}
