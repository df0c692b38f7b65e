//! The layer and its builder.

use super::refusal::Statuses;
use super::routes::{ActualCost, Matcher, Route, Routes};
use super::service::RateLimitService;
use super::table::Table;
use crate::policy::Policy;
use crate::wait::Wait;
use http::StatusCode;
use http::request::Parts;
use std::fmt;
use std::sync::Arc;
use tower::Layer;

/// A tower layer that limits requests by per-route [`Policy`]s; see
/// [`turnstile::http`](super) for what it answers.
///
/// Clones share one state (an `Arc`): the same limiters, whichever clone of the
/// service a connection gets. A layer from [`crate::config`] reads its routes from a
/// table a reload swaps.
#[derive(Clone)]
pub struct RateLimitLayer {
    pub(crate) table: Table,
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
                unavailable: StatusCode::SERVICE_UNAVAILABLE,
            },
            delay: None,
            dry_run: false,
            actual_cost: None,
        }
    }
}

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimitService<S>;

    fn layer(&self, inner: S) -> RateLimitService<S> {
        RateLimitService::new(inner, self.table.clone())
    }
}

impl fmt::Debug for RateLimitLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let routes = self.table.load();
        f.debug_struct("RateLimitLayer")
            .field("routes", &(routes.routes.len() - 1))
            .field("delay", &routes.delay)
            .finish_non_exhaustive()
    }
}

/// Builds a [`RateLimitLayer`]; see [`RateLimitLayer::builder`].
pub struct RateLimitLayerBuilder {
    routes: Vec<(Matcher, Policy<Parts>)>,
    fallback: Policy<Parts>,
    statuses: Statuses,
    delay: Option<Wait>,
    dry_run: bool,
    actual_cost: Option<ActualCost>,
}

impl fmt::Debug for RateLimitLayerBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitLayerBuilder")
            .field("routes", &self.routes.len())
            .field("delay", &self.delay)
            .field("dry_run", &self.dry_run)
            .field("settles", &self.actual_cost.is_some())
            .finish_non_exhaustive()
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

    /// The status for a request refused by a shared check's failure policy: its
    /// store gave no decision and the policy is to deny ([`Outcome::Unavailable`](crate::policy::Outcome::Unavailable);
    /// default 503 Service Unavailable, without `Retry-After` or a `RateLimit` field:
    /// nobody knows when the store answers again, nor what its key has left).
    pub fn unavailable_status(mut self, status: StatusCode) -> Self {
        self.statuses.unavailable = status;
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

    /// Dry run (shadow mode) for every route: each policy is asked and counted, its
    /// takes and refunds happen as if it were enforced, and the RateLimit fields are
    /// sent, but no request is refused or delayed — the inner service answers every
    /// one. What would have been refused shows in the policies' metrics and debug
    /// events, and in [`Verdict::refused_in_dry_run`](crate::policy::Verdict). See
    /// [dry run](crate::policy#dry-run).
    pub fn dry_run(mut self) -> Self {
        self.dry_run = true;
        self
    }

    /// Settles each request's [settled](crate::policy::Check::settled) checks at the
    /// cost its response reports: `actual` reads it off the response head (a header,
    /// [`cost_in_header`](super::cost_in_header); the status; an extension the
    /// handler set), or answers `None` to leave the request at its estimate. Read as
    /// soon as the head arrives, before the response is returned; routes whose
    /// policies settle nothing never call it. See
    /// [charging from the response](super#charging-from-the-response).
    pub fn settle_from(
        mut self,
        actual: impl Fn(&http::response::Parts) -> Option<u32> + Send + Sync + 'static,
    ) -> Self {
        self.actual_cost = Some(Box::new(actual));
        self
    }

    /// The layer.
    ///
    /// # Errors
    /// A prefix that does not start with `/`; a refusal status that is not a client
    /// or server error (4xx or 5xx).
    pub fn build(self) -> Result<RateLimitLayer, LayerConfigError> {
        for (matcher, _) in &self.routes {
            if let Matcher::Prefix(prefix) = matcher
                && !prefix.starts_with('/')
            {
                return Err(LayerConfigError::Prefix(prefix.clone()));
            }
        }
        let statuses = &self.statuses;
        for status in [
            statuses.missing_key,
            statuses.exceeds_capacity,
            statuses.unavailable,
        ] {
            if !(status.is_client_error() || status.is_server_error()) {
                return Err(LayerConfigError::Status(status));
            }
        }
        let fallback = (Matcher::Predicate(Box::new(|_| true)), self.fallback);
        let dry_run = self.dry_run;
        let routes = self
            .routes
            .into_iter()
            .chain([fallback])
            .map(|(matcher, mut policy)| {
                if dry_run {
                    policy.set_dry_run();
                }
                Route::new(matcher, policy, dry_run)
            })
            .collect();
        Ok(RateLimitLayer {
            table: Table::Fixed(Arc::new(Routes {
                routes,
                statuses: self.statuses,
                delay: self.delay,
                actual_cost: self.actual_cost,
            })),
        })
    }
}

/// Why a layer was refused. More reasons may come with more settings, hence
/// `#[non_exhaustive]`.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LayerConfigError {
    /// A route prefix that does not start with `/`, so no path could match it.
    Prefix(String),
    /// A status for refused requests that is not an error status.
    Status(StatusCode),
}

impl fmt::Display for LayerConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LayerConfigError::Prefix(prefix) => {
                write!(f, "route prefix {prefix:?} must start with '/'")
            }
            LayerConfigError::Status(status) => write!(
                f,
                "status {status} for refused requests must be a 4xx or 5xx error"
            ),
        }
    }
}

impl std::error::Error for LayerConfigError {}

#[cfg(all(test, not(turnstile_loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_prefix_without_a_slash_and_a_non_error_status_are_refused() {
        let prefix = RateLimitLayer::builder(Policy::unlimited())
            .prefix("balance", Policy::unlimited())
            .build();
        assert_eq!(
            prefix.unwrap_err(),
            LayerConfigError::Prefix("balance".into())
        );
        let status = RateLimitLayer::builder(Policy::unlimited())
            .missing_key_status(StatusCode::OK)
            .build();
        assert_eq!(
            status.unwrap_err(),
            LayerConfigError::Status(StatusCode::OK)
        );
    }
}
