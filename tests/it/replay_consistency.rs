//! Replay reports exactly what a live run reported: the sample trace is sent to
//! `cachet emulate` over HTTP (clock moved to each record's time), recorded with the
//! `Recorder`, read back and replayed through the same arm; token counts match request
//! for request. Checked as recorded and with pinned memory injected.

use std::path::PathBuf;
use std::time::Duration;

use cachet::cache_model::Clock;
use cachet::emulator::{self, EmulatorOptions};
use cachet::providers::usage::merge_anthropic;
use cachet::replay::{replay_arm, shaper_for, ArmArg};
use cachet::trace::{read_traces, Record, Recorder};
use cachet::usage::Usage;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Send every record, shaped by `arm`, to a fresh emulator; record what it answered.
async fn live_run(records: &[Record], arm: &ArmArg, dir: &std::path::Path) -> Vec<Usage> {
    let clock = Clock::at_ms(records[0].time_ms);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let emu = emulator::spawn(
        listener,
        EmulatorOptions {
            clock: Some(clock.clone()),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let (recorder, task) = Recorder::start(dir, 256).unwrap();
    let mut shaper = shaper_for(arm).unwrap();
    let http = reqwest::Client::new();
    let mut live = Vec::new();
    for r in records {
        clock.advance(Duration::from_millis(r.time_ms - clock.now_ms()));
        let mut body = shaper.shape(r).unwrap().body;
        body["stream"] = false.into();
        let answer: serde_json::Value = http
            .post(format!("{}/v1/messages", emu.url()))
            .header("x-api-key", "sk-test")
            .header("anthropic-version", "2023-06-01")
            .json(&body)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let mut usage = Usage::default();
        merge_anthropic(&mut usage, &answer["usage"]);
        live.push(usage);
        // What `cachet serve --record` stores: the client's request and the usage returned.
        recorder.record(Record {
            usage: Some(usage),
            ..r.clone()
        });
    }
    drop(recorder);
    task.finish().await;
    emu.shutdown().await;
    live
}

fn input_kinds(u: &Usage) -> (u64, u64, u64) {
    (u.cache_read, u.cache_write, u.uncached)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_matches_the_live_run() {
    let sample = read_traces(&[root().join("tests/data/sample-trace.jsonl")]).unwrap();
    let arms = [
        ArmArg {
            name: "recorded".into(),
            policies: vec![],
        },
        ArmArg {
            name: "pinned".into(),
            policies: vec![root().join("policies/memory-pinned.toml")],
        },
    ];
    for arm in &arms {
        let dir = tempfile::tempdir().unwrap();
        let live = live_run(&sample, arm, dir.path()).await;
        let recorded = read_traces(&[dir.path().to_path_buf()]).unwrap();
        assert_eq!(recorded.len(), sample.len());
        let mut shaper = shaper_for(arm).unwrap();
        let replayed = replay_arm(&arm.name, &recorded, shaper.as_mut(), None, &mut || {});
        assert_eq!(replayed.errors, 0);
        let live_kinds: Vec<_> = live.iter().map(input_kinds).collect();
        let replay_kinds: Vec<_> = replayed.per_request.iter().map(input_kinds).collect();
        assert_eq!(replay_kinds, live_kinds, "arm {}", arm.name);
        // Output tokens come from the recorded usage.
        assert_eq!(
            replayed.output_tokens,
            live.iter().map(|u| u.output).sum::<u64>()
        );
    }
    // The sample's own usage is what the emulator reports for it as sent.
    let dir = tempfile::tempdir().unwrap();
    let live = live_run(&sample, &arms[0], dir.path()).await;
    let shipped: Vec<_> = sample
        .iter()
        .map(|r| input_kinds(&r.usage.unwrap()))
        .collect();
    assert_eq!(shipped, live.iter().map(input_kinds).collect::<Vec<_>>());
}
