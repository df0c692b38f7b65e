//! No request waits for another thread: on the default store (the ring of papaya maps), a thread
//! stalled at any point of a request where it runs the key type's code — inside the
//! key's `Hash`, `Eq` or `Clone` — keeps no request on another thread waiting, on any
//! key: a stored one, a new one, its own. The word store, an opt-in, does not hold
//! this: a key's `Eq` stalled under a segment's lock keeps every insertion into that
//! segment waiting, which the second test shows.
//!
//! Each scenario stalls one thread ("the staller") at its n-th call of one of the
//! three, for every n its request makes, and meanwhile asks another thread for
//! requests. Every key hashes alike (one hash for all), so that every key shares the
//! staller's probe chain, and on the word store its segment (but in the last
//! scenario, where keys are spread so that the map grows). The other thread's
//! requests must all be answered while the staller is still stalled; a thread that
//! waits is caught by a deadline (a hang detector, not a timing assertion: the
//! staller stays stalled until the check is over, so a waiting thread never answers
//! in time however long the deadline).

use std::cell::Cell;
use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::Duration;
use turnstile::{ManualClock, Quota, TokenBucket};

/// The key type's code a stall can sit in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Call {
    Hash,
    Eq,
    Clone,
}

thread_local! {
    /// On the staller's thread only: stall at the n-th call of this kind.
    static PLAN: Cell<Option<(Call, usize)>> = const { Cell::new(None) };
    /// Calls of the planned kind made so far on this thread.
    static MADE: Cell<usize> = const { Cell::new(0) };
    /// Where this thread stalls, set once it has.
    static GATE: std::cell::RefCell<Option<Arc<Gate>>> = const { std::cell::RefCell::new(None) };
    /// On the staller's thread only, in the resize scenario: the key it asks for; it
    /// stalls in the first `Hash` of any other key (a neighbour its request copies).
    static ASKING: Cell<Option<u64>> = const { Cell::new(None) };
    /// The neighbour it stalled on, once it has.
    static STALLED_ON: Cell<Option<u64>> = const { Cell::new(None) };
}

/// Holds the staller until the check is over, and tells the checker it is stalled.
struct Gate {
    open: Mutex<bool>,
    opened: Condvar,
    stalled: mpsc::SyncSender<()>,
}

impl Gate {
    /// A closed gate, and what tells the checker a thread stalled at it.
    fn closed() -> (Arc<Gate>, mpsc::Receiver<()>) {
        let (stalled_tx, stalled) = mpsc::sync_channel(1);
        let gate = Arc::new(Gate {
            open: Mutex::new(false),
            opened: Condvar::new(),
            stalled: stalled_tx,
        });
        (gate, stalled)
    }

    fn wait(&self) {
        let _ = self.stalled.try_send(());
        let mut open = self.open.lock().unwrap();
        while !*open {
            open = self.opened.wait(open).unwrap();
        }
    }

    fn open(&self) {
        *self.open.lock().unwrap() = true;
        self.opened.notify_all();
    }
}

/// Counts a call of `call` on this thread, and stalls there if it is the planned one.
fn called(call: Call) {
    let Some((planned, at)) = PLAN.with(Cell::get) else {
        return;
    };
    if planned != call {
        return;
    }
    let made = MADE.with(|made| {
        made.set(made.get() + 1);
        made.get()
    });
    if made == at {
        let gate = GATE
            .with(|gate| gate.borrow().clone())
            .expect("a staller has a gate");
        gate.wait();
    }
}

/// A key whose `Hash`, `Eq` and `Clone` may stall.
#[derive(Debug)]
struct Key(u64);

impl Hash for Key {
    fn hash<H: Hasher>(&self, state: &mut H) {
        called(Call::Hash);
        hashing(self.0);
        self.0.hash(state);
    }
}

/// In the resize scenario, stalls the staller in its first `Hash` of a key other than
/// the one it asks for: a neighbour that the map's growth has it copy.
fn hashing(key: u64) {
    let Some(asking) = ASKING.with(Cell::get) else {
        return;
    };
    if key == asking || STALLED_ON.with(Cell::get).is_some() {
        return;
    }
    STALLED_ON.with(|stalled| stalled.set(Some(key)));
    let gate = GATE
        .with(|gate| gate.borrow().clone())
        .expect("a staller has a gate");
    gate.wait();
}

impl PartialEq for Key {
    fn eq(&self, other: &Self) -> bool {
        called(Call::Eq);
        self.0 == other.0
    }
}

impl Eq for Key {}

impl Clone for Key {
    fn clone(&self) -> Self {
        called(Call::Clone);
        Key(self.0)
    }
}

