//! The layer, its builder, and the state every clone of the service shares.

use super::fields;
use super::refusal::Statuses;
use super::service::RateLimit;
use crate::policy::{Policy, Verdict};
use crate::wait::Wait;
use http::request::Parts;
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use std::fmt;
use std::sync::Arc;
use tower::Layer;

/// A tower layer that limits requests by per-route [`Policy`]s; see
/// [`turnstile::http`](super) for what it answers.
///
/// Clones share one state (an `Arc`): the same limiters, whichever clone of the
/// service a connection gets.
#[derive(Clone)]
pub struct RateLimitLayer {
    shared: Arc<Shared>,
}

impl RateLimitLayer {
    /// A builder whose requests matching no route are limited by `fallback` (use
    /// [`Policy::unlimited`] to let them through untouched).
    pub fn builder(fallback: Policy<Parts>) -> RateLimitLayerBuilder {
        RateLimitLayerBuilder {
            routes: Vec::new(),
            fallback,
            statuses: Statuses {
                missing_key: StatusCode::BAD_REQUEST,
                exceeds_capacity: StatusCode::TOO_MANY_REQUESTS,
            },
            delay: None,
        }
    }
}

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimit<S>;

    fn layer(&self, inner: S) -> RateLimit<S> {
        RateLimit::new(inner, Arc::clone(&self.shared))
    }
}

impl fmt::Debug for RateLimitLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitLayer")
            .field("routes", &(self.shared.routes.len() - 1))
            .field("delay", &self.shared.delay)
            .finish_non_exhaustive()
    }
}

/// Builds a [`RateLimitLayer`]; see [`RateLimitLayer::builder`].
pub struct RateLimitLayerBuilder {
    routes: Vec<(Matcher, Policy<Parts>)>,
    fallback: Policy<Parts>,
    statuses: Statuses,
    delay: Option<Wait>,
}

/// Which requests a route's policy applies to.
enum Matcher {
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

impl RateLimitLayerBuilder {
    /// Requests whose path is `prefix` or lies below it (on whole segments: `/balance`
    /// covers `/balance/eur`, not `/balances`) are limited by `policy`. Routes are
    /// tried in the order added; the first that matches applies.
    pub fn prefix(mut self, prefix: impl Into<String>, policy: Policy<Parts>) -> Self {
        self.routes.push((Matcher::Prefix(prefix.into()), policy));
        self
    }

    /// Requests for which `matches` is true (method, host, path, headers — anything
    /// in the request head) are limited by `policy`. Routes are tried in the order
    /// added; the first that matches applies.
    pub fn route(
        mut self,
        matches: impl Fn(&Parts) -> bool + Send + Sync + 'static,
        policy: Policy<Parts>,
    ) -> Self {
        self.routes
            .push((Matcher::Predicate(Box::new(matches)), policy));
        self
    }

    /// The status for a request refused for lack of a key (default 400 Bad Request).
    pub fn missing_key_status(mut self, status: StatusCode) -> Self {
        self.statuses.missing_key = status;
        self
    }

    /// The status for a request whose cost its key's quota can never allow (default
    /// 429 Too Many Requests, without `Retry-After`).
    pub fn exceeds_capacity_status(mut self, status: StatusCode) -> Self {
        self.statuses.exceeds_capacity = status;
        self
    }

    /// Delay mode: a denied request waits, as [`Policy::until_ready`] does, if it can
    /// pass within `wait`, and is refused at once otherwise (like nginx's `burst` with
    /// `delay`); a `max_keys` overflow waits for its hint the same way. Waiting
    /// requests hold their connections; bound how many with a concurrency limit in
    /// front if that matters.
    pub fn delay(mut self, wait: Wait) -> Self {
        self.delay = Some(wait);
        self
    }

    /// The layer.
    ///
    /// # Errors
    /// A prefix that does not start with `/`; a refusal status that is not a client
    /// or server error (4xx or 5xx).
    pub fn build(self) -> Result<RateLimitLayer, ConfigError> {
        for (matcher, _) in &self.routes {
            if let Matcher::Prefix(prefix) = matcher
                && !prefix.starts_with('/')
            {
                return Err(ConfigError::Prefix(prefix.clone()));
            }
        }
        for status in [self.statuses.missing_key, self.statuses.exceeds_capacity] {
            if !(status.is_client_error() || status.is_server_error()) {
                return Err(ConfigError::Status(status));
            }
        }
        let fallback = (Matcher::Predicate(Box::new(|_| true)), self.fallback);
        let routes = self
            .routes
            .into_iter()
            .chain([fallback])
            .map(|(matcher, policy)| Route::new(matcher, policy))
            .collect();
        Ok(RateLimitLayer {
            shared: Arc::new(Shared {
                routes,
                statuses: self.statuses,
                delay: self.delay,
            }),
        })
    }
}

/// Why a layer was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConfigError {
    /// A route prefix that does not start with `/`, so no path could match it.
    Prefix(String),
    /// A status for refused requests that is not an error status.
    Status(StatusCode),
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::Prefix(prefix) => {
                write!(f, "route prefix {prefix:?} must start with '/'")
            }
            ConfigError::Status(status) => write!(
                f,
                "status {status} for refused requests must be a 4xx or 5xx error"
            ),
        }
    }
}

impl std::error::Error for ConfigError {}

/// What every clone of the service shares.
pub(crate) struct Shared {
    /// The routes in order; the last is the fallback and matches everything.
    routes: Box<[Route]>,
    pub(crate) statuses: Statuses,
    pub(crate) delay: Option<Wait>,
}

impl Shared {
    /// The position of the first route matching `request`.
    pub(crate) fn route_of(&self, request: &Parts) -> usize {
        let last = self.routes.len() - 1;
        self.routes[..last]
            .iter()
            .position(|route| route.matcher.matches(request))
            .unwrap_or(last)
    }

    /// The route at `index`, from [`Shared::route_of`].
    pub(crate) fn route(&self, index: usize) -> &Route {
        &self.routes[index.min(self.routes.len() - 1)]
    }
}

/// A route: which requests, their policy, and its `RateLimit-Policy` field.
pub(crate) struct Route {
    matcher: Matcher,
    pub(crate) policy: Policy<Parts>,
    policy_field: Option<HeaderValue>,
}

impl Route {
    fn new(matcher: Matcher, policy: Policy<Parts>) -> Self {
        let policy_field = fields::policy_field(&policy);
        Self {
            matcher,
            policy,
            policy_field,
        }
    }

    /// The RateLimit header fields for `verdict`.
    pub(crate) fn fields(&self, verdict: &Verdict) -> RateLimitFields {
        RateLimitFields {
            policy: self.policy_field.clone(),
            limit: verdict
                .binding()
                .and_then(|binding| fields::limit_field(&self.policy, binding)),
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

/// The `RateLimit-Policy` field name.
pub const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
/// The `RateLimit` field name.
pub const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");

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

    #[test]
    fn a_prefix_without_a_slash_and_a_non_error_status_are_refused() {
        let prefix = RateLimitLayer::builder(Policy::unlimited())
            .prefix("balance", Policy::unlimited())
            .build();
        assert_eq!(prefix.unwrap_err(), ConfigError::Prefix("balance".into()));
        let status = RateLimitLayer::builder(Policy::unlimited())
            .missing_key_status(StatusCode::OK)
            .build();
        assert_eq!(status.unwrap_err(), ConfigError::Status(StatusCode::OK));
    }
}
