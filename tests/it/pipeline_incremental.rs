//! `server.incremental` changes how much of a body cachet reads, never what it does: on a
//! generated session of each real client's shape (extend, fork, truncate, edit, marker
//! moves, a reformatted body, a broken one), with every shipped policy and with none
//! (monitoring, or only the body check), cachet reading incrementally forwards the same
//! bytes, answers the same statuses, and writes the same session log (diagnosis included)
//! as cachet reading every body whole.

use std::path::PathBuf;

use bytes::Bytes;
use cachet::route::Endpoint;
use serde_json::Value;

use crate::support::sessions::{fixture, session, step, Step, CLIENTS};
use crate::support::*;

const POLICIES: &[&str] = &[
    "anthropic-auto-breakpoints",
    "stabilize-volatile",
    "memory-pinned",
    "openai-cache-key",
];

fn steps() -> Vec<Step> {
    use Step::*;
    vec![
        Extend(1),
        Extend(1),
        Extend(2),
        MoveMarker,
        Extend(1),
        Fork(2),
        Extend(1),
        Truncate(1),
        Extend(1),
        Edit(1),
        Extend(1),
        Reformat,
        Extend(1),
        Corrupt(9),
        Extend(2),
    ]
}

fn path(endpoint: Endpoint) -> &'static str {
    match endpoint {
        Endpoint::Chat => "/v1/chat/completions",
        Endpoint::Responses => "/v1/responses",
        _ => "/v1/messages",
    }
}

/// What one run produced: per request the status and the bytes the upstream received (or
/// its cache accounting, against the emulator), the session log without its clock times,
/// and how many bodies were read incrementally.
#[derive(Debug, PartialEq)]
struct Run {
    statuses: Vec<u16>,
    forwarded: Vec<Bytes>,
    accounted: Vec<String>,
    log: Value,
    incremental_reads: u64,
}

fn without_times(v: &mut Value) {
    match v {
        Value::Object(map) => {
            map.remove("time");
            map.remove("sent_ms");
            map.values_mut().for_each(without_times);
        }
        Value::Array(items) => items.iter_mut().for_each(without_times),
        _ => {}
    }
}

async fn run(
    which: usize,
    steps: &[Step],
    policies: &[&str],
    (incremental, check_body, monitor): (bool, bool, bool),
    emulated: bool,
) -> Run {
    let (name, _, endpoint) = CLIENTS[which];
    let bodies = session(&fixture(name), endpoint, steps);
    let emulator = start_emulator().await;
    let fake = FakeUpstream::start(Script::json(
        200,
        r#"{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[{"type":"text","text":"ok"}],"usage":{"input_tokens":10,"output_tokens":1}}"#,
    ))
    .await;
    let upstream = if emulated { emulator.url() } else { fake.url() };
    let dir = tempfile::tempdir().unwrap();
    let files: Vec<PathBuf> = policies
        .iter()
        .map(|p| PathBuf::from(format!("{}/policies/{p}.toml", env!("CARGO_MANIFEST_DIR"))))
        .collect();
    let mut config = policy_config(&upstream, files, &dir.path().join("store"));
    config.server.incremental = incremental;
    config.server.check_body = check_body;
    config.sessions.monitor = monitor;
    let clock = cachet::session::SessionClock::default();
    let proxy = cachet::server::spawn_with(
        config,
        cachet::server::ServeOptions {
            clock: clock.clone(),
        },
    )
    .await
    .unwrap();
    let mut statuses = Vec::new();
    // Every body that is JSON and forwarded gets a session entry, whatever the upstream
    // answers; a broken one never does (refused, or forwarded unchecked and not readable
    // after), nor one cachet refused itself (JSON without the API's shape, with the check on).
    let mut logged = 0;
    for body in &bodies {
        let mut req = client()
            .post(format!("http://{}{}", proxy.addr, path(endpoint)))
            .header("x-cachet-session", "generated")
            .header("content-type", "application/json");
        req = match endpoint {
            Endpoint::Messages => req
                .header("x-api-key", "k")
                .header("anthropic-version", "2023-06-01"),
            _ => req.header("authorization", "Bearer sk-test"),
        };
        let r = req.body(body.clone()).send().await.unwrap();
        statuses.push(r.status().as_u16());
        let refused = r.headers().contains_key("x-cachet-error");
        r.bytes().await.unwrap();
        let kept = monitor || !policies.is_empty();
        if kept && !refused && serde_json::from_slice::<Value>(body).is_ok() {
            logged += 1;
            wait_for_requests(&proxy, "generated", logged).await;
        }
        let step = std::time::Duration::from_secs(5);
        emulator.advance_clock(step);
        clock.advance(step);
    }
    let mut log = match logged {
        0 => Value::Null,
        n => wait_for_requests(&proxy, "generated", n).await,
    };
    without_times(&mut log);
    let metrics = metrics_text(&proxy).await;
    let incremental_reads = metric_sum(
        &metrics,
        "cachet_body_reads_total",
        &[("path", "incremental")],
    ) as u64;
    proxy.shutdown().await;
    let accounted = emulator
        .accounted()
        .iter()
        .map(|a| format!("{:?} {}", a.accounting, a.output_tokens))
        .collect();
    emulator.shutdown().await;
    Run {
        statuses,
        forwarded: fake.requests().into_iter().map(|r| r.body).collect(),
        accounted,
        log,
        incremental_reads,
    }
}

