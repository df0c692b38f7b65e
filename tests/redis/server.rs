//! A real `redis-server` for one test (or one benchmark run): started from PATH on a
//! free loopback port with persistence off, killed when dropped. Shared by the Redis
//! tests and `benches/redis.rs`.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a starting server may take to answer `PING`.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// A loopback port that was free a moment ago.
pub fn free_loopback_port() -> u16 {
    free_port()
}

/// A running `redis-server` child process; killed on drop.
pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    /// The arguments beyond the defaults, for a restart.
    extra: Vec<String>,
}

impl RedisServer {
    /// Whether `redis-server` can be run from PATH.
    pub fn available() -> bool {
        Command::new("redis-server")
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|status| status.success())
    }

    /// A server on a free loopback port. Panics with instructions when `redis-server`
    /// is not on PATH: these tests exist to run against a real server, never to skip.
    pub fn start() -> Self {
        assert!(
            Self::available(),
            "redis-server is not on PATH; `bash .ci/test` installs it (Debian: \
             apt-get install redis-server)"
        );
        // A port found free can be taken before the server binds it; try a few.
        let mut last_error = None;
        for _ in 0..5 {
            let port = free_port();
            match Self::start_on(port) {
                Ok(server) => return server,
                Err(error) => last_error = Some(error),
            }
        }
        panic!("redis-server did not start: {last_error:?}");
    }

    /// A server on `port`, answering `PING`, or why not.
    pub fn start_on(port: u16) -> Result<Self, String> {
        Self::start_with(port, &[])
    }

    /// A server on a free loopback port with `extra` arguments (say, a TLS port
    /// besides the plain one, which answers the readiness `PING`).
    pub fn start_with_args(extra: &[String]) -> Self {
        let mut last_error = None;
        for _ in 0..5 {
            match Self::start_with(free_port(), extra) {
                Ok(server) => return server,
                Err(error) => last_error = Some(error),
            }
        }
        panic!("redis-server did not start: {last_error:?}");
    }

    /// A server on `port` with `extra` arguments, answering `PING`, or why not.
    fn start_with(port: u16, extra: &[String]) -> Result<Self, String> {
        let mut child = Command::new("redis-server")
            .args(["--port", &port.to_string()])
            .args(["--bind", "127.0.0.1"])
            .args(["--save", ""])
            .args(["--appendonly", "no"])
            .args(["--daemonize", "no"])
            .args(["--dir", &std::env::temp_dir().to_string_lossy()])
            // Last, so they override the defaults above.
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|error| format!("cannot run redis-server: {error}"))?;
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if ping(port) {
                return Ok(Self {
                    child: Some(child),
                    port,
                    extra: extra.to_vec(),
                });
            }
            if let Ok(Some(status)) = child.try_wait() {
                return Err(format!("redis-server on port {port} exited: {status}"));
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("redis-server on port {port} never answered PING"));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The server's port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The URL to connect to.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// A client for this server.
    pub fn client(&self) -> redis::Client {
        redis::Client::open(self.url()).expect("a valid URL")
    }

    /// Kills the server (SIGKILL: no goodbye to its clients) and waits for it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same port and with the same arguments, after
    /// [`RedisServer::kill`].
    pub fn restart(&mut self) {
        self.restart_within(START_TIMEOUT);
    }

    /// [`RedisServer::restart`], waiting up to `limit` for the server to answer (one
    /// that loads a large append-only file takes longer than a test's server).
    pub fn restart_within(&mut self, limit: Duration) {
        self.kill();
        let deadline = Instant::now() + limit;
        loop {
            match Self::start_with(self.port, &self.extra) {
                Ok(mut server) => {
                    self.child = server.child.take();
                    return;
                }
                Err(error) if Instant::now() > deadline => {
                    panic!("redis-server did not restart: {error}")
                }
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }

    /// The server process's id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|child| child.id())
    }

    /// Freezes the server (SIGSTOP): connections stay open, nothing is answered.
    pub fn pause(&self) {
        self.signal("-STOP");
    }

    /// Thaws a frozen server (SIGCONT).
    pub fn resume(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, signal: &str) {
        let child = self.child.as_ref().expect("the server is running");
        let status = Command::new("kill")
            .args([signal, &child.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success(), "kill {signal} failed");
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        // A paused server still dies of SIGKILL.
        self.kill();
    }
}

/// A loopback port nobody listened on a moment ago.
fn free_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .expect("a free loopback port")
}

/// Whether a server on `port` answers `PING` with `+PONG`.
pub fn ping(port: u16) -> bool {
    let attempt = || -> std::io::Result<bool> {
        let mut stream = TcpStream::connect((Ipv4Addr::LOCALHOST, port))?;
        stream.set_read_timeout(Some(Duration::from_secs(1)))?;
        stream.write_all(b"PING\r\n")?;
        let mut reply = [0u8; 7];
        stream.read_exact(&mut reply)?;
        Ok(&reply == b"+PONG\r\n")
    };
    attempt().unwrap_or(false)
}
