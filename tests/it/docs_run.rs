//! The documented commands that talk to a server, run as written: each `check=run:STACK`
//! block runs in `bash` against a fresh stack (the emulator, or cachet in front of it, with
//! the documented ports replaced by the stack's), and what each command prints must be the
//! output the block shows. Also the request log line of docs/src/operations/logs.md, held
//! to the line a real request logs.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use cachet::config::ClientKeyConfig;
use cachet::emulator::EmulatorHandle;
use cachet::server::ProxyHandle;

use crate::support::docs::{self, Block};
use crate::support::{start_emulator, start_proxy, test_config, wait_for_requests};

/// The environment variable the `proxy-keys` stack reads its one client key from.
const DOCS_KEY_ENV: &str = "CACHET_DOCS_TEST_KEY";

/// One step of a block: the shell text to run and the output the block shows for it
/// (`None` when it shows none: then the step must succeed, whatever it prints).
struct Step {
    script: String,
    expected: Option<Vec<String>>,
}

/// `console` blocks: `$ ` starts a command, `> ` continues it, other lines are its output.
/// `sh` blocks: the `# ` lines after commands are the output of the commands before them.
fn steps(block: &Block) -> Vec<Step> {
    let mut out: Vec<Step> = Vec::new();
    let console = block.lang == "console";
    // Whether the last command goes on (an open quote, `$(`, or a trailing backslash).
    let mut open = false;
    for line in block.text.lines() {
        if console {
            if let Some(cmd) = line.strip_prefix("$ ") {
                out.push(Step {
                    script: format!("{cmd}\n"),
                    expected: None,
                });
            } else if let Some(more) = line.strip_prefix("> ") {
                out.last_mut().expect("a command").script += &format!("{more}\n");
            } else {
                let step = out.last_mut().expect("output after a command");
                step.expected
                    .get_or_insert_with(Vec::new)
                    .push(line.to_string());
            }
        } else if let Some(shown) = line.strip_prefix("# ").filter(|_| !open) {
            if let Some(step) = out.last_mut() {
                step.expected
                    .get_or_insert_with(Vec::new)
                    .push(shown.to_string());
            }
        } else {
            match out.last_mut() {
                Some(step) if open => step.script += &format!("{line}\n"),
                _ => out.push(Step {
                    script: format!("{line}\n"),
                    expected: None,
                }),
            }
            open = !complete(&out.last().unwrap().script);
        }
    }
    out
}

/// Is `script` a whole command: no quote or `$(` left open, no trailing backslash?
fn complete(script: &str) -> bool {
    let (mut single, mut double, mut depth) = (false, false, 0i32);
    let mut chars = script.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if !single => {
                chars.next();
            }
            '\'' if !double => single = !single,
            '"' if !single => double = !double,
            '(' if !single => depth += 1,
            ')' if !single => depth -= 1,
            _ => {}
        }
    }
    !single && !double && depth <= 0 && !script.trim_end().ends_with('\\')
}

struct Stack {
    emulator: Option<EmulatorHandle>,
    proxy: Option<ProxyHandle>,
    dir: PathBuf,
}

impl Stack {
    async fn start(name: &str) -> Stack {
        let mut stack = Stack {
            emulator: None,
            proxy: None,
            dir: std::env::temp_dir(),
        };
        match name {
            "emulator" => stack.emulator = Some(start_emulator().await),
            "proxy" | "proxy-keys" => {
                let emu = start_emulator().await;
                let mut config = test_config(&emu.url());
                if name == "proxy-keys" {
                    std::env::set_var(DOCS_KEY_ENV, "docs-team-key");
                    config.server.client_keys = vec![ClientKeyConfig {
                        name: "team-a".into(),
                        key_env: DOCS_KEY_ENV.into(),
                    }];
                }
                let proxy = start_proxy(config).await;
                if name == "proxy" {
                    seed(&proxy).await;
                }
                stack.emulator = Some(emu);
                stack.proxy = Some(proxy);
            }
            folder => {
                stack.dir = docs::root().join(folder);
                assert!(stack.dir.is_dir(), "run:{folder}: no such folder");
            }
        }
        stack
    }

    /// The documented addresses, replaced by the stack's.
    fn localize(&self, text: &str) -> String {
        let mut text = text.to_string();
        if let Some(p) = &self.proxy {
            text = replace_port(&text, 8787, p.addr);
            text = replace_port(&text, 9787, p.admin_addr);
        }
        if let Some(e) = &self.emulator {
            text = replace_port(&text, 8790, e.addr);
        }
        text
    }

    async fn stop(self) {
        if let Some(p) = self.proxy {
            p.shutdown().await;
        }
        if let Some(e) = self.emulator {
            e.shutdown().await;
        }
    }
}

fn replace_port(text: &str, port: u16, addr: SocketAddr) -> String {
    text.replace(&format!("127.0.0.1:{port}"), &addr.to_string())
        .replace(&format!("localhost:{port}"), &addr.to_string())
}

/// The session the admin examples read: one request of `refactor-42`, its entry written.
async fn seed(proxy: &ProxyHandle) {
    let status = reqwest::Client::new()
        .post(format!("http://{}/v1/messages", proxy.addr))
        .header("x-api-key", "docs-test")
        .header("anthropic-version", "2023-06-01")
        .header("x-cachet-session", "refactor-42")
        .json(
            &serde_json::json!({"model": "claude-sonnet-4-5", "max_tokens": 16,
            "messages": [{"role": "user", "content": "hi"}]}),
        )
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(status, 200);
    wait_for_requests(proxy, "refactor-42", 1).await;
}

/// A folder with `cachet` in it, for the documented commands that name it.
fn bin_dir() -> PathBuf {
    let dir = tempfile::tempdir().unwrap().keep();
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_cachet"), dir.join("cachet")).unwrap();
    dir
}

