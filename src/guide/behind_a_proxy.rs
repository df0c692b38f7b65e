//! Limiting per client behind a load balancer or reverse proxy (feature `tower`): whose
//! word to take for the client's address, nginx's `real_ip` in turnstile's words, and
//! the example server behind a proxy.
//!
//! # Whose address
//! Behind a proxy, every request's peer address is the proxy's, and [`PeerIp`] puts
//! every client in one bucket. The proxy tells the server who its client was in a
//! header — `X-Forwarded-For: client, proxy1, proxy2`, or `Forwarded: for=...` (RFC
//! 7239) — by **appending** the address it got the request from. But anyone can send
//! the header: the client writes what it likes, and the proxies append after it. The
//! leftmost entry, "the original client", is the one the client wrote. Keying on it
//! lets every client choose its key: a new one per request to get around the limit,
//! and a stream of new ones to fill the limiter's memory.
//!
//! Only the entries on the right were written by proxies you run, so [`RealIp`] reads
//! from the right: the peer, if you trust it, vouches for the last entry; a trusted
//! entry vouches for the one before it; the first address you do not trust is the
//! client. A client that is not a trusted proxy cannot make its key anything but its
//! own address, whatever it sends — the guarantee, its conditions and what every
//! other case falls back to are stated once, on [`RealIp`].
//!
//! ```rust
//! # #[cfg(feature = "tower")]
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use http::Request;
//! use http::request::Parts;
//! use std::net::{IpAddr, SocketAddr};
//! use std::sync::Arc;
//! use turnstile::http::{ProxyHeader, RealIp};
//! use turnstile::policy::{Check, Policy};
//! use turnstile::{Quota, TokenBucket};
//!
//! // The load balancers are in 10.0.0.0/8, and append to X-Forwarded-For.
//! let client = RealIp::new(ProxyHeader::XForwardedFor).trust("10.0.0.0/8".parse()?);
//! let per_client = Arc::new(TokenBucket::<IpAddr>::new(Quota::per_hour(1)?)?);
//! let policy: Policy<Parts> = Policy::builder()
//!     .check(Check::from_limiter("per-client", per_client, client))
//!     .build()?;
//!
//! // A request as the server sees it: its peer, and the header as the proxies left it.
//! let request = |peer: &str, forwarded_for: &str| -> Result<Parts, Box<dyn std::error::Error>> {
//!     let request = Request::builder()
//!         .header("x-forwarded-for", forwarded_for)
//!         .extension(peer.parse::<SocketAddr>()?)
//!         .body(())?;
//!     Ok(request.into_parts().0)
//! };
//! // 203.0.113.7 through two load balancers: 10.0.0.2 appended the client, then 10.0.0.1
//! // appended 10.0.0.2 and connected to the server.
//! assert!(policy.acquire(&request("10.0.0.1:5000", "203.0.113.7, 10.0.0.2")?).is_allowed());
//! // The same client with an address of its choosing in front: still 203.0.113.7.
//! let spoofed = request("10.0.0.1:5000", "198.51.100.1, 203.0.113.7, 10.0.0.2")?;
//! assert!(!policy.acquire(&spoofed).is_allowed());
//! // A client that reaches the server directly is its peer address, whatever it claims.
//! assert!(policy.acquire(&request("192.0.2.50:5000", "203.0.113.8")?).is_allowed());
//! assert!(!policy.acquire(&request("192.0.2.50:5000", "203.0.113.9")?).is_allowed());
//! # Ok(()) }
//! # #[cfg(not(feature = "tower"))]
//! # fn main() {}
//! ```
//!
//! # In a server
//! [`RealIp`] is a key extractor like [`PeerIp`], with the same key type (`IpAddr`: an
//! IPv4-mapped address as IPv4, IPv6 clients by their `/64`), so it replaces it in a
//! check as it is. With axum, which stores the peer as `ConnectInfo<SocketAddr>`:
//!
//! ```rust,no_run
//! # #[cfg(feature = "tower")]
//! # mod example {
//! use axum::{Router, extract::ConnectInfo, routing::get};
//! use std::net::{IpAddr, SocketAddr};
//! use std::sync::Arc;
//! use turnstile::http::{ProxyHeader, RateLimitLayer, RealIp};
//! use turnstile::policy::{Check, Policy};
//! use turnstile::{Quota, TokenBucket};
//!
//! async fn serve() -> Result<(), Box<dyn std::error::Error>> {
//!     let client = RealIp::from_extension(ProxyHeader::XForwardedFor,
//!             |info: &ConnectInfo<SocketAddr>| info.0)
//!         .trust("10.0.0.0/8".parse()?)          // set_real_ip_from 10.0.0.0/8;
//!         .trust("2001:db8:ffff::/48".parse()?); // set_real_ip_from 2001:db8:ffff::/48;
//!     let per_ip = Arc::new(TokenBucket::<IpAddr>::new(Quota::per_minute(300)?)?);
//!     let policy = Policy::builder()
//!         .check(Check::from_limiter("per-ip", per_ip, client))
//!         .build()?;
//!     let app = Router::new()
//!         .route("/", get(|| async { "hello" }))
//!         .layer(RateLimitLayer::builder(policy).build()?);
//!     let listener = tokio::net::TcpListener::bind("0.0.0.0:3000").await?;
//!     axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>()).await?;
//!     Ok(())
//! }
//! # }
//! ```
//!
//! Without the `ConnectInfo` (served without `into_make_service_with_connect_info`)
//! there is no peer and no key: with the default [`MissingKey`] every request is
//! refused with 400, which shows the mistake at once.
//!
//! # nginx's `real_ip`, side by side
//! | nginx (`ngx_http_realip_module`) | turnstile |
//! |---|---|
//! | `set_real_ip_from 10.0.0.0/8;` | `.trust("10.0.0.0/8".parse()?)` (a [`Cidr`]; one address is `"10.0.0.1".parse()?`), once per range |
//! | `real_ip_header X-Forwarded-For;` | `RealIp::new(ProxyHeader::XForwardedFor)` |
//! | — (nginx does not read it) | `RealIp::new(ProxyHeader::Forwarded)`: RFC 7239's `for=`, quoted IPv6 with ports |
//! | `real_ip_recursive on;` | the default: every trusted entry is skipped, up to [`max_hops`] entries (16) |
//! | `real_ip_recursive off;` | `.max_hops(1)`: the last entry, trusted or not |
//! | nothing trusted (the module's default) | `RealIp::new(..)` before any `trust`: the peer, as [`PeerIp`] |
//! | `real_ip_header proxy_protocol;` | not a header: put the PROXY protocol's source address into the request's extensions as the peer, and `PeerIp` or `RealIp` reads it |
//!
//! Where a hop's entry is `unknown`, obfuscated or malformed, the key is the nearest
//! trusted hop, never anything left of it (the table on [`RealIp`] has every case).
//! IPv6 clients are grouped by `/64` as [`PeerIp`] groups them
//! ([`ipv6_prefix`](crate::http::RealIp::ipv6_prefix)).
//!
//! # What the proxies must do
//! The guarantee holds while every proxy you trust appends to the header you name
//! the address it got the request from (or replaces the header with it), and the
//! server can be reached only through them:
//!
//! - nginx in front: `proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;`
//!   (appends `$remote_addr`), or `proxy_set_header X-Forwarded-For $remote_addr;`
//!   at the edge (replaces whatever the client sent);
//! - HAProxy: `option forwardfor` (a line of its own: several lines are one list, in
//!   order); Envoy: `use_remote_address: true`; AWS's load balancers in their default
//!   `append` mode. Trust the ranges they run in, not "any private address";
//! - trust every address a proxy appends for itself too: Google Cloud's load
//!   balancers append the client and then the load balancer's own address, which is
//!   the nearest entry (untrusted, it would be every client's key);
//! - a proxy that forwards the header untouched is not a proxy to trust: whatever
//!   it passes on is the client's.
//!
//! Trusting too little is safe — clients behind an untrusted proxy share the proxy's
//! key. Trusting too much is not: any host in a trusted range can name any key.
//!
//! # The example server behind a proxy
//! `examples/http_server.rs` takes `--trust-proxy CIDR` (repeatable; `--forwarded`
//! reads `Forwarded` instead of `X-Forwarded-For`) and keys its per-IP limit (300 a
//! minute) through [`RealIp`]; without it, through [`PeerIp`]. On loopback, with
//! `--trust-proxy 127.0.0.1`, 127.0.0.1 plays the proxy and 127.0.0.2 a client that
//! reaches the server directly (Linux routes all of `127/8` to loopback). The client
//! sends 300 requests, each with an API key and an `X-Forwarded-For` of its own (so no
//! per-user limit binds), then one more; then two requests come through the proxy.
//! Statuses and the `RateLimit` field, from the capture in `results/http.md`:
//!
//! ```text
//! $ curl -s -K spoof.curl | sort | uniq -c      # 300 requests from 127.0.0.2
//!     300 200
//! $ curl -i --interface 127.0.0.2 -H "x-api-key: mallory" -H "x-forwarded-for: 203.0.113.250" http://127.0.0.1:3000/balance
//! HTTP/1.1 429 Too Many Requests
//! ratelimit: "per-ip";r=0;t=1
//! $ curl -i -H "x-api-key: bob" -H "x-forwarded-for: 203.0.113.7" http://127.0.0.1:3000/balance
//! HTTP/1.1 200 OK
//! ratelimit: "balance";r=99;t=1
//! $ curl -i -H "x-api-key: carol" -H "x-forwarded-for: 198.51.100.1, 127.0.0.2" http://127.0.0.1:3000/balance
//! HTTP/1.1 429 Too Many Requests
//! ratelimit: "per-ip";r=0;t=1
//! ```
//!
//! The client's made-up addresses were ignored: its 301st request is refused by the
//! per-IP limit of its own address. Through the proxy, 203.0.113.7 has its own
//! allowance; and 127.0.0.2 coming through the proxy, with an address of its choosing
//! in front of the one the proxy appended, is the same client, refused.
//!
//! What the layer costs with three hops against [`PeerIp`], and the extractor alone:
//! `results/http.md`, "Behind a proxy".
//!
//! [`PeerIp`]: crate::http::PeerIp
//! [`RealIp`]: crate::http::RealIp
//! [`Cidr`]: crate::http::Cidr
//! [`max_hops`]: crate::http::RealIp::max_hops
//! [`MissingKey`]: crate::policy::MissingKey
