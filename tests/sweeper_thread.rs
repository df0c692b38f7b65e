//! The limiter's own sweeper thread: started only when first needed (a rotation's old
//! map to settle, a sweep due, or, on the opt-in word store, its tables filling past
//! the size from which it grows them ahead of requests), named, never started under
//! `manual_eviction()`, and gone once the limiter is dropped.
//! (One test in its own binary, so no other test's limiters start threads meanwhile.)

use std::time::Duration;
use turnstile::{ManualClock, Quota, TokenBucket};

/// Threads of this process named like the sweeper (Linux truncates names to 15 bytes).
fn sweeper_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .expect("Linux /proc")
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
        .filter(|name| name.trim_end() == "turnstile-sweep")
        .count()
}

/// Waits until `sweeper_threads()` is `count` (a hang detector, not a timing
/// assertion: a joined thread can linger in /proc for a moment after the join).
fn wait_for_threads(count: usize, what: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while sweeper_threads() != count {
        assert!(std::time::Instant::now() < deadline, "{what}");
        std::thread::yield_now();
    }
}

fn limiter(manual: bool, clock: &ManualClock) -> TokenBucket<u64, ManualClock> {
    let builder = TokenBucket::<u64>::builder(Quota::new(1, Duration::from_millis(1)).unwrap())
        .clock(clock.clone());
    if manual {
        builder.manual_eviction().build().unwrap()
    } else {
        builder.build().unwrap()
    }
}

#[test]
fn the_sweeper_thread_comes_when_needed_and_goes_with_its_limiter() {
    assert_eq!(sweeper_threads(), 0);

    let clock = ManualClock::new();
    let few = limiter(false, &clock);
    for key in 0..100 {
        assert!(few.try_acquire(&key));
    }
    assert_eq!(sweeper_threads(), 0, "no sweep due yet: no thread");

    let manual = limiter(true, &clock);
    for key in 0..50_000 {
        assert!(manual.try_acquire(&key));
    }
    assert_eq!(sweeper_threads(), 0, "manual eviction never starts one");

    // Within the first margin (1 s) no key taken from can be forgettable: the young
    // generation grows past every size at which a rotation is due (from 1,024 keys),
    // and none comes.
    let many = limiter(false, &clock);
    clock.advance(Duration::from_millis(1));
    for key in 0..30_000 {
        assert!(many.try_acquire(&key));
    }
    assert_eq!(sweeper_threads(), 0, "no key could be forgotten yet");

    // Past it, the next insertions rotate the generations (a request's own cheap
    // step), and the one that closes the rotation's claims asks the thread to finish
    // a resize the old map may have been left in, while it ages: the thread starts.
    clock.advance(Duration::from_secs(2));
    for key in 30_000..35_000 {
        assert!(many.try_acquire(&key));
    }
    // The thread names itself as it starts: wait for that.
    wait_for_threads(1, "no sweeper thread started at the first rotation");

    // Aged, the next insertions find its drain due: the same thread's to open.
    clock.advance(Duration::from_secs(2));
    for key in 35_000..40_000 {
        assert!(many.try_acquire(&key));
    }
    assert_eq!(
        sweeper_threads(),
        1,
        "one thread for the one limiter that needed it"
    );

    drop(many);
    wait_for_threads(0, "dropping the limiter did not end its thread");

    // On the word store: within its first margin, no sweep is due; but growing past
    // about 2.7 million keys (segments' tables three quarters full past 2,048 keys of
    // room: the first such tables have room for 3,451), the limiter asks its thread to
    // grow and drain them before requests must. (papaya grows by itself.)
    let growing = TokenBucket::<u64>::builder(Quota::new(1, Duration::from_millis(1)).unwrap())
        .clock(clock.clone())
        .word_store()
        .build()
        .unwrap();
    clock.advance(Duration::from_millis(1));
    for key in 0..3_000_000 {
        assert!(growing.try_acquire(&key));
    }
    wait_for_threads(1, "no thread came to grow the tables ahead");
    drop(growing);
    wait_for_threads(0, "dropping the limiter did not end its thread");
}
