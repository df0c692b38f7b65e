//! Where a request's rules come from: the limiter's own algorithm, or rules the
//! request carries in (a reloaded file's check, under its own configuration:
//! [`crate::per_key::Pinned`]).

use crate::algorithm::{Algorithm, Rules};

/// The rules a request steps its key's state by, given the limiter's own.
pub(crate) trait Carried<K, A: Algorithm<K>>: Copy {
    /// The rules.
    type Rules: Rules<K, State = A::State>;

    /// The rules, given the limiter's own algorithm `own`.
    fn of<'a>(&'a self, own: &'a A) -> &'a Self::Rules;
}

/// The limiter's own algorithm: nothing carried. Zero-sized, so the request paths
/// of a limiter used directly keep no pointer to rules beside the limiter's own
/// (passing `&algorithm` instead cost a known key's check 7–9 instructions of
/// register pressure: results/config-reload.md).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Own;

impl<K, A: Algorithm<K>> Carried<K, A> for Own {
    type Rules = A;

    #[inline(always)]
    fn of<'a>(&'a self, own: &'a A) -> &'a A {
        own
    }
}

/// Rules the request carries.
impl<K, A: Algorithm<K>, R: Rules<K, State = A::State>> Carried<K, A> for &R {
    type Rules = R;

    #[inline(always)]
    fn of<'a>(&'a self, _: &'a A) -> &'a R {
        self
    }
}
