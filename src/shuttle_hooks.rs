//! What `shuttle-tests/` needs, exposed only under `--cfg turnstile_shuttle`: the
//! switches for the mutants inside turnstile's own protocols. The shuttle tests
//! otherwise use the public API only (the real stores, the real sweeper thread), so
//! this stays small; the loom models' wider hooks are in `loom_hooks.rs`.

pub use crate::sync::mutants::{Mutant, with as with_mutant};
