//! A test server and client.

use axum::Router;
use http::header::HOST;
use http::{HeaderMap, HeaderName, Method, Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use std::hash::Hash;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use turnstile::http::{HeaderKey, PeerIp, RateLimitLayer};
use turnstile::policy::{Check, Limit};
use turnstile::{Clock, Quota, TokenBucket};

pub const API_KEY: HeaderName = HeaderName::from_static("x-api-key");

/// Serves every path with 200 "ok" behind `layer` on 127.0.0.1, with the peer address
/// in each request (axum's `ConnectInfo`); returns the address.
pub async fn serve(layer: RateLimitLayer) -> SocketAddr {
    serve_app(Router::new().fallback(|| async { "ok" }).layer(layer)).await
}

/// Serves `app` on 127.0.0.1, with the peer address in each request; returns the
/// address.
pub async fn serve_app(app: Router) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let app = app.into_make_service_with_connect_info::<SocketAddr>();
        axum::serve(listener, app).await.unwrap();
    });
    addr
}

/// A response, read whole.
#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: String,
}

impl Reply {
    /// The one value of header `name`, as text.
    pub fn header(&self, name: &str) -> Option<&str> {
        let mut values = self.headers.get_all(name).iter();
        let value = values.next()?;
        assert!(values.next().is_none(), "{name} appears more than once");
        Some(value.to_str().unwrap())
    }
}

/// A request for `path`, with the API key `key` when given.
pub fn request(method: Method, path: &str, key: Option<&str>) -> Request<Empty<Bytes>> {
    let mut builder = Request::builder()
        .method(method)
        .uri(path)
        .header(HOST, "test");
    if let Some(key) = key {
        builder = builder.header(API_KEY, key);
    }
    builder.body(Empty::new()).unwrap()
}

/// A GET of `path` with API key `key`, from 127.0.0.`from`.
pub async fn get(server: SocketAddr, from: u8, path: &str, key: Option<&str>) -> Reply {
    send(server, from, request(Method::GET, path, key)).await
}

/// Sends `request` on a new connection from 127.0.0.`from` (Linux routes all of
/// 127/8 to loopback, so each `from` is a distinct peer address).
pub async fn send(server: SocketAddr, from: u8, request: Request<Empty<Bytes>>) -> Reply {
    let socket = TcpSocket::new_v4().unwrap();
    socket
        .bind(SocketAddr::new(
            IpAddr::V4(Ipv4Addr::new(127, 0, 0, from)),
            0,
        ))
        .unwrap();
    let stream = socket.connect(server).await.unwrap();
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(connection);
    let response = sender.send_request(request).await.unwrap();
    let (parts, body) = response.into_parts();
    let body = body.collect().await.unwrap().to_bytes();
    Reply {
        status: parts.status,
        headers: parts.headers,
        body: String::from_utf8(body.to_vec()).unwrap(),
    }
}

/// Writes `bytes` on a new connection and reads until the server closes it; returns
/// what it sent back (empty if it closed without answering).
pub async fn raw(server: SocketAddr, bytes: &[u8]) -> String {
    let mut stream = TcpStream::connect(server).await.unwrap();
    // The server may answer and close before reading everything (a refused head).
    let _ = stream.write_all(bytes).await;
    let mut reply = Vec::new();
    let _ = stream.read_to_end(&mut reply).await;
    String::from_utf8_lossy(&reply).into_owned()
}

/// The status code of a raw HTTP/1.x response.
pub fn status_of(raw: &str) -> Option<u16> {
    let rest = raw
        .strip_prefix("HTTP/1.1 ")
        .or_else(|| raw.strip_prefix("HTTP/1.0 "))?;
    rest.get(..3)?.parse().ok()
}

/// A token bucket on `clock`.
pub fn bucket<K: Hash + Eq + Clone + Send + Sync + 'static, C: Clock + Clone + 'static>(
    quota: Quota,
    clock: &C,
) -> Arc<TokenBucket<K, C>> {
    Arc::new(TokenBucket::with_clock(quota, clock.clone()).unwrap())
}

/// A check on the `x-api-key` header.
pub fn per_user<C: Clock + Clone + 'static>(
    name: &str,
    quota: Quota,
    clock: &C,
) -> Check<TokenBucket<String, C>, String, HeaderKey> {
    Check::new(
        name,
        bucket(quota, clock),
        Limit::steady(quota),
        HeaderKey::new(API_KEY),
    )
}

/// The peer address as axum stores it.
pub fn peer_ip() -> PeerIp<axum::extract::ConnectInfo<SocketAddr>> {
    PeerIp::from_extension(|info: &axum::extract::ConnectInfo<SocketAddr>| info.0)
}

/// A check on the peer's IP address.
pub fn per_ip<C: Clock + Clone + 'static>(
    name: &str,
    quota: Quota,
    clock: &C,
) -> Check<TokenBucket<IpAddr, C>, IpAddr, PeerIp<axum::extract::ConnectInfo<SocketAddr>>> {
    Check::new(name, bucket(quota, clock), Limit::steady(quota), peer_ip())
}

/// tokio's clock as a limiter clock: under `tokio::time::pause` the limiter and the
/// layer's sleeps share one simulated time.
#[derive(Clone)]
pub struct TokioClock {
    origin: tokio::time::Instant,
}

impl TokioClock {
    pub fn new() -> Self {
        Self {
            origin: tokio::time::Instant::now(),
        }
    }
}

impl Clock for TokioClock {
    fn now(&self) -> u64 {
        self.origin.elapsed().as_nanos() as u64
    }
}
