//! The guide: the long forms, one topic a page. Nothing here is code; every example
//! is a doc test.
//!
//! The README is the front door (what turnstile is, the quick start, which algorithm,
//! what is in the box). The reference is on the items themselves: each type's
//! semantics on the type, each protocol on its module. These pages sit between the
//! two: why the design is what it is, what to choose, and what was measured.
//!
//! | page | what it holds |
//! |---|---|
//! | [`state_word`] | the token bucket's semantics, its one-word state, and the limits of every algorithm's representation |
//! | [`algorithms`] | the five algorithms side by side: what a limit means, their edges, memory, when to pick which; direct limiters, baselines and clocks |
//! | [`bounded_memory`] | forgetting idle keys: the settings, how keys are forgotten, the ring or the word store, the hard cap |
//! | [`per_key_quotas`] | a quota per key, and changing quotas while the limiter runs |
//! | [`policies`] | several limits on one request, dry run, waiting instead of refusing |
//! | [`http`] | the tower layer in a service, the example server, what it costs |
//! | [`limits_from_a_file`] | limits, policies and routes from a TOML, YAML or JSON file, reloaded while running without losing a key's state |
//! | [`behind_a_proxy`] | the client's address behind load balancers: whom to trust, nginx's `real_ip` in turnstile's words |
//! | [`llm_token_budgets`] | costs known only after the response: tokens a minute per user, reserved from an estimate and settled from the answer |
//! | [`redis`] | limits shared by many servers: setting up, leases, what was measured |
//! | [`coming_from_governor`] | governor's API in turnstile's words, and what differs |
//!
//! How the project is built and checked (layout, verification, benchmarks, CI) is in
//! `CONTRIBUTING.md` at the repository's root.

pub mod algorithms;
pub mod behind_a_proxy;
pub mod bounded_memory;
pub mod coming_from_governor;
pub mod http;
pub mod limits_from_a_file;
pub mod llm_token_budgets;
pub mod per_key_quotas;
pub mod policies;
pub mod redis;
pub mod state_word;
