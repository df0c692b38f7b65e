//! `wait::throttle`: a stream held to a limiter's pace, in tokio's paused time with
//! the limiter reading that same simulated clock — every assertion is about simulated
//! time, none about the wall clock.

use futures_core::Stream;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::Instant;
use turnstile::wait::throttle;
use turnstile::{Clock, DirectTokenBucket, Quota, TokenBucket};

/// tokio's clock as a limiter clock: under `start_paused`, the stream's sleeps and the
/// limiter's readings share one simulated time.
#[derive(Clone)]
struct TokioClock(Instant);

impl Clock for TokioClock {
    fn now(&self) -> u64 {
        self.0.elapsed().as_nanos() as u64
    }
}

/// A stream of the items of a vector.
struct Items<T>(std::vec::IntoIter<T>);

impl<T: Unpin> Stream for Items<T> {
    type Item = T;
    fn poll_next(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<T>> {
        Poll::Ready(self.0.next())
    }
}

/// Every item of `stream` with the simulated milliseconds at which it came out.
async fn drain<S: Stream>(stream: S) -> Vec<(S::Item, u128)> {
    let start = Instant::now();
    let mut stream = pin!(stream);
    let mut out = Vec::new();
    while let Some(item) = std::future::poll_fn(|cx| stream.as_mut().poll_next(cx)).await {
        out.push((item, start.elapsed().as_millis()));
    }
    out
}

const INTERVAL: Duration = Duration::from_millis(100);

#[tokio::test(start_paused = true)]
async fn a_direct_limiter_paces_every_item_in_order() {
    let clock = TokioClock(Instant::now());
    let limiter =
        Arc::new(DirectTokenBucket::with_clock(Quota::new(2, INTERVAL).unwrap(), clock).unwrap());
    let out = drain(throttle(
        Items((1..=6).collect::<Vec<u32>>().into_iter()),
        limiter,
        |_| (),
    ))
    .await;
    // A burst of two, then one every interval; none lost, none reordered.
    assert_eq!(
        out,
        [(1, 0), (2, 0), (3, 100), (4, 200), (5, 300), (6, 400)]
    );
}

#[tokio::test(start_paused = true)]
async fn a_keyed_limiter_paces_each_key_and_keeps_the_order() {
    let clock = TokioClock(Instant::now());
    let limiter = Arc::new(
        TokenBucket::<&str, _>::with_clock(Quota::new(1, INTERVAL).unwrap(), clock).unwrap(),
    );
    let items = vec![
        ("alice", 1),
        ("alice", 2),
        ("bob", 3),
        ("bob", 4),
        ("carol", 5),
    ];
    let out = drain(throttle(Items(items.into_iter()), limiter, |(user, _)| {
        *user
    }))
    .await;
    // alice's second waits an interval; bob's first, behind it, passes at once then;
    // bob's second waits its own interval; carol's passes at once after it.
    let times: Vec<(i32, u128)> = out.into_iter().map(|((_, n), at)| (n, at)).collect();
    assert_eq!(times, [(1, 0), (2, 100), (3, 100), (4, 200), (5, 200)]);
}

#[tokio::test(start_paused = true)]
async fn jitter_only_delays() {
    let clock = TokioClock(Instant::now());
    let limiter =
        Arc::new(DirectTokenBucket::with_clock(Quota::new(1, INTERVAL).unwrap(), clock).unwrap());
    let jitter = Duration::from_millis(30);
    let stream = throttle(
        Items((1..=20).collect::<Vec<u32>>().into_iter()),
        limiter,
        |_| (),
    )
    .jitter(jitter);
    let out = drain(stream).await;
    assert_eq!(out.len(), 20);
    // Tokens come at the grid points (every 100 ms from the epoch): item k comes at
    // its point, never sooner, and at most the jitter later.
    for (k, &(item, at)) in out.iter().enumerate() {
        assert_eq!(item, k as u32 + 1, "in order");
        let point = 100 * k as u128;
        assert!((point..=point + 30).contains(&at), "item {item} at {at} ms");
    }
    // The jitter was used: not every item came at its point exactly.
    assert!(
        out.iter()
            .enumerate()
            .any(|(k, &(_, at))| at > 100 * k as u128)
    );
}
