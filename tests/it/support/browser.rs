//! Headless Chromium (Debian's `chromium`) driven over the DevTools protocol on a pipe
//! (`--remote-debugging-pipe`): commands go in on the child's fd 3, answers and events come
//! out on its fd 4, each message a JSON text ending in a NUL byte. One browser serves a
//! whole test: open a page, evaluate JavaScript in it, take a screenshot.
//!
//! Blocking: call it from `tokio::task::block_in_place` in a multi-threaded test runtime,
//! so the proxy under test keeps running on the other workers.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::Duration;

use base64::Engine;
use serde_json::{json, Value};

/// Longest wait for one answer: a hung browser fails the test instead of stalling it.
const ANSWER_WITHIN: Duration = Duration::from_secs(30);

pub struct Browser {
    child: Child,
    to_browser: std::io::PipeWriter,
    from_browser: Receiver<Value>,
    /// Events that arrived while waiting for an answer.
    pending: VecDeque<Value>,
    session: String,
    next_id: u64,
    _profile: tempfile::TempDir,
}

/// Where Debian's `chromium` is, or a failure that says how to get it: the browser tests
/// must not pass without a browser.
fn chromium() -> PathBuf {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|paths| std::env::split_paths(&paths).collect::<Vec<_>>())
        .map(|dir| dir.join("chromium"))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!(
                "Debian's `chromium` is not installed: the browser tests need it \
                 (./scripts/test.sh installs it; or apt-get install chromium)"
            )
        })
}

impl Browser {
    /// A fresh browser (empty profile) with a `width` × `height` window.
    pub fn launch(width: u32, height: u32) -> Browser {
        let (cmd_read, cmd_write) = std::io::pipe().unwrap();
        let (out_read, out_write) = std::io::pipe().unwrap();
        let profile = tempfile::tempdir().unwrap();
        let mut cmd = Command::new(chromium());
        // The flags a closed network needs: no background connections, no updates.
        cmd.args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--remote-debugging-pipe",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg(format!("--window-size={width},{height}"))
        .arg("about:blank")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
        let (r, w) = (cmd_read.as_raw_fd(), out_write.as_raw_fd());
        // SAFETY: between fork and exec the child only duplicates file descriptors
        // (fcntl and dup2 are async-signal-safe). Both ends are first moved above 10 so
        // that placing one on 3 cannot close the other.
        unsafe {
            cmd.pre_exec(move || {
                let r = libc::fcntl(r, libc::F_DUPFD, 10);
                let w = libc::fcntl(w, libc::F_DUPFD, 10);
                if r < 0 || w < 0 || libc::dup2(r, 3) < 0 || libc::dup2(w, 4) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd.spawn().expect("chromium starts");
        drop((cmd_read, out_write));
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut reader = BufReader::new(out_read);
            let mut message = Vec::new();
            while reader.read_until(0, &mut message).unwrap_or(0) > 0 {
                if message.last() == Some(&0) {
                    message.pop();
                }
                if let Ok(v) = serde_json::from_slice::<Value>(&message) {
                    if tx.send(v).is_err() {
                        return;
                    }
                }
                message.clear();
            }
        });
        let mut browser = Browser {
            child,
            to_browser: cmd_write,
            from_browser: rx,
            pending: VecDeque::new(),
            session: String::new(),
            next_id: 0,
            _profile: profile,
        };
        let target = browser.call("Target.createTarget", json!({"url": "about:blank"}));
        let attached = browser.call(
            "Target.attachToTarget",
            json!({"targetId": target["targetId"], "flatten": true}),
        );
        browser.session = attached["sessionId"].as_str().unwrap().to_owned();
        browser.page_call("Page.enable", json!({}));
        browser
    }

    fn send(&mut self, method: &str, params: Value, session: Option<&str>) -> u64 {
        self.next_id += 1;
        let mut message = json!({"id": self.next_id, "method": method, "params": params});
        if let Some(s) = session {
            message["sessionId"] = json!(s);
        }
        let mut bytes = serde_json::to_vec(&message).unwrap();
        bytes.push(0);
        self.to_browser.write_all(&bytes).unwrap();
        self.next_id
    }

    fn receive(&mut self, what: &str) -> Value {
        self.from_browser
            .recv_timeout(ANSWER_WITHIN)
            .unwrap_or_else(|e| panic!("chromium did not answer {what}: {e}"))
    }

    fn wait_answer(&mut self, id: u64, method: &str) -> Value {
        loop {
            let message = self.receive(method);
            if message["id"] == id {
                if let Some(error) = message.get("error") {
                    panic!("{method} failed: {error}");
                }
                return message["result"].clone();
            }
            self.pending.push_back(message);
        }
    }

    /// A browser-level command.
    pub fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.send(method, params, None);
        self.wait_answer(id, method)
    }

    /// A command to the page.
    pub fn page_call(&mut self, method: &str, params: Value) -> Value {
        let session = self.session.clone();
        let id = self.send(method, params, Some(&session));
        self.wait_answer(id, method)
    }

    fn wait_event(&mut self, method: &str) -> Value {
        if let Some(at) = self.pending.iter().position(|m| m["method"] == method) {
            return self.pending.remove(at).unwrap_or_default();
        }
        loop {
            let message = self.receive(method);
            if message["method"] == method {
                return message;
            }
            self.pending.push_back(message);
        }
    }

    /// Navigate to `url` (a real navigation: the browser's own `Accept` header) and wait
    /// until the page has loaded.
    pub fn open(&mut self, url: &str) {
        self.pending
            .retain(|m| m["method"] != "Page.loadEventFired");
        let result = self.page_call("Page.navigate", json!({"url": url}));
        if let Some(error) = result.get("errorText") {
            panic!("navigating to {url} failed: {error}");
        }
        self.wait_event("Page.loadEventFired");
    }

    /// Click the element `selector` names (a link) and wait until the page it opens has
    /// loaded.
    pub fn follow(&mut self, selector: &str) {
        self.pending
            .retain(|m| m["method"] != "Page.loadEventFired");
        let clicked = self.eval(&format!(
            "(() => {{ const a = document.querySelector({}); if (a) a.click(); return !!a; }})()",
            json!(selector)
        ));
        assert_eq!(clicked, json!(true), "nothing to click at {selector}");
        self.wait_event("Page.loadEventFired");
    }

    /// The value of a JavaScript expression in the page (a promise is awaited).
    pub fn eval(&mut self, expression: &str) -> Value {
        let result = self.page_call(
            "Runtime.evaluate",
            json!({"expression": expression, "returnByValue": true, "awaitPromise": true}),
        );
        if let Some(exception) = result.get("exceptionDetails") {
            panic!("JavaScript failed: {exception}\n{expression}");
        }
        result["result"]["value"].clone()
    }

    /// Resize the window (the page lays itself out again).
    pub fn resize(&mut self, width: u32, height: u32) {
        self.page_call(
            "Emulation.setDeviceMetricsOverride",
            json!({"width": width, "height": height, "deviceScaleFactor": 1, "mobile": false}),
        );
    }

    /// Save a PNG of the window at `path`.
    pub fn screenshot(&mut self, path: &Path) {
        let shot = self.page_call("Page.captureScreenshot", json!({"format": "png"}));
        let png = base64::engine::general_purpose::STANDARD
            .decode(shot["data"].as_str().unwrap_or_default())
            .unwrap();
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).unwrap();
        }
        std::fs::write(path, png).unwrap();
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
