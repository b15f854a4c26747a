//! The Python hook server printed in the book (docs/src/hooks.md), run as written, answers the way
//! the hook client expects. Needs `python3` on PATH.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::json;

use cachet::hooks::{HookClient, HookOutcome};
use cachet::policy::{ContextReason, HookEvent, HookSpec, OnError};
use cachet::route::{Endpoint, Provider};

/// Kills the server when the test ends, pass or fail.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn python_example() -> String {
    let doc = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("docs/src/hooks.md");
    let text = std::fs::read_to_string(doc).unwrap();
    let fence = text.find("```python").expect("a python block");
    let start = fence + text[fence..].find('\n').unwrap() + 1;
    let end = start + text[start..].find("```").unwrap();
    text[start..end].to_string()
}

#[tokio::test]
async fn documented_python_hook_server_works() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("hook.py");
    std::fs::write(&script, python_example()).unwrap();
    let mut child = Command::new("python3")
        .arg(&script)
        .arg("0")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("python3 must be installed");
    let stdout = child.stdout.take().unwrap();
    let server = Server(child);
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).unwrap();
    let url = line
        .trim()
        .strip_prefix("hook server on ")
        .unwrap_or_else(|| panic!("unexpected first line: {line}"));

    let hook = HookSpec {
        name: "reminder#0".into(),
        url: reqwest::Url::parse(url).unwrap(),
        events: HookEvent::ALL.to_vec(),
        timeout: Duration::from_secs(10),
        on_error: OnError::Continue,
    };
    let client = HookClient::new().unwrap();
    let call = client
        .call_context(
            &hook,
            ContextReason::Ephemeral,
            br#"{"system": {}}"#,
            None,
            None,
        )
        .await;
    let HookOutcome::Patch(result) = call.outcome else {
        panic!("expected a patch, got {:?}", call.outcome)
    };
    assert_eq!(result.transformer_name.as_deref(), Some("reminder"));
    assert_eq!(
        serde_json::to_value(&result.patch).unwrap(),
        json!([{"op": "messages_uncached_append",
            "messages": [{"role": "user", "content": "Reminder: run the tests."}]}])
    );
    assert!(result.patch.iter().all(|op| op.check_reason().is_ok()));

    let call = client
        .call_before_provider_request(&hook, Provider::Anthropic, Endpoint::Messages, b"{}")
        .await;
    assert_eq!(call.outcome, HookOutcome::NoChange);
    drop(server);
}
