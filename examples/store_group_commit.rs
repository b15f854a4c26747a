//! Group commit in the embedded store: persisted patches from many sessions at once, each
//! durable (synced) before its caller goes on, against the same appends made one after the
//! other. With one fsync per batch, the concurrent run takes a fraction of the sequential
//! one; the ratio is what BENCHMARKS.md reports.
//!
//! `cargo run --release --example store_group_commit [APPENDS] [SESSIONS]`

use std::sync::Arc;
use std::time::Instant;

use cachet::patch::ops::Op;
use cachet::session::{
    now_ms, Anchor, ContextTransform, Entry, SessionStore, SqliteStore, ENTRY_VERSION,
};
use serde_json::json;

fn patch(i: usize) -> Entry {
    Entry::ContextTransform(ContextTransform {
        version: ENTRY_VERSION,
        time: now_ms(),
        transformer: "memory".into(),
        reason: "before_request".into(),
        anchor: Anchor::of(&[json!({"role": "user", "content": format!("prompt {i}")})]),
        patch: vec![Op::SystemPartSet {
            part_name: "memory".into(),
            text: format!("remembered fact {i}"),
            before: None,
            after: None,
            invalidate_cache_reason: Some("memory".into()),
        }],
        display: None,
        request_index: Some(i as u64),
    })
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let appends: usize = args.next().map_or(Ok(2000), |a| a.parse())?;
    let sessions: usize = args.next().map_or(Ok(64), |a| a.parse())?;
    // On the disk the target folder is on: a tmpfs would make every fsync free.
    let dir = tempfile::tempdir_in(std::env::current_dir()?)?;

    let store = SqliteStore::open(&dir.path().join("seq.sqlite3")).await?;
    let start = Instant::now();
    for i in 0..appends {
        store
            .append(&format!("s{}", i % sessions), &[patch(i)])
            .await?;
    }
    let sequential = start.elapsed();
    store.close().await;

    let store = Arc::new(SqliteStore::open(&dir.path().join("group.sqlite3")).await?);
    let start = Instant::now();
    let tasks: Vec<_> = (0..sessions)
        .map(|s| {
            let store = store.clone();
            tokio::spawn(async move {
                for i in (s..appends).step_by(sessions) {
                    store.append(&format!("s{s}"), &[patch(i)]).await?;
                }
                anyhow::Ok(())
            })
        })
        .collect();
    for task in tasks {
        task.await??;
    }
    let concurrent = start.elapsed();
    let fsyncs = store.synced_commits();
    store.close().await;

    let per = |d: std::time::Duration| d.as_secs_f64() * 1e6 / appends as f64;
    println!("{appends} synced appends, {sessions} sessions");
    println!(
        "one at a time:            {:>8.1} µs per append",
        per(sequential)
    );
    println!(
        "{sessions} sessions at once:  {:>8.1} µs per append",
        per(concurrent)
    );
    println!(
        "ratio: {:.1}x the appends per second; {:.1} appends per fsync at once",
        sequential.as_secs_f64() / concurrent.as_secs_f64(),
        appends as f64 / fsyncs.max(1) as f64
    );
    Ok(())
}
