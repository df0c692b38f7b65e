//! How a check finds its key in a request.

/// Finds a check's key in a request of type `R`.
///
/// The key is lent to a callback rather than returned, so it may borrow from the
/// request (a header's text, with no copy) or be made on the spot (an IP address).
/// A check asks once per request and keeps what it was lent until it knows whether
/// to give its tokens back, so the tokens always go back to the key they came from.
///
/// Any closure `Fn(&R) -> Option<T>` is an extractor of owned keys of type `T`.
pub trait KeyExtractor<R: ?Sized>: Send + Sync {
    /// The key in the form the limiter looks it up: `str` for a `String`-keyed
    /// limiter, `IpAddr` for an `IpAddr`-keyed one.
    type Key: ?Sized;

    /// Calls `with` on the key found in `request`; `None`, without calling it, when
    /// the request has no usable key.
    fn with_key<T>(&self, request: &R, with: impl FnOnce(&Self::Key) -> T) -> Option<T>;
}

impl<R, T, F> KeyExtractor<R> for F
where
    R: ?Sized,
    F: Fn(&R) -> Option<T> + Send + Sync,
{
    type Key = T;

    #[inline]
    fn with_key<U>(&self, request: &R, with: impl FnOnce(&T) -> U) -> Option<U> {
        self(request).map(|key| with(&key))
    }
}
