//! The five-servers problem: five app servers with a limiter each admit the quota once
//! between them, not five times.

use crate::server::RedisServer;
use crate::{fresh_prefix, inspector, manager, server_time};
use std::time::Duration;
use tokio::task::JoinSet;
use turnstile::redis::{FailurePolicy, RedisFixedWindow, RedisTokenBucket};
use turnstile::{Quota, TokenBucket};

const SERVERS: usize = 5;
const TASKS_PER_SERVER: usize = 4;
const TRIES_PER_TASK: usize = 40;
const CAPACITY: u32 = 100;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_limiters_on_one_redis_admit_the_capacity_once_between_them() {
    let server = RedisServer::start();
    let mut inspect = inspector(&server).await;
    let interval = Duration::from_secs(24 * 3600);
    let quota = Quota::new(CAPACITY, interval).unwrap();
    let prefix = fresh_prefix("five");

    // Five app servers: each its own limiter and its own connection.
    let mut limiters = Vec::new();
    for _ in 0..SERVERS {
        let limiter = RedisTokenBucket::builder(quota, FailurePolicy::Closed)
            .prefix(&prefix)
            .timeout(Duration::from_secs(5))
            .build(manager(&server).await)
            .unwrap();
        limiters.push(limiter);
    }

    let before = server_time(&mut inspect).await;
    let mut tasks = JoinSet::new();
    for limiter in &limiters {
        for _ in 0..TASKS_PER_SERVER {
            let limiter = limiter.clone();
            tasks.spawn(async move {
                let mut allowed = 0u32;
                for _ in 0..TRIES_PER_TASK {
                    allowed += u32::from(limiter.try_acquire("the-one-client").await);
                }
                allowed
            });
        }
    }
    let mut allowed = 0;
    while let Some(count) = tasks.join_next().await {
        allowed += count.expect("a task finished");
    }
    let after = server_time(&mut inspect).await;

    for limiter in &limiters {
        assert_eq!(
            limiter.failures(),
            Default::default(),
            "every check was decided"
        );
    }
    // A day's grid point between the first and last check would add a token.
    let refills =
        (after / interval.as_micros() as u64 - before / interval.as_micros() as u64) as u32;
    assert!(
        (CAPACITY..=CAPACITY + refills).contains(&allowed),
        "{allowed} allowed of {} tries",
        SERVERS * TASKS_PER_SERVER * TRIES_PER_TASK
    );

    // The problem it solves: five in-process limiters admit five times the capacity.
    let in_process: u32 = (0..SERVERS)
        .map(|_| {
            let limiter = TokenBucket::<String>::new(quota).unwrap();
            (0..TASKS_PER_SERVER * TRIES_PER_TASK)
                .map(|_| u32::from(limiter.try_acquire("the-one-client")))
                .sum::<u32>()
        })
        .sum();
    assert_eq!(in_process, SERVERS as u32 * CAPACITY);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_fixed_windows_on_one_redis_admit_the_limit_once_per_window() {
    let server = RedisServer::start();
    let mut inspect = inspector(&server).await;
    let window = Duration::from_secs(24 * 3600);
    let prefix = fresh_prefix("five-fw");
    let mut tasks = JoinSet::new();
    let before = server_time(&mut inspect).await;
    for _ in 0..SERVERS {
        let limiter = RedisFixedWindow::builder(CAPACITY, window, FailurePolicy::Closed)
            .prefix(&prefix)
            .timeout(Duration::from_secs(5))
            .build(manager(&server).await)
            .unwrap();
        for _ in 0..TASKS_PER_SERVER {
            let limiter = limiter.clone();
            tasks.spawn(async move {
                let mut allowed = 0u32;
                for _ in 0..TRIES_PER_TASK {
                    allowed += u32::from(limiter.try_acquire("the-one-client").await);
                }
                allowed
            });
        }
    }
    let mut allowed = 0;
    while let Some(count) = tasks.join_next().await {
        allowed += count.expect("a task finished");
    }
    let after = server_time(&mut inspect).await;
    let window_us = window.as_micros() as u64;
    if before / window_us == after / window_us {
        assert_eq!(allowed, CAPACITY);
    }
}
