//! The service the layer wraps around an HTTP service, and its response future.

use super::refusal::{self, Refusal};
use super::routes::{RateLimitFields, Routes};
use super::settle;
use super::table::Table;
use crate::policy::{Policy, Verdict};
use crate::wait::{Attempt, Wait, keep_trying};
use http::request::Parts;
use http::{Request, Response};
use pin_project_lite::pin_project;
use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use tokio::time::Instant;
use tower::Service;

/// An HTTP service behind per-route rate limits: made by
/// [`RateLimitLayer`](super::RateLimitLayer), whose documentation says what it
/// answers.
pub struct RateLimitService<S> {
    inner: S,
    routes: Table,
}

/// The inner service and the number of routes (the fallback not counted), as
/// [`RateLimitLayer`](super::RateLimitLayer)'s `Debug`.
impl<S: std::fmt::Debug> std::fmt::Debug for RateLimitService<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimitService")
            .field("inner", &self.inner)
            .field("routes", &(self.routes.load().routes.len() - 1))
            .finish_non_exhaustive()
    }
}

impl<S> RateLimitService<S> {
    pub(crate) fn new(inner: S, routes: Table) -> Self {
        Self { inner, routes }
    }
}

impl<S: Clone> Clone for RateLimitService<S> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            routes: self.routes.clone(),
        }
    }
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for RateLimitService<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: 'static,
    ReqBody: Send + 'static,
    ResBody: From<String> + Send + 'static,
{
    type Response = Response<ResBody>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future, ResBody, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        // The head alone is what policies read: it does not depend on the body type.
        let (mut parts, body) = request.into_parts();
        // One load: this request runs under these routes to its end, whatever a
        // reload swaps in meanwhile.
        let routes = self.routes.load();
        let index = routes.route_of(&parts);
        let route = routes.route(index);
        let Some(verdict) = route.policy.acquire_now(&parts) else {
            // A shared check needs its store: the request waits for it in a future of
            // its own, taking the service made ready (a clone stays behind).
            let clone = self.inner.clone();
            let inner = std::mem::replace(&mut self.inner, clone);
            let future = shared(Arc::clone(&routes), index, parts, body, inner);
            return ResponseFuture {
                state: State::Delayed {
                    future: Box::pin(future),
                },
            };
        };
        let state = match (Refusal::of(verdict.outcome()), routes.delay) {
            (None, _) => {
                hand_over(&route.policy, &mut parts, verdict);
                match settle::settling(&routes, index, &parts) {
                    None => State::Forwarded {
                        fields: Some(route.fields(&verdict)),
                        future: self.inner.call(Request::from_parts(parts, body)),
                    },
                    // Settled from the response: its head is read in a future of its own.
                    Some(head) => {
                        let future = self.inner.call(Request::from_parts(parts, body));
                        let routes = Arc::clone(&routes);
                        State::Delayed {
                            future: Box::pin(async move {
                                settle::respond(&routes, index, Some(head), verdict, future).await
                            }),
                        }
                    }
                }
            }
            (Some(Refusal::Denied(_) | Refusal::Overflow(_)), Some(wait)) => State::Delayed {
                future: Box::pin(delayed(
                    Arc::clone(&routes),
                    index,
                    Request::from_parts(parts, body),
                    // A clone, made ready again after the wait: readiness is not held
                    // while sleeping.
                    self.inner.clone(),
                    verdict,
                    wait,
                )),
            },
            (Some(refusal), _) => State::Refused {
                response: Some(refuse(&routes, index, refusal, &verdict)),
            },
        };
        ResponseFuture { state }
    }
}

/// Puts `verdict` in the extensions of a request that goes ahead, when its policy
/// has dry-run checks: the inner service can see what the dry run would have refused.
/// (Not for every request: an extension is an allocation.)
fn hand_over(policy: &Policy<Parts>, parts: &mut Parts, verdict: Verdict) {
    if policy.has_dry_run_checks() {
        parts.extensions.insert(verdict);
    }
}

/// The refusal response for `verdict` on route `index`, with its RateLimit fields.
fn refuse<B: From<String>>(
    routes: &Routes,
    index: usize,
    refusal: Refusal,
    verdict: &Verdict,
) -> Response<B> {
    let route = routes.route(index);
    let mut response = refusal::response(refusal, verdict, &route.policy, routes.statuses);
    route.fields(verdict).add_to(response.headers_mut());
    response
}

