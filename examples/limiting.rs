//! Limiting in action: four threads send requests for three users as fast as they
//! can for two seconds, under "at most 5 per second per user". Each user gets its
//! burst of 5 at once, then exactly one more every 200 ms.
//!
//! Run: `cargo run --release --example limiting`

use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};
use turnstile::{Quota, TokenBucket};

fn main() -> Result<(), turnstile::QuotaError> {
    let limiter = TokenBucket::<String>::new(Quota::per_second(5)?)?;
    let users = ["alice", "bob", "carol"];
    let allowed = [(); 3].map(|_| AtomicU64::new(0));
    let denied = AtomicU64::new(0);
    let run_for = Duration::from_secs(2);
    let start = Instant::now();

    thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                while start.elapsed() < run_for {
                    for (i, user) in users.iter().enumerate() {
                        if limiter.try_acquire(*user) {
                            allowed[i].fetch_add(1, Ordering::Relaxed);
                        } else {
                            denied.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            });
        }
    });

    println!("quota: {:?}, ran {run_for:?} on 4 threads", limiter.quota());
    for (user, count) in users.iter().zip(&allowed) {
        println!(
            "{user:>6}: {} allowed (burst 5 + one per 200 ms)",
            count.load(Ordering::Relaxed)
        );
    }
    println!("denied: {}", denied.load(Ordering::Relaxed));
    let next = limiter.acquire("alice", 1);
    println!("alice's next request: {next:?}");
    Ok(())
}
