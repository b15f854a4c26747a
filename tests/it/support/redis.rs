//! A real `redis-server` on a free port for the shared-store tests (fails without it).

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

/// A `redis-server` on a free port, stopped on drop.
pub struct RedisServer {
    child: Child,
    pub port: u16,
}

impl RedisServer {
    pub fn start() -> RedisServer {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        Self::start_on(port)
    }

    /// A server on a given (free) port.
    pub fn start_on(port: u16) -> RedisServer {
        Self::spawn(&["--port", &port.to_string()], port)
    }

    /// A server with these arguments (listening on `port`).
    pub fn spawn(args: &[&str], port: u16) -> RedisServer {
        let mut child = Command::new("redis-server")
            .args(args)
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server must be installed (apt-get install -y redis-server)");
        let stdout = child.stdout.take().unwrap();
        let mut lines = BufReader::new(stdout).lines();
        let ready = lines
            .by_ref()
            .map_while(Result::ok)
            .any(|line| line.contains("Ready to accept connections"));
        assert!(ready, "redis-server did not start");
        // Keep draining its output so it never blocks on a full pipe.
        std::thread::spawn(move || lines.for_each(drop));
        RedisServer { child, port }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A `redis-server` that speaks only TLS, with a certificate for 127.0.0.1 issued by a
/// fresh CA; `ca_file` is that CA's PEM, for the client to trust.
pub struct TlsRedisServer {
    pub server: RedisServer,
    pub ca_file: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl TlsRedisServer {
    pub fn start() -> TlsRedisServer {
        let dir = tempfile::tempdir().unwrap();
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let ca = ca_params.self_signed(&ca_key).unwrap();
        let server_key = rcgen::KeyPair::generate().unwrap();
        let server_cert = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()])
            .unwrap()
            .signed_by(&server_key, &ca, &ca_key)
            .unwrap();
        let write = |name: &str, text: String| {
            let path = dir.path().join(name);
            std::fs::write(&path, text).unwrap();
            path
        };
        let ca_file = write("ca.pem", ca.pem());
        let cert = write("server.pem", server_cert.pem());
        let key = write("server.key", server_key.serialize_pem());
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let server = RedisServer::spawn(
            &[
                "--port",
                "0",
                "--tls-port",
                &port.to_string(),
                "--tls-cert-file",
                cert.to_str().unwrap(),
                "--tls-key-file",
                key.to_str().unwrap(),
                "--tls-ca-cert-file",
                ca_file.to_str().unwrap(),
                "--tls-auth-clients",
                "no",
            ],
            port,
        );
        TlsRedisServer {
            server,
            ca_file,
            _dir: dir,
        }
    }

    pub fn url(&self) -> String {
        format!("rediss://127.0.0.1:{}/0", self.server.port)
    }
}