async fn same_as_full_reads(client: usize) {
    let name = CLIENTS[client].0;
    // Unchecked bodies (`server.check_body = false`, no policy) are first read after the
    // response, by monitoring. With monitoring off and no policy, the body check alone reads
    // (and keeps) each body.
    for (policies, check_body, monitor) in [
        (&[][..], true, true),
        (&[][..], false, true),
        (&[][..], true, false),
        (POLICIES, true, true),
    ] {
        for emulated in [false, true] {
            let full = run(
                client,
                &steps(),
                policies,
                (false, check_body, monitor),
                emulated,
            )
            .await;
            let mut inc = run(
                client,
                &steps(),
                policies,
                (true, check_body, monitor),
                emulated,
            )
            .await;
            assert_eq!(full.incremental_reads, 0, "{name}");
            assert!(
                inc.incremental_reads >= 8,
                "{name} {policies:?}: only {} bodies read incrementally",
                inc.incremental_reads
            );
            // Checked, the broken body is refused; unchecked, the upstream answers it.
            assert!(
                (full.statuses.contains(&400) || !check_body)
                    && full.statuses.iter().filter(|s| **s == 200).count() >= 12,
                "{name}: the session has answered requests and a refused one: {:?}",
                full.statuses
            );
            match emulated {
                false => assert_eq!(
                    full.forwarded.len(),
                    full.statuses.len() - usize::from(check_body),
                    "{name}: all but the refused body went upstream"
                ),
                true => {
                    let answered = full.statuses.iter().filter(|s| **s == 200).count();
                    assert_eq!(full.accounted.len(), answered, "{name}");
                    match monitor {
                        true => {
                            let diagnosed = full.log["entries"]
                                .as_array()
                                .unwrap()
                                .iter()
                                .filter(|e| !e["diagnosis"].is_null())
                                .count();
                            assert!(diagnosed > 0, "{name}: the edit and the fork are diagnosed");
                        }
                        false => assert!(full.log.is_null(), "{name}: nothing is kept unmonitored"),
                    }
                }
            }
            inc.incremental_reads = full.incremental_reads;
            assert_eq!(inc, full, "{name} with {policies:?}, emulated: {emulated}");
        }
    }
}

#[tokio::test]
async fn claude_code() {
    same_as_full_reads(0).await;
}

#[tokio::test]
async fn pi_on_chat() {
    same_as_full_reads(3).await;
}

#[tokio::test]
async fn codex() {
    same_as_full_reads(5).await;
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 6, ..Default::default() })]

    /// The same on generated sessions of any client: whatever the steps, reading
    /// incrementally forwards the same bytes and writes the same log as reading whole.
    #[test]
    fn generated_sessions_forward_and_record_the_same(
        client in 0..CLIENTS.len(),
        steps in proptest::collection::vec(step(), 1..12),
    ) {
        let rt = tokio::runtime::Runtime::new().unwrap();
        for emulated in [false, true] {
            let (full, mut inc) = rt.block_on(async {
                (
                    run(client, &steps, POLICIES, (false, true, true), emulated).await,
                    run(client, &steps, POLICIES, (true, true, true), emulated).await,
                )
            });
            inc.incremental_reads = full.incremental_reads;
            proptest::prop_assert_eq!(inc, full, "{} {:?}", CLIENTS[client].0, steps);
        }
    }
}
