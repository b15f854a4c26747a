//! Storage growth and replay cost of a 500-request session in the embedded store.
//!
//! Each request sends the whole history so far (growing by an assistant turn and a user
//! message of about 1 KB each), and every 25th request persists a note anchored at its
//! history. Per request it measures the replay work the proxy does before forwarding:
//! loading the log (through the cache), hashing the client history's prefixes and planning
//! the replay; and the cost of recording the request afterwards.
//!
//! Run: `cargo run --release --example session_growth`

use std::time::{Duration, Instant};

use cachet::patch::ops::Op;
use cachet::session::{
    now_ms, open_store, record_request, Anchor, ContextTransform, Entry, PrefixHashes,
    RequestDraft, ENTRY_VERSION,
};
use serde_json::{json, Value};

const REQUESTS: usize = 500;
const NOTE_EVERY: usize = 25;

fn message(i: usize) -> Value {
    let filler = "fn example() { let x = compute(); assert!(x.is_ok()); }\n".repeat(18);
    if i.is_multiple_of(2) {
        json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": format!("toolu_{i}"), "content": format!("{i}\n{filler}")}
        ]})
    } else {
        json!({"role": "assistant", "content": [
            {"type": "text", "text": format!("Step {i}: reading the next file.")},
            {"type": "tool_use", "id": format!("toolu_{}", i + 1), "name": "read", "input": {"path": format!("src/file_{i}.rs")}}
        ]})
    }
}

fn note(history: &[Value], index: u64) -> Entry {
    Entry::ContextTransform(ContextTransform {
        version: ENTRY_VERSION,
        time: now_ms(),
        transformer: "notes".into(),
        reason: "turn_end".into(),
        anchor: Anchor::of(history),
        patch: vec![Op::MessagesInsert {
            at: cachet::patch::Selector::End,
            messages: vec![
                json!({"role": "user", "content": format!("note from request {index}")}),
            ],
            invalidate_cache_reason: Some("session note".into()),
        }],
        display: None,
        request_index: Some(index),
    })
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn summary(name: &str, mut times: Vec<Duration>) {
    times.sort();
    println!(
        "{name:<28} median {:>9.1?}  p95 {:>9.1?}  max {:>9.1?}",
        percentile(&times, 0.5),
        percentile(&times, 0.95),
        percentile(&times, 1.0)
    );
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let store = open_store(dir.path().to_str().unwrap_or(".")).await?;
    let system = json!([{"type": "text", "text": "You are a coding agent. ".repeat(200)}]);
    let tools =
        json!([{"name": "read", "description": "Read a file", "input_schema": {"type": "object"}}]);
    let full: Vec<Value> = (0..2 * REQUESTS).map(message).collect();

    let (mut plan_times, mut record_times, mut late_plan_times) =
        (Vec::new(), Vec::new(), Vec::new());
    let mut naive_bytes = 0u64;
    let mut applied_last = 0usize;
    for i in 0..REQUESTS {
        let sent = &full[..2 * i + 1];
        naive_bytes += serde_json::to_vec(sent)?.len() as u64;

        let start = Instant::now();
        let log = store.load("bench").await?;
        let hashes = PrefixHashes::new(sent);
        let plan = log.replay_plan(&hashes);
        let planned = start.elapsed();
        plan_times.push(planned);
        if i >= REQUESTS - 50 {
            late_plan_times.push(planned);
        }
        applied_last = plan.apply.len();

        let index = store.next_request_index("bench").await?;
        if i.is_multiple_of(NOTE_EVERY) {
            store.append("bench", &[note(sent, index)]).await?;
        }
        let start = Instant::now();
        let req = cachet::measure::SentRequest::from_json(
            cachet::route::Endpoint::Messages,
            &serde_json::json!({"model": "claude-sonnet-4-5", "system": system, "tools": tools, "messages": sent}),
            0,
        )?;
        let history = req.history();
        let draft = RequestDraft {
            request_index: index,
            turn_index: Some(i as u64),
            time_ms: cachet::session::now_ms(),
            provider: "anthropic",
            endpoint: "messages",
            client: Some("pi"),
            shape: &req.shape,
            history: &history,
            hashes: None,
            usage: None,
            status: Some(200),
            outcome: None,
            lane: 0,
            conversation: Default::default(),
            diagnosis: None,
            patches: Vec::new(),
            variant: None,
            response_id: None,
            conversation_id: None,
        };
        let log = store.load("bench").await?;
        record_request(store.as_ref(), "bench", &log, &draft).await?;
        record_times.push(start.elapsed());
    }

    let stats = store.stats().await?;
    let on_disk = files_size(dir.path())?;
    println!("requests                     {REQUESTS}");
    println!("messages in final history    {}", 2 * REQUESTS - 1);
    println!(
        "persisted patches            {}",
        REQUESTS.div_ceil(NOTE_EVERY)
    );
    println!("patches applied on last req  {applied_last}");
    println!("full histories, sum of bytes {naive_bytes}");
    println!(
        "blobs stored                 {} ({} bytes)",
        stats.blobs, stats.blob_bytes
    );
    println!(
        "log entries                  {} ({} bytes)",
        stats.entries, stats.entry_bytes
    );
    println!("database files on disk       {on_disk} bytes");
    // Closing checkpoints the write-ahead log into the database file: what stays on disk.
    store.close().await;
    let closed = files_size(dir.path())?;
    println!("database files once closed   {closed} bytes");
    summary("replay planning, all", plan_times);
    summary("replay planning, last 50", late_plan_times);
    summary("recording (fsync included)", record_times);
    Ok(())
}

/// What the store's files take on disk.
fn files_size(dir: &std::path::Path) -> std::io::Result<u64> {
    Ok(std::fs::read_dir(dir)?
        .filter_map(Result::ok)
        .filter_map(|e| e.metadata().ok())
        .map(|m| m.len())
        .sum())
}
