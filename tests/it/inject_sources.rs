//! Memory sources against a real HTTP memory service on 127.0.0.1:0, and the per-turn glue.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use cachet::inject::{inject_for_turn, Injection, Mode, ModeChoice, Source, SourceSpec, TurnCache};
use cachet::patch::Op;

/// A one-route HTTP server answering every request with `status` and `body`; it counts
/// requests and keeps the last request body. `status` 0 never answers.
async fn memory_service(
    status: u16,
    body: &'static str,
) -> (String, Arc<AtomicU32>, Arc<std::sync::Mutex<String>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/recall", listener.local_addr().unwrap());
    let hits = Arc::new(AtomicU32::new(0));
    let last = Arc::new(std::sync::Mutex::new(String::new()));
    let (h, l) = (hits.clone(), last.clone());
    tokio::spawn(async move {
        loop {
            let Ok((mut sock, _)) = listener.accept().await else {
                return;
            };
            h.fetch_add(1, Ordering::SeqCst);
            let l = l.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                // Read the headers, then Content-Length bytes of body.
                loop {
                    let n = sock.read(&mut chunk).await.unwrap_or(0);
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    let text = String::from_utf8_lossy(&buf).to_string();
                    if let Some(end) = text.find("\r\n\r\n") {
                        let len = text[..end]
                            .lines()
                            .find_map(|line| {
                                line.to_ascii_lowercase()
                                    .strip_prefix("content-length:")
                                    .map(|v| v.trim().parse::<usize>().unwrap_or(0))
                            })
                            .unwrap_or(0);
                        if buf.len() >= end + 4 + len {
                            *l.lock().unwrap() = text[end + 4..].to_string();
                            break;
                        }
                    }
                }
                if status == 0 {
                    std::future::pending::<()>().await;
                }
                let reply = format!(
                    "HTTP/1.1 {status} X\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = sock.write_all(reply.as_bytes()).await;
            });
        }
    });
    (url, hits, last)
}

fn url_source(url: &str, timeout_ms: u64) -> Source {
    Source::new(SourceSpec::Url {
        url: url.to_string(),
        timeout_ms,
    })
}

#[tokio::test]
async fn memory_service_gets_prompt_and_session_and_may_answer_json_or_text() {
    let client = reqwest::Client::new();
    let (url, _, last) = memory_service(200, r#"{"text":"use sqlx migrate"}"#).await;
    let text = url_source(&url, 2000)
        .fetch("add a migration", "sess-1", &client)
        .await
        .unwrap();
    assert_eq!(text, "use sqlx migrate");
    let sent: serde_json::Value = serde_json::from_str(&last.lock().unwrap()).unwrap();
    assert_eq!(
        sent,
        serde_json::json!({"prompt": "add a migration", "session": "sess-1"})
    );
    let (url, _, _) = memory_service(200, "plain memory").await;
    assert_eq!(
        url_source(&url, 2000)
            .fetch("p", "s", &client)
            .await
            .unwrap(),
        "plain memory"
    );
}

#[tokio::test]
async fn failures_are_errors_not_panics() {
    let client = reqwest::Client::new();
    let (url, _, _) = memory_service(503, "down").await;
    let err = url_source(&url, 2000)
        .fetch("p", "s", &client)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("503"), "{err}");
    let (url, _, _) = memory_service(0, "").await;
    let err = url_source(&url, 100)
        .fetch("p", "s", &client)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("timed out"), "{err}");
    let err = url_source("http://127.0.0.1:1/x", 2000)
        .fetch("p", "s", &client)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("connection failed"), "{err}");
}

fn injection(id: &str, source: Source, choice: ModeChoice) -> Injection {
    Injection {
        id: id.into(),
        source,
        choice,
        part: "memory".into(),
    }
}

