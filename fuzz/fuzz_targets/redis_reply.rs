//! The Redis limiters on a connection that answers anything: arbitrary replies (any
//! RESP shape, numbers out of every range, errors, silence until the timeout), as a
//! hostile or foreign server, or foreign data in the limiters' keys, would give.
//!
//! Checked, for the token bucket, the fixed window and the leased token bucket, each
//! fail-open or fail-closed:
//! - never a panic;
//! - a reply the scripts never give is never a decision: the failure policy answers
//!   (`Outcome::Fallback`, allowed exactly when the policy is open);
//! - every decision is consistent with the limit (`remaining` at most the capacity,
//!   a denial's wait positive, a cost over the capacity refused as such), and so is
//!   every count a peek reads.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use redis::aio::ConnectionLike;
use redis::{Cmd, Pipeline, RedisFuture, Value};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use turnstile::redis::{
    FailurePolicy, Outcome, RedisFixedWindow, RedisLeasedTokenBucket, RedisTokenBucket,
};
use turnstile::{Decision, Quota};
use turnstile_fuzz::runtime;

/// A RESP value, nested at most a few levels.
#[derive(Arbitrary, Debug, Clone)]
enum Resp {
    Nil,
    Int(i64),
    SmallInt(i8),
    Bulk(Vec<u8>),
    Simple(String),
    Okay,
    Double(f64),
    Boolean(bool),
    Array(Vec<Resp>),
    Set(Vec<Resp>),
    Map(Vec<(Resp, Resp)>),
}

impl Resp {
    fn value(&self, depth: u8) -> Value {
        let nested = |items: &[Resp]| {
            if depth == 0 {
                Vec::new()
            } else {
                items.iter().take(8).map(|r| r.value(depth - 1)).collect()
            }
        };
        match self {
            Resp::Nil => Value::Nil,
            Resp::Int(n) => Value::Int(*n),
            Resp::SmallInt(n) => Value::Int(i64::from(*n)),
            Resp::Bulk(bytes) => Value::BulkString(bytes.clone()),
            Resp::Simple(s) => Value::SimpleString(s.clone()),
            Resp::Okay => Value::Okay,
            Resp::Double(d) => Value::Double(*d),
            Resp::Boolean(b) => Value::Boolean(*b),
            Resp::Array(items) => Value::Array(nested(items)),
            Resp::Set(items) => Value::Set(nested(items)),
            Resp::Map(pairs) if depth > 0 => Value::Map(
                pairs
                    .iter()
                    .take(8)
                    .map(|(k, v)| (k.value(depth - 1), v.value(depth - 1)))
                    .collect(),
            ),
            Resp::Map(_) => Value::Map(Vec::new()),
        }
    }
}

/// What the connection does with one command.
#[derive(Arbitrary, Debug, Clone)]
enum Answer {
    Reply(Resp),
    /// An integer array: the shape every script reply has, with any numbers.
    Numbers(Vec<i64>),
    /// A connection error.
    Broken,
    /// No answer: the limiter's timeout decides.
    Silent,
}

/// A connection answering each command with the next scripted answer (then `Nil`).
#[derive(Clone)]
struct Scripted(Arc<Mutex<VecDeque<Answer>>>);