/// Run the steps in one shell (assignments carry over) and return each one's output and
/// exit status.
fn run_steps(steps: &[Step], stack: &Stack, work: &Path) -> Vec<(String, i32)> {
    let mut script = String::new();
    for (i, step) in steps.iter().enumerate() {
        let body = stack.localize(&step.script);
        script += &format!(
            "{{\n{body}}} > {out} 2>&1\necho $? > {rc}\n",
            out = work.join(format!("out{i}")).display(),
            rc = work.join(format!("rc{i}")).display()
        );
    }
    let path = format!(
        "{}:{}",
        bin_dir().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let status = Command::new("bash")
        .arg("-c")
        .arg(&script)
        .current_dir(&stack.dir)
        .env("PATH", path)
        .env("ANTHROPIC_API_KEY", "docs-test")
        .env("OPENAI_API_KEY", "docs-test")
        .stdin(Stdio::null())
        .status()
        .expect("bash");
    assert!(status.success(), "the block's script failed to run");
    (0..steps.len())
        .map(|i| {
            let out = std::fs::read_to_string(work.join(format!("out{i}"))).unwrap();
            let rc = std::fs::read_to_string(work.join(format!("rc{i}"))).unwrap();
            (out, rc.trim().parse().unwrap())
        })
        .collect()
}

async fn check_block(block: &Block) -> Result<(), String> {
    let stack_name = block.check().and_then(|(_, a)| a).expect("check=run:STACK");
    let stack = Stack::start(stack_name).await;
    let steps = steps(block);
    let work = tempfile::tempdir().unwrap();
    let results = {
        let steps_ref = &steps;
        let stack_ref = &stack;
        let work_ref = work.path();
        // The servers run on this runtime while bash runs on a blocking thread.
        tokio::task::block_in_place(|| run_steps(steps_ref, stack_ref, work_ref))
    };
    stack.stop().await;
    let mut wrong = Vec::new();
    for (step, (out, rc)) in steps.iter().zip(results) {
        let command = step.script.lines().next().unwrap_or("");
        match &step.expected {
            None if rc != 0 => wrong.push(format!("`{command}` exited {rc}:\n{out}")),
            None => {}
            Some(expected) => {
                let lines: Vec<&str> = out.lines().map(str::trim_end).collect();
                let same = lines.len() == expected.len()
                    && expected
                        .iter()
                        .zip(&lines)
                        .all(|(e, a)| docs::line_matches(e.trim_end(), a));
                if !same {
                    wrong.push(format!(
                        "`{command}` printed\n{}\nwhere the block shows\n{}",
                        lines.join("\n"),
                        expected.join("\n")
                    ));
                }
            }
        }
    }
    match wrong.is_empty() {
        true => Ok(()),
        false => Err(format!("{}:\n{}", block.at(), wrong.join("\n"))),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn documented_commands_print_what_the_docs_show() {
    let blocks = docs::blocks_checked("run");
    assert!(blocks.len() >= 6, "{}", blocks.len());
    let mut failures = Vec::new();
    for b in &blocks {
        if let Err(e) = check_block(b).await {
            failures.push(e);
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n\n"));
}

/// The words of a log line that name its parts: the level, the span's name and field
/// names, the message, and the event's field names (values left out).
fn line_shape(line: &str) -> Vec<String> {
    let line = &line[line.find("INFO").expect("an INFO line")..];
    let (span, event) = line.split_once("}: ").expect("a span");
    let (level_name, fields) = span.split_once('{').unwrap();
    let mut shape: Vec<String> = level_name.split_whitespace().map(str::to_string).collect();
    shape.extend(
        fields
            .split(' ')
            .filter_map(|f| f.split_once('='))
            .map(|(k, _)| k.to_string()),
    );
    let (message, event_fields) = event.split_at(
        event
            .find('=')
            .map_or(event.len(), |eq| event[..eq].rfind(' ').unwrap_or(0)),
    );
    shape.push(message.trim().to_string());
    shape.extend(
        event_fields
            .split_whitespace()
            .filter_map(|f| f.split_once('='))
            .map(|(k, _)| k.to_string()),
    );
    shape
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_log_line_is_the_one_a_request_logs() {
    use std::io::BufRead;
    let blocks = docs::blocks_checked("log-line");
    assert_eq!(blocks.len(), 1);
    let documented = blocks[0].text.trim_end().to_string();
    let emu = start_emulator().await;
    let store = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_cachet"))
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--admin-listen",
            "127.0.0.1:0",
        ])
        .args(["--anthropic-upstream", &emu.url(), "--store"])
        .arg(store.path())
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    let addr = first
        .split("http://")
        .nth(1)
        .and_then(|s| s.split(' ').next())
        .expect("the listening line")
        .to_string();
    let status = reqwest::Client::new()
        .post(format!("http://{addr}/v1/messages"))
        .header("x-api-key", "docs-test")
        .header("anthropic-version", "2023-06-01")
        .header("x-cachet-session", "refactor-42")
        .json(
            &serde_json::json!({"model": "claude-sonnet-4-5", "max_tokens": 16,
            "messages": [{"role": "user", "content": "hi"}]}),
        )
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(status, 200);
    crate::support::terminate(&child);
    let stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    let line = stderr
        .lines()
        .map_while(Result::ok)
        .find(|l| l.contains("request done"))
        .expect("a `request done` line");
    child.wait().unwrap();
    emu.shutdown().await;
    assert_eq!(
        line_shape(&documented),
        line_shape(&line),
        "{}: the documented line\n{documented}\nand the logged one\n{line}",
        blocks[0].at()
    );
}
