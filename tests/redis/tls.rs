//! Redis over TLS (feature `redis-tls`): a `redis-server` the test starts with a TLS
//! port and a throwaway self-signed certificate. Trusted, checks are decided exactly
//! as over plain TCP; not trusted, the certificate is refused and the failure policy
//! answers — TLS is verified, never skipped.

use crate::fresh_prefix;
use crate::server::{RedisServer, free_loopback_port};
use std::time::Duration;
use turnstile::SharedDecision;
use turnstile::redis::lease::RedisLeasedTokenBucket;
use turnstile::redis::{CheckError, FailurePolicy, RedisTokenBucket};
use turnstile::{Decision, Quota};

/// A server with a TLS port (and a plain one, for its readiness check), the TLS
/// port, and the certificate to trust, in PEM.
fn tls_server() -> (RedisServer, u16, String, tempdir::Dir) {
    let dir = tempdir::Dir::new();
    let rcgen::CertifiedKey { cert, key_pair } =
        rcgen::generate_simple_self_signed(vec!["127.0.0.1".into(), "localhost".into()])
            .expect("a self-signed certificate");
    let (cert_file, key_file) = (dir.path("cert.pem"), dir.path("key.pem"));
    std::fs::write(&cert_file, cert.pem()).unwrap();
    std::fs::write(&key_file, key_pair.serialize_pem()).unwrap();
    let tls_port = free_loopback_port();
    let server = RedisServer::start_with_args(&[
        "--tls-port".into(),
        tls_port.to_string(),
        "--tls-cert-file".into(),
        cert_file,
        "--tls-key-file".into(),
        key_file,
        "--tls-auth-clients".into(),
        "no".into(),
    ]);
    (server, tls_port, cert.pem(), dir)
}

/// A client that trusts the test server's self-signed certificate.
fn tls_client(port: u16, cert: String) -> redis::Client {
    redis::Client::build_with_tls(
        format!("rediss://127.0.0.1:{port}/"),
        redis::TlsCertificates {
            client_tls: None,
            root_cert: Some(cert.into_bytes()),
        },
    )
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checks_over_tls_are_decided_exactly() {
    let (_server, port, cert, _dir) = tls_server();
    let client = tls_client(port, cert);
    let limiter = RedisTokenBucket::builder(Quota::per_hour(3).unwrap(), FailurePolicy::Closed)
        .prefix(fresh_prefix("tls"))
        .timeout(Duration::from_secs(5))
        .connect_client(client)
        .unwrap();
    for remaining in [2, 1, 0] {
        assert_eq!(
            limiter.acquire("k", 1).await.decision(),
            Some(Decision::Allowed { remaining })
        );
    }
    assert!(matches!(
        limiter.acquire("k", 1).await.decision(),
        Some(Decision::Denied { remaining: 0, .. })
    ));
    assert_eq!(limiter.peek("k").await.unwrap(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leased_limiter_over_tls_serves_from_its_leases_and_accounts_for_every_token() {
    let (_server, port, cert, _dir) = tls_server();
    let client = tls_client(port, cert);
    // 100 a day: no refill falls within the test (but for a chance of its duration
    // in 864 s).
    let quota = Quota::new(100, Duration::from_secs(864)).unwrap();
    let limiter = RedisLeasedTokenBucket::builder(quota, FailurePolicy::Closed)
        .prefix(fresh_prefix("tls-leased"))
        .timeout(Duration::from_secs(5))
        .max_lease(8)
        .connect_client(client)
        .unwrap();
    for _ in 0..40 {
        assert!(matches!(
            limiter.acquire("k", 1).await.decision(),
            Some(Decision::Allowed { .. })
        ));
    }
    // Wait out a fetch ahead of need, if one is in flight.
    while limiter.lease("k").is_some_and(|lease| lease.fetching) {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let counts = limiter.counts();
    assert!(counts.fetches < 40, "{counts:?}");
    let left = limiter.peek("k").await.unwrap();
    // Every token taken is admitted, held, or (on a machine slow enough to outlive a
    // lease) expired.
    let expired = u32::try_from(counts.expired).unwrap();
    assert_eq!(40 + limiter.held("k") + expired, 100 - left);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untrusted_certificate_is_refused_and_the_policy_answers() {
    let (_server, port, _cert, _dir) = tls_server();
    // The system's roots do not include the throwaway certificate.
    let limiter = RedisTokenBucket::builder(Quota::per_hour(3).unwrap(), FailurePolicy::Closed)
        .prefix(fresh_prefix("tls-untrusted"))
        .timeout(Duration::from_millis(500))
        .connect(format!("rediss://127.0.0.1:{port}/"))
        .unwrap();
    // Every check falls back by the policy; once the connection's round of attempts
    // is over, the check carries the certificate error itself (not a timeout).
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    loop {
        match limiter.acquire("k", 1).await {
            SharedDecision::Fallback {
                allowed: false,
                error: CheckError::Redis(error),
            } => {
                let error = error.to_string().to_lowercase();
                assert!(error.contains("certificate"), "{error}");
                break;
            }
            SharedDecision::Fallback { allowed: false, .. } => {
                assert!(std::time::Instant::now() < deadline, "never a TLS error");
            }
            other => panic!("an untrusted server decided: {other:?}"),
        }
    }
}

/// A temporary directory, removed on drop.
mod tempdir {
    pub struct Dir(std::path::PathBuf);

    impl Dir {
        pub fn new() -> Self {
            let path = std::env::temp_dir().join(format!(
                "turnstile-tls-{}-{}",
                std::process::id(),
                crate::fresh_prefix("dir").replace(':', "-")
            ));
            std::fs::create_dir_all(&path).unwrap();
            Self(path)
        }

        pub fn path(&self, name: &str) -> String {
            self.0.join(name).to_string_lossy().into_owned()
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}
