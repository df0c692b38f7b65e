//! A layer's routes: which requests each policy applies to, and the header fields
//! each route reports. Shared by every clone of the service.

use super::fields::{self, RATELIMIT, RATELIMIT_POLICY};
use super::refusal::Statuses;
use crate::policy::{Policy, Verdict};
use crate::wait::Wait;
use http::request::Parts;
use http::{HeaderMap, HeaderValue};

/// Which requests a route's policy applies to.
pub(crate) enum Matcher {
    /// A path prefix, matched on whole segments.
    Prefix(String),
    /// A predicate over the request.
    Predicate(Box<dyn Fn(&Parts) -> bool + Send + Sync>),
}

impl Matcher {
    fn matches(&self, request: &Parts) -> bool {
        match self {
            Matcher::Prefix(prefix) => path_has_prefix(request.uri.path(), prefix),
            Matcher::Predicate(matches) => matches(request),
        }
    }
}

/// Whether `path` is `prefix` or lies below it: `/balance` covers `/balance` and
/// `/balance/eur`, not `/balances`.
fn path_has_prefix(path: &str, prefix: &str) -> bool {
    match path.strip_prefix(prefix) {
        Some(rest) => rest.is_empty() || prefix.ends_with('/') || rest.starts_with('/'),
        None => false,
    }
}

/// A layer's routes and settings, shared by every clone of its service.
pub(crate) struct Routes {
    /// The routes in order; the last is the fallback and matches everything.
    pub(crate) routes: Box<[Route]>,
    pub(crate) statuses: Statuses,
    pub(crate) delay: Option<Wait>,
    /// The actual cost a response reports, for the routes whose policies settle.
    pub(crate) actual_cost: Option<ActualCost>,
}

/// What a response reports it cost, read off its head: `None` when it reports
/// nothing (the request then stays at its estimate). See `settle.rs`.
pub(crate) type ActualCost = Box<dyn Fn(&http::response::Parts) -> Option<u32> + Send + Sync>;

impl Routes {
    /// The position of the first route matching `request`.
    pub(crate) fn route_of(&self, request: &Parts) -> usize {
        let last = self.routes.len() - 1;
        self.routes[..last]
            .iter()
            .position(|route| route.matcher.matches(request))
            .unwrap_or(last)
    }

    /// The route at `index`, from [`Routes::route_of`].
    pub(crate) fn route(&self, index: usize) -> &Route {
        &self.routes[index.min(self.routes.len() - 1)]
    }
}

/// A route: which requests, their policy, and its `RateLimit-Policy` field.
pub(crate) struct Route {
    matcher: Matcher,
    pub(crate) policy: Policy<Parts>,
    policy_field: Option<HeaderValue>,
    /// The whole layer is in dry run.
    dry_run: bool,
}

impl Route {
    pub(crate) fn new(matcher: Matcher, policy: Policy<Parts>, dry_run: bool) -> Self {
        let policy_field = fields::policy_field(&policy, dry_run);
        Self {
            matcher,
            policy,
            policy_field,
            dry_run,
        }
    }

    /// The RateLimit header fields for `verdict`. They report the enforced checks:
    /// a check on trial (dry run) in an enforced policy stays invisible to clients,
    /// who would otherwise throttle themselves on a limit that is not enforced — and
    /// a refusal's `Retry-After` matches them. A layer in dry run reports what its
    /// checks would report enforced (every check of it is on trial; that is what an
    /// operator trying the layer wants to see).
    pub(crate) fn fields(&self, verdict: &Verdict) -> RateLimitFields {
        let shown = if self.dry_run {
            verdict.if_enforced()
        } else {
            *verdict
        };
        // A check its failure policy answered knows nothing of its key, which may be
        // the most restrictive: no `RateLimit` field rather than one that may
        // overstate what is left.
        let binding = if shown.has_fallbacks() {
            None
        } else if self.dry_run {
            shown.binding().or(verdict.binding())
        } else {
            shown.binding()
        };
        RateLimitFields {
            policy: self.policy_field.clone(),
            limit: binding.and_then(|binding| fields::limit_field(&self.policy, binding)),
        }
    }
}

/// The `RateLimit-Policy` and `RateLimit` fields for one response.
pub(crate) struct RateLimitFields {
    policy: Option<HeaderValue>,
    limit: Option<HeaderValue>,
}

impl RateLimitFields {
    /// Adds the fields to `headers`. Appended, not replaced: both fields are lists,
    /// which the draft allows to be split over several field lines, so an inner
    /// service's own RateLimit fields stay.
    pub(crate) fn add_to(self, headers: &mut HeaderMap) {
        if let Some(policy) = self.policy {
            headers.append(RATELIMIT_POLICY, policy);
        }
        if let Some(limit) = self.limit {
            headers.append(RATELIMIT, limit);
        }
    }
}

#[cfg(all(test, not(turnstile_loom)))]
mod tests {
    use super::*;

    #[test]
    fn prefixes_match_whole_path_segments() {
        assert!(path_has_prefix("/balance", "/balance"));
        assert!(path_has_prefix("/balance/eur", "/balance"));
        assert!(!path_has_prefix("/balances", "/balance"));
        assert!(path_has_prefix("/api/x", "/api/"));
        assert!(path_has_prefix("/anything", "/"));
        assert!(!path_has_prefix("/", "/balance"));
    }
}
