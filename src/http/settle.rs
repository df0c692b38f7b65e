//! Settling a request's checks from its response: the actual cost read off the
//! response head ([`RateLimitLayerBuilder::settle_from`](super::RateLimitLayerBuilder::settle_from)).

use super::routes::Routes;
use crate::policy::Verdict;
use http::request::Parts;
use http::{HeaderName, Response, response};
use std::future::Future;

/// The cost a response reports in the header `name` (say, `x-tokens-used`), for
/// [`RateLimitLayerBuilder::settle_from`](super::RateLimitLayerBuilder::settle_from):
///
/// - one field line of ASCII digits (leading zeros allowed): that number;
/// - a number past `u32::MAX`: `u32::MAX` — more than any key may owe, so the key is
///   charged up to its debt cap and the rest is reported as
///   [`Settlement::forgiven`](crate::Settlement::forgiven), never a smaller number
///   that would undercharge;
/// - absent, repeated (two field lines: which one counts is unknowable), empty, or
///   anything but digits (a sign, a fraction, spaces inside, a list): `None`, and the
///   request stays at its estimate.
///
/// Never panics, whatever the header holds.
///
/// ```
/// use http::{HeaderName, Response};
/// use turnstile::http::cost_in_header;
///
/// let used = HeaderName::from_static("x-tokens-used");
/// let cost = |value: &str| {
///     let (head, ()) = Response::builder().header(&used, value).body(()).unwrap().into_parts();
///     cost_in_header(&head, &used)
/// };
/// assert_eq!(cost("500"), Some(500));
/// assert_eq!(cost("99999999999"), Some(u32::MAX));
/// assert_eq!(cost("-5"), None);
/// assert_eq!(cost("5 tokens"), None);
/// ```
pub fn cost_in_header(response: &response::Parts, name: &HeaderName) -> Option<u32> {
    let mut values = response.headers.get_all(name).iter();
    let (Some(value), None) = (values.next(), values.next()) else {
        return None;
    };
    parse_cost(value.as_bytes())
}

/// `digits` as a number, saturating at `u32::MAX`; `None` unless it is one or more
/// ASCII digits and nothing else.
fn parse_cost(digits: &[u8]) -> Option<u32> {
    if digits.is_empty() {
        return None;
    }
    digits.iter().try_fold(0u32, |number, &byte| {
        let digit = char::from(byte).to_digit(10)?;
        Some(number.saturating_mul(10).saturating_add(digit))
    })
}

/// A copy of the request head to settle from, for a request on route `index` whose
/// policy has settled checks, in a layer that reads actual costs; `None` otherwise
/// (the head is copied only where it will be read).
pub(crate) fn settling(routes: &Routes, index: usize, head: &Parts) -> Option<Parts> {
    let settles = routes.actual_cost.is_some() && routes.route(index).policy.settles();
    settles.then(|| head.clone())
}

/// The response to a request that went ahead on route `index` with `verdict`: the
/// inner service's, with the RateLimit fields added, and — for a request with a head
/// kept to settle from ([`settling`]) — its checks settled at the cost the response
/// head reports, before the response is returned (so the client's next request sees
/// it). What the settlement did is left in the response's extensions
/// ([`Settlement`](crate::Settlement)) for a layer outside to read.
pub(crate) async fn respond<B, E>(
    routes: &Routes,
    index: usize,
    head: Option<Parts>,
    verdict: Verdict,
    response: impl Future<Output = Result<Response<B>, E>>,
) -> Result<Response<B>, E> {
    let route = routes.route(index);
    let mut response = response.await?;
    route.fields(&verdict).add_to(response.headers_mut());
    let (Some(head), Some(actual_cost)) = (head, &routes.actual_cost) else {
        return Ok(response);
    };
    let (mut parts, body) = response.into_parts();
    if let Some(actual) = actual_cost(&parts) {
        // A shared check's settlement that does not reach its store is lost: the
        // response then carries no `Settlement`, the one place the layer reports it.
        if let Ok(settlement) = route.policy.settle_async(&head, &verdict, actual).await {
            parts.extensions.insert(settlement);
        }
    }
    Ok(Response::from_parts(parts, body))
}

#[cfg(all(test, not(turnstile_loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_cost_is_digits_and_nothing_else_saturating_past_u32_max() {
        assert_eq!(parse_cost(b"0"), Some(0));
        assert_eq!(parse_cost(b"00500"), Some(500));
        assert_eq!(parse_cost(b"4294967295"), Some(u32::MAX));
        assert_eq!(parse_cost(b"4294967296"), Some(u32::MAX));
        assert_eq!(parse_cost(&[b'9'; 10_000]), Some(u32::MAX));
        for bad in [
            &b""[..],
            b"+5",
            b"-5",
            b"5.0",
            b"5 ",
            b" 5",
            b"5,6",
            b"0x10",
            b"\xff",
        ] {
            assert_eq!(parse_cost(bad), None, "{bad:?}");
        }
    }
}
