//! The response to a refused request: its status, `Retry-After`, and an RFC 9457
//! problem-details body naming the checks that refused.

use super::fields;
use crate::policy::{Outcome, Policy, Verdict};
use http::request::Parts;
use http::{HeaderValue, Response, StatusCode, header};
use std::time::Duration;

/// Why a request was refused; built only from outcomes other than
/// [`Outcome::Allowed`].
#[derive(Clone, Copy, Debug)]
pub(crate) enum Refusal {
    Denied(Duration),
    Overflow(Duration),
    ExceedsCapacity,
    MissingKey,
    Unavailable,
}

impl Refusal {
    /// The refusal in `outcome`; `None` when it allowed the request.
    pub(crate) fn of(outcome: Outcome) -> Option<Self> {
        match outcome {
            Outcome::Allowed => None,
            Outcome::Denied { retry_after } => Some(Refusal::Denied(retry_after)),
            Outcome::Overflow { retry_hint } => Some(Refusal::Overflow(retry_hint)),
            Outcome::ExceedsCapacity => Some(Refusal::ExceedsCapacity),
            Outcome::MissingKey => Some(Refusal::MissingKey),
            Outcome::Unavailable => Some(Refusal::Unavailable),
        }
    }
}

/// The statuses that are configurable; the others are fixed (see `turnstile::http`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Statuses {
    pub(crate) missing_key: StatusCode,
    pub(crate) exceeds_capacity: StatusCode,
    pub(crate) unavailable: StatusCode,
}

/// The problem type the draft registers for a request over its quota, and for a
/// server short of capacity.
const QUOTA_EXCEEDED: &str = "https://iana.org/assignments/http-problem-types#quota-exceeded";
const REDUCED_CAPACITY: &str =
    "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity";

/// The response for `refusal`, without the RateLimit fields (added by the caller, as
/// on every response). `B::from` makes the body from the problem-details JSON.
pub(crate) fn response<B: From<String>>(
    refusal: Refusal,
    verdict: &Verdict,
    policy: &Policy<Parts>,
    statuses: Statuses,
) -> Response<B> {
    let (status, kind, title, detail) = match refusal {
        Refusal::Denied(_) => (
            StatusCode::TOO_MANY_REQUESTS,
            QUOTA_EXCEEDED,
            "Quota Exceeded",
            "",
        ),
        Refusal::Overflow(_) => (
            StatusCode::SERVICE_UNAVAILABLE,
            REDUCED_CAPACITY,
            "Temporary Reduced Capacity",
            "the rate limiter cannot track more clients right now",
        ),
        Refusal::ExceedsCapacity => (
            statuses.exceeds_capacity,
            QUOTA_EXCEEDED,
            "Quota Exceeded",
            "the request costs more than the quota can ever allow; waiting does not help",
        ),
        Refusal::Unavailable => (
            statuses.unavailable,
            REDUCED_CAPACITY,
            "Temporary Reduced Capacity",
            "a shared rate limit could not be checked and its failure policy refuses",
        ),
        Refusal::MissingKey => (
            statuses.missing_key,
            "about:blank",
            statuses.missing_key.canonical_reason().unwrap_or("Refused"),
            "the request has no usable key for the rate limit",
        ),
    };
    // Written without core::fmt, which costs more than the rest of a refusal.
    let mut status_digits = itoa::Buffer::new();
    let mut body = String::with_capacity(256);
    for part in [
        "{\"type\":\"",
        kind,
        "\",\"title\":\"",
        title,
        "\",\"status\":",
        status_digits.format(status.as_u16()),
    ] {
        body.push_str(part);
    }
    if !detail.is_empty() {
        for part in [",\"detail\":\"", detail, "\""] {
            body.push_str(part);
        }
    }
    // Check names are plain ASCII (checked when the policy is built): no escaping.
    body.push_str(",\"violated-policies\":[");
    let names = verdict.refused().filter_map(|i| policy.check_info(i));
    for (n, (name, _)) in names.enumerate() {
        body.push_str(if n == 0 { "\"" } else { ",\"" });
        body.push_str(name);
        body.push('"');
    }
    body.push_str("]}");

    let mut response = Response::new(B::from(body));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/problem+json"),
    );
    if let Refusal::Denied(wait) | Refusal::Overflow(wait) = refusal {
        headers.insert(header::RETRY_AFTER, fields::retry_after(wait));
    }
    response
}
