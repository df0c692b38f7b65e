//! The service behind the layer in the HTTP layer's benchmarks (`config_reload`,
//! `layer_instructions`): it answers 200 at once, so what is measured is the layer.

use http::Request;
use std::convert::Infallible;
use std::future::{Ready, ready};
use std::task::{Context, Poll};
use tower::Service;

/// Answers at once.
#[derive(Clone)]
pub struct Ok200;

impl Service<Request<String>> for Ok200 {
    type Response = http::Response<String>;
    type Error = Infallible;
    type Future = Ready<Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Request<String>) -> Self::Future {
        ready(Ok(http::Response::new(String::new())))
    }
}