#[tokio::test]
async fn a_turn_fetches_once_and_a_failed_turn_injects_nothing() {
    let client = reqwest::Client::new();
    let cache = TurnCache::new(1000);
    let (url, hits, _) = memory_service(200, "remember this").await;
    let hook = ModeChoice::One(Mode::ContextHook);
    let inj = injection("p#0", url_source(&url, 2000), hook.clone());
    let first = inject_for_turn(&inj, "s1", "q1", &cache, &client).await;
    let second = inject_for_turn(&inj, "s1", "q1", &cache, &client).await;
    assert_eq!(
        hits.load(Ordering::SeqCst),
        1,
        "tool-loop calls reuse the turn's content"
    );
    assert!(first.first_call_of_turn && !second.first_call_of_turn);
    assert_eq!(first.placement, second.placement);
    match &first.placement.ops[0] {
        Op::MessagesInsert { at, messages, .. } => {
            assert_eq!(*at, cachet::patch::Selector::BeforeLastUserPrompt);
            assert_eq!(messages[0]["content"], "<memory>\nremember this\n</memory>");
        }
        other => panic!("unexpected op {other:?}"),
    }
    inject_for_turn(&inj, "s1", "q2", &cache, &client).await;
    assert_eq!(hits.load(Ordering::SeqCst), 2, "a new prompt fetches again");

    let (down, _, _) = memory_service(500, "").await;
    let failing = injection("p#1", url_source(&down, 2000), hook);
    let a = inject_for_turn(&failing, "s1", "q1", &cache, &client).await;
    let b = inject_for_turn(&failing, "s1", "q1", &cache, &client).await;
    assert!(a.placement.ops.is_empty() && b.placement.ops.is_empty());
    assert!(a.new_error.is_some(), "the failure is reported once…");
    assert!(b.new_error.is_none(), "…not on every call of the turn");
}

#[tokio::test]
async fn ab_choice_reports_the_arm() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.md");
    std::fs::write(&path, "fact").unwrap();
    let arms = vec![(Mode::SystemPrompt, 1), (Mode::Pinned, 1)];
    let inj = injection(
        "p#0",
        Source::new(SourceSpec::File(path)),
        ModeChoice::Ab(arms.clone()),
    );
    let cache = TurnCache::new(100);
    let client = reqwest::Client::new();
    for n in 0..10 {
        let session = format!("s{n}");
        let got = inject_for_turn(&inj, &session, "q", &cache, &client).await;
        assert_eq!(got.mode, cachet::inject::choose_arm(&session, &arms));
        assert_eq!(got.placement.persisted, got.mode == Some(Mode::Pinned));
    }
}

/// A prompt of `filler` bytes of pasted log between a question at its start and one at its
/// end, with `middle` somewhere in the log.
fn long_prompt(filler: usize, middle: &str) -> String {
    let line = "2026-11-28T04:00:00Z INFO worker 7 finished job in 12 ms (é)\n";
    let half = line.repeat(filler / line.len() / 2);
    format!("why does build fail?\n{half}{middle}\n{half}please fix linker flags")
}

#[tokio::test]
async fn a_memory_service_is_asked_about_a_long_prompt_by_its_head_and_tail() {
    let client = reqwest::Client::new();
    let (url, _, last) = memory_service(200, "noted").await;
    let prompt = long_prompt(4 << 20, "kubernetes");
    url_source(&url, 5000)
        .fetch(&prompt, "sess-1", &client)
        .await
        .unwrap();
    let sent: serde_json::Value = serde_json::from_str(&last.lock().unwrap()).unwrap();
    let asked = sent["prompt"].as_str().unwrap();
    assert!(
        asked.len() <= cachet::inject::QUERY_MAX_BYTES + 8,
        "{}",
        asked.len()
    );
    assert!(asked.starts_with("why does build fail?\n"), "{asked:.60}");
    assert!(asked.ends_with("please fix linker flags"));
    assert!(!asked.contains("kubernetes"));
    // A prompt within the bound goes whole.
    let short = long_prompt(4000, "kubernetes");
    url_source(&url, 5000)
        .fetch(&short, "sess-1", &client)
        .await
        .unwrap();
    let sent: serde_json::Value = serde_json::from_str(&last.lock().unwrap()).unwrap();
    assert_eq!(sent["prompt"].as_str(), Some(short.as_str()));
}

#[test]
fn notes_are_ranked_against_a_long_prompt_by_its_head_and_tail() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("ops.md"),
        "# Linker\nthe linker flags live in .cargo/config.toml\n\n# Kubernetes\nthe kubernetes manifests are generated\n",
    )
    .unwrap();
    let source = Source::new(SourceSpec::Notes {
        dir: dir.path().to_path_buf(),
        top_k: 3,
    });
    // The question at the prompt's end still finds its note.
    let text = source.fetch_local(&long_prompt(4 << 20, "")).unwrap();
    assert!(text.contains("linker flags live"), "{text}");
    // A word deep inside the pasted log is not part of the query.
    let text = source
        .fetch_local(&long_prompt(4 << 20, "kubernetes manifests generated"))
        .unwrap();
    assert!(!text.contains("kubernetes"), "{text}");
    // Within the bound, every word counts.
    let text = source
        .fetch_local(&long_prompt(2000, "kubernetes manifests generated"))
        .unwrap();
    assert!(text.contains("kubernetes manifests"), "{text}");
}
