//! A real Prometheus (Debian's `prometheus` package; scripts/test.sh installs it) scraping
//! one target every second, on a free loopback port with its data in a temporary folder.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

pub struct Prometheus {
    child: Child,
    pub url: String,
    _dir: tempfile::TempDir,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Prometheus {
    /// Start scraping `target` (`host:port` serving `/metrics`) and wait until it is up.
    pub async fn start(target: &str) -> Prometheus {
        let found = Command::new("prometheus")
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        assert!(
            found,
            "prometheus not found: install Debian's `prometheus` package (scripts/test.sh does)"
        );
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: cachet\n    static_configs:\n      - targets: [\"{target}\"]\n"
            ),
        )
        .unwrap();
        let listen = format!("127.0.0.1:{}", free_port());
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address={listen}"))
            .arg("--log.level=warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let prometheus = Prometheus {
            child,
            url: format!("http://{listen}"),
            _dir: dir,
        };
        prometheus
            .wait_for("up{job=\"cachet\"} == 1", |v| !v.is_empty())
            .await;
        prometheus
    }

    /// Evaluate `expr` now: the `data` object of the answer, or the error Prometheus gave.
    pub async fn query(&self, expr: &str) -> Result<Value, String> {
        let resp = reqwest::Client::new()
            .get(format!("{}/api/v1/query", self.url))
            .query(&[("query", expr)])
            .send()
            .await
            .map_err(|e| e.to_string())?;
        let body: Value = resp.json().await.map_err(|e| e.to_string())?;
        if body["status"] != "success" {
            return Err(format!("{}: {}", body["errorType"], body["error"]));
        }
        Ok(body["data"].clone())
    }

    /// A GET on the HTTP API (`/api/v1/...`), its `data`.
    pub async fn api(&self, path: &str, query: &[(&str, &str)]) -> Value {
        let body: Value = reqwest::Client::new()
            .get(format!("{}{path}", self.url))
            .query(query)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(body["status"], "success", "{path}: {body}");
        body["data"].clone()
    }

    /// Poll (a scrape a second) until the result of `expr` satisfies `done`.
    pub async fn wait_for(&self, expr: &str, done: impl Fn(&[Value]) -> bool) {
        // Prometheus takes a moment to start; then each scrape is a second apart.
        for _ in 0..300 {
            if let Ok(data) = self.query(expr).await {
                if done(data["result"].as_array().map_or(&[], |v| v.as_slice())) {
                    return;
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("Prometheus never saw `{expr}` as expected");
    }
}