/// A request whose policy awaits a shared check: asks it, then forwards, delays or
/// refuses the request as [`RateLimitService::call`] does with an answer at hand. `inner` is
/// ready.
async fn shared<S, ReqBody, ResBody>(
    routes: Arc<Routes>,
    index: usize,
    mut parts: Parts,
    body: ReqBody,
    mut inner: S,
) -> Result<Response<ResBody>, S::Error>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    ResBody: From<String>,
{
    let route = routes.route(index);
    let verdict = route.policy.acquire_async(&parts).await;
    match (Refusal::of(verdict.outcome()), routes.delay) {
        (None, _) => {
            hand_over(&route.policy, &mut parts, verdict);
            let head = settle::settling(&routes, index, &parts);
            let response = inner.call(Request::from_parts(parts, body));
            settle::respond(&routes, index, head, verdict, response).await
        }
        (Some(Refusal::Denied(_) | Refusal::Overflow(_)), Some(wait)) => {
            let request = Request::from_parts(parts, body);
            delayed(Arc::clone(&routes), index, request, inner, verdict, wait).await
        }
        (Some(refusal), _) => Ok(refuse(&routes, index, refusal, &verdict)),
    }
}

/// Delay mode: waits while the policy's answer is a wait that fits `wait`, then
/// forwards the request, or refuses it.
async fn delayed<S, ReqBody, ResBody>(
    routes: Arc<Routes>,
    index: usize,
    request: Request<ReqBody>,
    mut inner: S,
    first: Verdict,
    wait: Wait,
) -> Result<Response<ResBody>, S::Error>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    ResBody: From<String>,
{
    let started = Instant::now();
    let (parts, body) = request.into_parts();
    let route = routes.route(index);
    let again = || async { Attempt::of_verdict(route.policy.acquire_async(&parts).await) };
    let (Ok(verdict) | Err(verdict)) =
        keep_trying(&wait, started, Attempt::of_verdict(first), again).await;
    match Refusal::of(verdict.outcome()) {
        Some(refusal) => Ok(refuse(&routes, index, refusal, &verdict)),
        None => {
            poll_fn(|cx| inner.poll_ready(cx)).await?;
            let mut parts = parts;
            hand_over(&route.policy, &mut parts, verdict);
            let head = settle::settling(&routes, index, &parts);
            let response = inner.call(Request::from_parts(parts, body));
            settle::respond(&routes, index, head, verdict, response).await
        }
    }
}

type Delayed<B, E> = Pin<Box<dyn Future<Output = Result<Response<B>, E>> + Send>>;

pin_project! {
    /// The response future of [`RateLimitService`]: the inner service's response with the
    /// RateLimit fields added, a refusal, or (in delay mode) either after a wait.
    pub struct ResponseFuture<F, B, E> {
        #[pin]
        state: State<F, B, E>,
    }
}

impl<F, B, E> std::fmt::Debug for ResponseFuture<F, B, E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}

pin_project! {
    #[project = StateProj]
    enum State<F, B, E> {
        Forwarded {
            #[pin]
            future: F,
            fields: Option<RateLimitFields>,
        },
        Refused {
            response: Option<Response<B>>,
        },
        Delayed {
            future: Delayed<B, E>,
        },
    }
}

impl<F, B, E> Future for ResponseFuture<F, B, E>
where
    F: Future<Output = Result<Response<B>, E>>,
{
    type Output = Result<Response<B>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().state.project() {
            StateProj::Forwarded { future, fields } => {
                let mut response = ready!(future.poll(cx))?;
                if let Some(fields) = fields.take() {
                    fields.add_to(response.headers_mut());
                }
                Poll::Ready(Ok(response))
            }
            // Polled again after completion (a caller's bug), it stays pending rather
            // than panic.
            StateProj::Refused { response } => match response.take() {
                Some(response) => Poll::Ready(Ok(response)),
                None => Poll::Pending,
            },
            StateProj::Delayed { future } => future.as_mut().poll(cx),
        }
    }
}