impl ConnectionLike for Scripted {
    fn req_packed_command<'a>(&'a mut self, _: &'a Cmd) -> RedisFuture<'a, Value> {
        let answer = self.0.lock().unwrap().pop_front();
        Box::pin(async move {
            match answer {
                None => Ok(Value::Nil),
                Some(Answer::Reply(resp)) => Ok(resp.value(3)),
                Some(Answer::Numbers(numbers)) => Ok(Value::Array(
                    numbers.into_iter().take(8).map(Value::Int).collect(),
                )),
                Some(Answer::Broken) => {
                    Err(std::io::Error::from(std::io::ErrorKind::ConnectionReset).into())
                }
                Some(Answer::Silent) => std::future::pending().await,
            }
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        _: &'a Pipeline,
        _: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move { Ok(vec![Value::Nil; count.min(64)]) })
    }

    fn get_db(&self) -> i64 {
        0
    }
}

#[derive(Arbitrary, Debug)]
enum Call {
    Acquire { key: Vec<u8>, cost: u8 },
    Peek { key: Vec<u8> },
}

#[derive(Arbitrary, Debug)]
struct Input {
    limiter: u8,
    open: bool,
    capacity: u8,
    answers: Vec<Answer>,
    calls: Vec<Call>,
}

fn check_outcome(outcome: &Outcome, cost: u32, capacity: u32, policy: FailurePolicy) {
    match outcome {
        Outcome::Decided(decision) => match *decision {
            Decision::Allowed { remaining } => {
                assert!(cost <= capacity, "{decision:?} for {cost} of {capacity}");
                assert!(remaining <= capacity - cost, "{decision:?} for {cost}");
            }
            Decision::Denied {
                remaining,
                retry_after,
            } => {
                assert!(cost > 0 && cost <= capacity, "{decision:?} for {cost}");
                assert!(remaining < cost, "{decision:?}: it had enough for {cost}");
                assert!(retry_after > Duration::ZERO, "{decision:?}");
            }
            Decision::ExceedsCapacity {
                capacity: reported, ..
            } => {
                assert_eq!(reported, capacity);
                assert!(cost > capacity);
            }
            Decision::Overflow { .. } => panic!("Redis limiters have no key cap"),
        },
        Outcome::Fallback { allowed, error } => {
            assert_eq!(*allowed, policy == FailurePolicy::Open, "{error}");
            assert!(!error.to_string().is_empty());
        }
    }
}

fuzz_target!(|input: Input| {
    let capacity = u32::from(input.capacity).max(1);
    let policy = if input.open {
        FailurePolicy::Open
    } else {
        FailurePolicy::Closed
    };
    let conn = Scripted(Arc::new(Mutex::new(
        input.answers.into_iter().take(64).collect(),
    )));
    let quota = Quota::per_second(capacity).expect("a quota");
    let timeout = Duration::from_millis(50);
    runtime().block_on(async move {
        // Whole microseconds per token: what the Redis token bucket requires.
        let quota = Quota::new(capacity, Duration::from_micros(1000)).unwrap_or(quota);
        let window = Duration::from_secs(1);
        enum Limiter {
            Bucket(RedisTokenBucket<Scripted>),
            Window(RedisFixedWindow<Scripted>),
            Leased(RedisLeasedTokenBucket<Scripted>),
        }
        let limiter = match input.limiter % 3 {
            0 => Limiter::Bucket(
                RedisTokenBucket::builder(quota, policy)
                    .timeout(timeout)
                    .build(conn)
                    .expect("a valid limiter"),
            ),
            1 => Limiter::Window(
                RedisFixedWindow::builder(capacity, window, policy)
                    .timeout(timeout)
                    .build(conn)
                    .expect("a valid limiter"),
            ),
            _ => Limiter::Leased(
                RedisLeasedTokenBucket::builder(quota, policy)
                    .timeout(timeout)
                    .build(conn)
                    .expect("a valid limiter"),
            ),
        };
        for call in input.calls.iter().take(16) {
            match call {
                Call::Acquire { key, cost } => {
                    let cost = u32::from(*cost);
                    let outcome = match &limiter {
                        Limiter::Bucket(l) => l.acquire(key, cost).await,
                        Limiter::Window(l) => l.acquire(key, cost).await,
                        Limiter::Leased(l) => l.acquire(key, cost).await,
                    };
                    check_outcome(&outcome, cost, capacity, policy);
                }
                Call::Peek { key } => {
                    let left = match &limiter {
                        Limiter::Bucket(l) => l.peek(key).await,
                        Limiter::Window(l) => l.peek(key).await,
                        Limiter::Leased(l) => l.peek(key).await,
                    };
                    if let Ok(left) = left {
                        assert!(left <= capacity, "a peek read {left} of {capacity}");
                    }
                }
            }
        }
    });
});