/// One hash for every key: every key in one probe chain (and one segment).
#[derive(Clone, Default)]
struct OneHash;

impl BuildHasher for OneHash {
    type Hasher = OneHasher;
    fn build_hasher(&self) -> OneHasher {
        OneHasher
    }
}

struct OneHasher;

impl Hasher for OneHasher {
    fn finish(&self) -> u64 {
        0x9e37_79b9_7f4a_7c15
    }
    fn write(&mut self, _: &[u8]) {}
}

type Limiter = TokenBucket<Key, ManualClock, OneHash>;

/// Stored before each scenario, taken from once.
const STORED: [u64; 3] = [1, 2, 3];

fn limiter(word_store: bool) -> Arc<Limiter> {
    let builder = TokenBucket::<Key>::builder(Quota::per_second(1_000).unwrap())
        .clock(ManualClock::new())
        .hasher(OneHash);
    let limiter = if word_store {
        builder.word_store().build().unwrap()
    } else {
        builder.build().unwrap()
    };
    for key in STORED {
        assert!(limiter.try_acquire(&Key(key)));
    }
    Arc::new(limiter)
}

/// What the staller asks for.
#[derive(Clone, Copy, Debug)]
enum Request {
    /// A key never seen: a lookup that misses, then an insertion.
    New,
    /// A stored key: a lookup and a compare-and-set.
    Stored,
}

/// How one stall point went.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    /// The staller's request makes fewer calls than n: it never stalled.
    NoSuchCall,
    /// Stalled, and the other thread's requests were all answered meanwhile.
    NobodyWaited,
    /// Stalled, and the other thread's requests were not answered while it was.
    AnotherThreadWaited,
}

