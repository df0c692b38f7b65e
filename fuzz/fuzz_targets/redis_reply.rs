//! The Redis limiters on a connection that answers anything: arbitrary replies (any
//! RESP shape, numbers out of every range, errors, silence until the timeout), as a
//! hostile or foreign server, or foreign data in the limiters' keys, would give.
//!
//! Checked, for the token bucket, the fixed window and the leased token bucket, each
//! fail-open or fail-closed:
//! - never a panic;
//! - a reply the scripts never give is never a decision: the failure policy answers
//!   (`SharedDecision::Fallback`, allowed exactly when the policy is open); for the token
//!   bucket and the fixed window, the one reply a check read is held to a plain
//!   reference of what each script can reply (`script_decision`): a reply in it is
//!   the decision it says, exactly; one outside it is a fallback;
//! - every decision is consistent with the limit (`remaining` at most the capacity,
//!   a denial's wait positive, a cost over the capacity refused as such), and so is
//!   every count a peek reads.
//! - every settle that is not an error is consistent with what it settles: a refund
//!   of at most the difference (none, for the fixed window), or a charge and a
//!   forgiven part that add up to it.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use redis::aio::ConnectionLike;
use redis::{Cmd, Pipeline, RedisFuture, Value};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use turnstile::SharedDecision;
use turnstile::redis::lease::RedisLeasedTokenBucket;
use turnstile::redis::{CheckError, FailurePolicy, RedisFixedWindow, RedisTokenBucket};
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

/// A connection answering each command with the next scripted answer (then `Nil`),
/// and noting each answer it gives: the value replied, or `None` for no value (an
/// error, silence).
#[derive(Clone)]
struct Scripted(Arc<Mutex<VecDeque<Answer>>>, Arc<Mutex<Vec<Option<Value>>>>);

