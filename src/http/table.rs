//! Where a service finds its routes: fixed when the layer is built, or, for a layer
//! from [`crate::config`], behind an `ArcSwap` that a reload swaps. A request loads
//! the table once, at its start, and keeps that one to its end: a request in flight
//! finishes under the table it started with, and none sees half of two.

use super::routes::Routes;
use std::ops::Deref;
use std::sync::Arc;

/// A layer's routes, as its services hold them.
pub(crate) enum Table {
    /// Built once.
    Fixed(Arc<Routes>),
    /// Swapped by [`crate::config::LiveLimits::reload`].
    #[cfg(feature = "config")]
    Live(Arc<arc_swap::ArcSwap<Routes>>),
}

impl Table {
    /// The routes now, to keep (a live table's first routes are a fixed layer's).
    #[cfg(feature = "config")]
    pub(crate) fn current(&self) -> Arc<Routes> {
        Arc::clone(&self.load())
    }

    /// The routes now: for a live table one lock-free load (arc-swap's, which borrows
    /// a slot of this thread's rather than counting a reference).
    #[inline]
    pub(crate) fn load(&self) -> Loaded<'_> {
        match self {
            Table::Fixed(routes) => Loaded::Fixed(routes),
            #[cfg(feature = "config")]
            Table::Live(table) => Loaded::Live(table.load()),
        }
    }
}

impl Clone for Table {
    fn clone(&self) -> Self {
        match self {
            Table::Fixed(routes) => Table::Fixed(Arc::clone(routes)),
            #[cfg(feature = "config")]
            Table::Live(table) => Table::Live(Arc::clone(table)),
        }
    }
}

/// The routes one request runs under.
pub(crate) enum Loaded<'a> {
    Fixed(&'a Arc<Routes>),
    #[cfg(feature = "config")]
    Live(arc_swap::Guard<Arc<Routes>>),
}

impl Deref for Loaded<'_> {
    type Target = Arc<Routes>;

    #[inline]
    fn deref(&self) -> &Arc<Routes> {
        match self {
            Loaded::Fixed(routes) => routes,
            #[cfg(feature = "config")]
            Loaded::Live(guard) => guard,
        }
    }
}