/// The staller asks for `request`, stalling at its `at`-th call of `call`; meanwhile
/// another thread asks for a stored key, a new key, a stored key's peek and refund,
/// and the staller's own key.
fn stall(word_store: bool, request: Request, call: Call, at: usize, deadline: Duration) -> Outcome {
    let limiter = limiter(word_store);
    let (gate, stalled) = Gate::closed();
    let staller = {
        let (limiter, gate) = (Arc::clone(&limiter), Arc::clone(&gate));
        thread::spawn(move || {
            GATE.with(|g| *g.borrow_mut() = Some(gate));
            PLAN.with(|plan| plan.set(Some((call, at))));
            let key = match request {
                Request::New => Key(100),
                Request::Stored => Key(STORED[0]),
            };
            let decision = limiter.acquire(&key, 1);
            PLAN.with(|plan| plan.set(None));
            decision
        })
    };
    // Stalled, or done without stalling (its request has no such call).
    loop {
        match stalled.recv_timeout(Duration::from_millis(10)) {
            Ok(()) => break,
            Err(RecvTimeoutError::Timeout) if staller.is_finished() => {
                assert!(staller.join().unwrap().is_allowed());
                return Outcome::NoSuchCall;
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => unreachable!("the gate holds the sender"),
        }
    }
    let (answered_tx, answered) = mpsc::channel();
    let other = {
        let limiter = Arc::clone(&limiter);
        thread::spawn(move || {
            let stored = limiter.acquire(&Key(STORED[1]), 1).is_allowed();
            let new = limiter.acquire(&Key(200), 1).is_allowed();
            let left = limiter.peek(&Key(STORED[2]));
            limiter.refund(&Key(STORED[2]), 1);
            let own = limiter.acquire(&Key(100), 1).is_allowed();
            let _ = answered_tx.send((stored, new, left, own));
        })
    };
    let outcome = match answered.recv_timeout(deadline) {
        Ok((stored, new, left, own)) => {
            assert!(stored && new && own, "requests answered wrongly");
            assert_eq!(left, 999);
            Outcome::NobodyWaited
        }
        Err(_) => Outcome::AnotherThreadWaited,
    };
    gate.open();
    other.join().unwrap();
    assert!(staller.join().unwrap().is_allowed());
    outcome
}

/// Every stall point of `request`'s `call`s, in order, until the request makes no
/// more of them; the outcomes of those where it stalled.
fn every_stall_point(
    word_store: bool,
    request: Request,
    call: Call,
    deadline: Duration,
) -> Vec<Outcome> {
    (1..)
        .map(|at| stall(word_store, request, call, at, deadline))
        .take_while(|outcome| *outcome != Outcome::NoSuchCall)
        .collect()
}

#[test]
fn on_the_default_store_a_stalled_request_keeps_nobody_waiting() {
    for request in [Request::New, Request::Stored] {
        for call in [Call::Hash, Call::Eq, Call::Clone] {
            let outcomes = every_stall_point(false, request, call, Duration::from_secs(30));
            // A request for a stored key copies no key; every other pair makes calls.
            if !matches!((request, call), (Request::Stored, Call::Clone)) {
                assert!(
                    !outcomes.is_empty(),
                    "{request:?} made no {call:?} call to stall in"
                );
            }
            for (n, outcome) in outcomes.iter().enumerate() {
                assert_eq!(
                    *outcome,
                    Outcome::NobodyWaited,
                    "{request:?}, stalled in its {}-th {call:?}: another thread waited",
                    n + 1
                );
            }
        }
    }
}

/// The same property fails on the word store: a new key's insertion runs the key's
/// `Eq` under its segment's lock, and another thread's insertion into that segment
/// waits for it. (The price of the opt-in, stated in `Builder::word_store`.)
#[test]
fn on_the_word_store_a_stalled_insertion_keeps_another_thread_waiting() {
    let outcomes = every_stall_point(true, Request::New, Call::Eq, Duration::from_secs(2));
    assert!(
        outcomes.contains(&Outcome::AnotherThreadWaited),
        "no stall point of a new key's Eq kept another thread waiting: {outcomes:?}"
    );
}

/// A stall inside `Hash` while the map grows: a new key's insertion helps copy the
/// table to its larger successor, hashing the neighbours it copies, and stalls in one
/// neighbour's `Hash` with that entry marked as being copied. Meanwhile another thread
/// asks for that very neighbour and every other stored key (a lookup and a
/// compare-and-set of its word: papaya's lookups never wait for a copy), refunds and
/// peeks each, and asks for twice as many new keys as the map held, inserted while
/// the copy is unfinished. None of it waits.
/// (What does wait, papaya's one exception, is a write to the entry being copied:
/// on this path, only a key's move to a new quota or a relocation racing its own
/// copy; `src/store/papaya/mod.rs`.)
#[test]
fn a_stall_while_the_map_grows_keeps_nobody_waiting() {
    const STORED: u64 = 5_000;
    let limiter: Arc<TokenBucket<Key, ManualClock, SpreadHash>> = Arc::new(
        TokenBucket::<Key>::builder(Quota::per_second(1_000).unwrap())
            .clock(ManualClock::new())
            .hasher(SpreadHash)
            .build()
            .unwrap(),
    );
    for key in 0..STORED {
        assert!(limiter.try_acquire(&Key(key)));
    }
    let (gate, stalled) = Gate::closed();
    let staller = {
        let (limiter, gate) = (Arc::clone(&limiter), Arc::clone(&gate));
        thread::spawn(move || {
            GATE.with(|g| *g.borrow_mut() = Some(gate));
            // New keys until one's insertion copies a neighbour: the map grows.
            for key in STORED..100 * STORED {
                ASKING.with(|asking| asking.set(Some(key)));
                assert!(limiter.try_acquire(&Key(key)));
                if STALLED_ON.with(Cell::get).is_some() {
                    return;
                }
            }
            panic!("the map never grew")
        })
    };
    stalled
        .recv_timeout(Duration::from_secs(60))
        .expect("the staller never copied a neighbour");
    // Which keys the staller stands on is known only to it: the other thread asks
    // for every stored key's neighbourhood by asking for all of them.
    let (answered_tx, answered) = mpsc::channel();
    let other = {
        let limiter = Arc::clone(&limiter);
        thread::spawn(move || {
            let mut allowed = 0u64;
            for key in 0..STORED {
                allowed += u64::from(limiter.try_acquire(&Key(key)));
                limiter.refund(&Key(key), 1);
                allowed += u64::from(limiter.peek(&Key(key)) == 999);
            }
            for key in 10 * STORED..12 * STORED {
                allowed += u64::from(limiter.try_acquire(&Key(key)));
            }
            let _ = answered_tx.send(allowed);
        })
    };
    let outcome = answered.recv_timeout(Duration::from_secs(30));
    gate.open();
    other.join().unwrap();
    staller.join().unwrap();
    assert_eq!(
        outcome.expect("another thread waited for the stalled copy"),
        2 * STORED + 2 * STORED,
        "requests answered wrongly"
    );
}

/// Spreads keys over the table (a multiplicative hash of the `u64`).
#[derive(Clone, Default)]
struct SpreadHash;

impl BuildHasher for SpreadHash {
    type Hasher = SpreadHasher;
    fn build_hasher(&self) -> SpreadHasher {
        SpreadHasher(0)
    }
}

struct SpreadHasher(u64);

impl Hasher for SpreadHasher {
    fn finish(&self) -> u64 {
        self.0.wrapping_mul(0x9e37_79b9_7f4a_7c15)
    }
    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.0 = (self.0 << 8) | u64::from(byte);
        }
    }
}
