//! A stream that yields its items no faster than a limiter allows: each item is
//! asked of the limiter under its own key (or `()`, for a direct limiter), and held
//! through denials, never dropped.

use super::random_up_to;
use crate::{Decision, RateLimiter};
use futures_core::Stream;
use pin_project_lite::pin_project;
use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;
use tokio::time::Sleep;

/// How long an item waits before it is asked again when its limiter answers that it
/// can never pass (a cost above capacity, which no quota allows for a cost of 1; so
/// only a limiter of the user's own could) — it is held, never dropped or let
/// through.
const NEVER_RETRY: Duration = Duration::from_secs(1);

/// `stream`, yielding each item once `limiter` allows one unit for it under the key
/// `key` makes of it — governor's `ratelimit_stream`, for keyed and direct limiters
/// (`throttle(items, Arc::new(direct), |_| ())`). A denied item is held, and the
/// stream sleeps for the exact `retry_after` (plus jitter, see
/// [`Throttled::jitter`]) before asking again; items keep their order. Sleeps use
/// tokio's timer, so the stream must be polled inside a tokio runtime with time.
pub fn throttle<S, L, K, F>(stream: S, limiter: Arc<L>, key: F) -> Throttled<S, L, K, F>
where
    S: Stream,
    L: RateLimiter<K>,
    K: std::hash::Hash + Eq + Clone,
    F: FnMut(&S::Item) -> K,
{
    Throttled {
        stream,
        limiter,
        key,
        jitter: Duration::ZERO,
        held: None,
        sleep: None,
        _key: PhantomData,
    }
}

pin_project! {
    /// The stream [`throttle`] makes.
    #[must_use = "streams do nothing unless polled"]
    pub struct Throttled<S: Stream, L, K, F> {
        #[pin]
        stream: S,
        limiter: Arc<L>,
        key: F,
        jitter: Duration,
        // The item the limiter denied, waiting for its turn.
        held: Option<S::Item>,
        #[pin]
        sleep: Option<Sleep>,
        _key: PhantomData<fn() -> K>,
    }
}

impl<S: Stream, L, K, F> Throttled<S, L, K, F> {
    /// Adds a uniformly random delay of up to `jitter` to each sleep, so that streams
    /// denied together do not wake together.
    pub fn jitter(mut self, jitter: Duration) -> Self {
        self.jitter = jitter;
        self
    }
}

/// The stream's jitter and whether it holds a denied item, not the stream, limiter or
/// key function.
impl<S: Stream, L, K, F> fmt::Debug for Throttled<S, L, K, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Throttled")
            .field("jitter", &self.jitter)
            .field("holding", &self.held.is_some())
            .finish_non_exhaustive()
    }
}

impl<S, L, K, F> Stream for Throttled<S, L, K, F>
where
    S: Stream,
    L: RateLimiter<K>,
    K: std::hash::Hash + Eq + Clone,
    F: FnMut(&S::Item) -> K,
{
    type Item = S::Item;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<S::Item>> {
        let mut this = self.project();
        loop {
            if let Some(sleep) = this.sleep.as_mut().as_pin_mut() {
                ready!(sleep.poll(cx));
                this.sleep.set(None);
            }
            let item = match this.held.take() {
                Some(item) => item,
                None => match ready!(this.stream.as_mut().poll_next(cx)) {
                    Some(item) => item,
                    None => return Poll::Ready(None),
                },
            };
            let key = (this.key)(&item);
            let wait = match this.limiter.acquire(&key, 1) {
                Decision::Allowed { .. } => return Poll::Ready(Some(item)),
                Decision::Denied { retry_after, .. } => retry_after,
                Decision::Overflow { retry_hint } => retry_hint,
                Decision::ExceedsCapacity { .. } => NEVER_RETRY,
            };
            *this.held = Some(item);
            let pause = wait.saturating_add(random_up_to(*this.jitter));
            this.sleep.set(Some(tokio::time::sleep(pause)));
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let held = usize::from(self.held.is_some());
        let (low, high) = self.stream.size_hint();
        (
            low.saturating_add(held),
            high.and_then(|h| h.checked_add(held)),
        )
    }
}
