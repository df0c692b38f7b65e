//! The tower layer through a real axum server on loopback and a real HTTP/1.1 client
//! (hyper's), or raw bytes on a TCP socket where a client would refuse to send them.
//! Limiters run on a `ManualClock` the tests move, or, for delay mode, on tokio's
//! paused clock: no assertion depends on the wall clock.

mod bad_input;
mod delay;
mod dry_run;
mod fields;
mod real_ip;
mod real_ip_props;
mod routes;
mod server;
mod settle;
#[cfg(feature = "redis")]
mod shared;
mod syntax;