impl ConnectionLike for Scripted {
    fn req_packed_command<'a>(&'a mut self, _: &'a Cmd) -> RedisFuture<'a, Value> {
        let answer = self.0.lock().unwrap().pop_front();
        let value = match &answer {
            None => Some(Value::Nil),
            Some(Answer::Reply(resp)) => Some(resp.value(3)),
            Some(Answer::Numbers(numbers)) => Some(Value::Array(
                numbers.iter().take(8).copied().map(Value::Int).collect(),
            )),
            Some(Answer::Broken | Answer::Silent) => None,
        };
        self.1.lock().unwrap().push(value.clone());
        Box::pin(async move {
            match answer {
                None | Some(Answer::Reply(_) | Answer::Numbers(_)) => Ok(value.expect("a value")),
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
    Settle { key: Vec<u8>, estimate: u8, actual: u16 },
}

#[derive(Arbitrary, Debug)]
struct Input {
    limiter: u8,
    open: bool,
    capacity: u8,
    answers: Vec<Answer>,
    calls: Vec<Call>,
}

fn check_outcome(
    outcome: &SharedDecision<CheckError>,
    cost: u32,
    capacity: u32,
    policy: FailurePolicy,
) {
    match outcome {
        SharedDecision::Decided(decision) => match *decision {
            Decision::Allowed { remaining } => {
                assert!(cost <= capacity, "{decision:?} for {cost} of {capacity}");
                assert!(remaining <= capacity - cost, "{decision:?} for {cost}");
            }
            Decision::Denied {
                remaining,
                retry_after,
            } => {
                assert!(cost <= capacity, "{decision:?} for {cost}");
                // A cost of 0 is denied only to a key in debt: nothing left.
                assert!(
                    remaining < cost.max(1),
                    "{decision:?}: it had enough for {cost}"
                );
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
        SharedDecision::Fallback { allowed, error } => {
            assert_eq!(*allowed, policy == FailurePolicy::Open, "{error}");
            assert!(!error.to_string().is_empty());
        }
    }
}

/// The token bucket's refill interval here, in microseconds.
const MICROS_PER_TOKEN: u64 = 1000;

/// Which script a plain check ran.
#[derive(Clone, Copy, Debug)]
enum Script {
    Bucket { interval: u64 },
    Window,
}

/// The decision `reply` gives to a check of `cost` against `capacity`, if `reply` is
/// one the script can give (src/redis/token_bucket.lua, fixed_window.lua), else
/// `None`. Written from the scripts, apart from the limiters' readers. Every reply is
/// an array of integers ending with `replaced`, 0 or 1.
///
/// Token bucket, `{status, held, ahead, missing, replaced}`:
/// - 2 (cost above the capacity): `held` in `0..=capacity`, `ahead = missing = 0`;
/// - 0 (allowed): `held` in `0..=capacity − cost`, `ahead = missing = 0`;
/// - 1 (denied, `cost <= capacity`): `held < cost` (0 for a cost of 0); `ahead` is
///   the refill point less the reading: the latest grid point at or before it
///   (`−interval < ahead <= 0`, only for `cost > 0`), then `missing = cost − held`;
///   or a later one the key was last refilled at (a reading behind it, or a key in
///   debt: `ahead > 0`), `behind = ⌈ahead / interval⌉` grid points ahead, where the
///   bucket holds `tokens = cost − missing` in `0..=capacity`, the reading `held =
///   max(0, tokens − behind)`, and `tokens − behind < cost` (a cost of 0 is denied
///   only to a reading that owes). The wait is `ahead + missing × interval` µs.
///
/// Fixed window, `{status, remaining, wait, replaced}`:
/// - 2: `remaining` in `0..=capacity`, `wait = 0`;
/// - 0: `remaining` in `0..=capacity − cost`, `wait = 0`;
/// - 1 (`cost <= capacity`): `remaining < cost` (0 for a cost of 0, denied only to a
///   key counting past its limit), `wait >= 1` µs (to the first window with room for
///   the cost, which can lie further than one window ahead for a reading behind the
///   counted window or a key in debt).
fn script_decision(script: Script, reply: &Value, cost: u32, capacity: u32) -> Option<Decision> {
    let Value::Array(items) = reply else {
        return None;
    };
    let numbers: Vec<i64> = items
        .iter()
        .map(|item| match item {
            Value::Int(n) => Some(*n),
            _ => None,
        })
        .collect::<Option<_>>()?;
    let (&replaced, numbers) = numbers.split_last()?;
    if replaced != 0 && replaced != 1 {
        return None;
    }
    let (cost, capacity) = (i128::from(cost), i128::from(capacity));
    let numbers: Vec<i128> = numbers.iter().map(|&n| i128::from(n)).collect();
    let remaining = u32::try_from(*numbers.get(1)?).ok()?;
    let decision = match (script, &numbers[..]) {
        (Script::Bucket { .. }, &[2, held, 0, 0]) | (Script::Window, &[2, held, 0])
            if cost > capacity && (0..=capacity).contains(&held) =>
        {
            Decision::ExceedsCapacity {
                remaining,
                capacity: capacity as u32,
            }
        }
        (Script::Bucket { .. }, &[0, held, 0, 0]) | (Script::Window, &[0, held, 0])
            if cost <= capacity && (0..=capacity - cost).contains(&held) =>
        {
            Decision::Allowed { remaining }
        }
        (Script::Bucket { interval }, &[1, held, ahead, missing])
            if cost <= capacity && (0..cost.max(1)).contains(&held) =>
        {
            let interval = i128::from(interval);
            let possible = if ahead <= 0 {
                cost > 0 && ahead > -interval && missing == cost - held
            } else {
                let behind = (ahead + interval - 1) / interval;
                let tokens = cost - missing;
                (0..=capacity).contains(&tokens)
                    && held == (tokens - behind).max(0)
                    && tokens - behind < cost
            };
            if !possible {
                return None;
            }
            let wait = u64::try_from(ahead + missing * interval).ok()?;
            assert!(wait > 0, "the scripts' arithmetic: a denial waits");
            Decision::Denied {
                remaining,
                retry_after: Duration::from_micros(wait),
            }
        }
        (Script::Window, &[1, held, wait])
            if cost <= capacity && held < cost.max(1) && held >= 0 && wait >= 1 =>
        {
            Decision::Denied {
                remaining,
                retry_after: Duration::from_micros(u64::try_from(wait).ok()?),
            }
        }
        _ => return None,
    };
    Some(decision)
}

fuzz_target!(|input: Input| {
    let capacity = u32::from(input.capacity).max(1);
    let policy = if input.open {
        FailurePolicy::Open
    } else {
        FailurePolicy::Closed
    };
    let given = Arc::new(Mutex::new(Vec::new()));
    let conn = Scripted(
        Arc::new(Mutex::new(input.answers.into_iter().take(64).collect())),
        Arc::clone(&given),
    );
    let quota = Quota::per_second(capacity).expect("a quota");
    let timeout = Duration::from_millis(50);
    runtime().block_on(async move {
        // Whole microseconds per token: what the Redis token bucket requires.
        let quota = Quota::new(capacity, Duration::from_micros(MICROS_PER_TOKEN)).unwrap_or(quota);
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
                    let before = given.lock().unwrap().len();
                    let outcome = match &limiter {
                        Limiter::Bucket(l) => l.acquire(key, cost).await,
                        Limiter::Window(l) => l.acquire(key, cost).await,
                        Limiter::Leased(l) => l.acquire(key, cost).await,
                    };
                    check_outcome(&outcome, cost, capacity, policy);
                    // The one reply this check read, when it sent one command and got
                    // a value back: the script's, or a reply no script gives.
                    let reply = {
                        let given = given.lock().unwrap();
                        match &given[before..] {
                            [Some(value)] => Some(value.clone()),
                            _ => None,
                        }
                    };
                    let script = match &limiter {
                        Limiter::Bucket(_) => Some(Script::Bucket {
                            interval: MICROS_PER_TOKEN,
                        }),
                        Limiter::Window(_) => Some(Script::Window),
                        // The lease's fetches are replies of another shape, read
                        // apart; its decisions come from its lease too.
                        Limiter::Leased(_) => None,
                    };
                    if let (Some(reply), Some(script)) = (reply, script) {
                        let expected = script_decision(script, &reply, cost, capacity);
                        match (&outcome, expected) {
                            (SharedDecision::Decided(decision), Some(expected)) => assert_eq!(
                                *decision, expected,
                                "{reply:?} for {cost} of {capacity} read as another decision"
                            ),
                            (SharedDecision::Fallback { .. }, None) => {}
                            (outcome, expected) => panic!(
                                "{script:?} replied {reply:?} for {cost} of {capacity}: \
                                 {outcome:?}, but the scripts give {expected:?}"
                            ),
                        }
                    }
                }
                Call::Settle {
                    key,
                    estimate,
                    actual,
                } => {
                    let (estimate, actual) = (u32::from(*estimate), u32::from(*actual));
                    let settled = match &limiter {
                        Limiter::Bucket(l) => l.settle(key, estimate, actual).await,
                        Limiter::Window(l) => l.settle(key, estimate, actual).await,
                        Limiter::Leased(l) => l.settle(key, estimate, actual).await,
                    };
                    if let Ok(settled) = settled {
                        if matches!(limiter, Limiter::Window(_)) {
                            // A fixed window gives nothing back on settle.
                            assert_eq!(settled.refunded, 0, "{settled:?}");
                        }
                        if actual < estimate {
                            assert!(settled.refunded <= estimate - actual, "{settled:?}");
                            assert_eq!((settled.charged, settled.forgiven), (0, 0));
                        } else {
                            assert_eq!(settled.refunded, 0, "{settled:?}");
                            assert_eq!(settled.charged + settled.forgiven, actual - estimate);
                        }
                    }
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
