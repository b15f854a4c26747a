//! The repository's traces (tests/data/traces/, recorded with real agents against the
//! emulator, and tests/data/sample-trace.jsonl) through the replay arms of the book's
//! adaptive-TTL table (docs/src/cache-markers.md): relations between the arms, and the
//! table's cells held to what the replays cost.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::OnceLock;

use cachet::replay::ideal::{ideal, Ideal};
use cachet::replay::{parse_arm, replay_all, ArmStats};
use cachet::trace::{read_traces, Record};

const ARMS: &[&str] = &[
    "client",
    "5m=tests/data/traces/arms/ttl-5m.toml",
    "1h=tests/data/traces/arms/ttl-1h.toml",
    "auto=tests/data/traces/arms/ttl-auto.toml",
    "auto+keep-warm=tests/data/traces/arms/ttl-auto-keep-warm.toml",
    "shipped=policies/anthropic-auto-breakpoints.toml",
    "stabilize=policies/stabilize-volatile.toml",
    "both=policies/anthropic-auto-breakpoints.toml,policies/stabilize-volatile.toml",
    "cache-key=policies/openai-cache-key.toml",
];

struct Replayed {
    name: String,
    records: Vec<Record>,
    arms: BTreeMap<String, ArmStats>,
    ideal: Ideal,
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn traces() -> Vec<PathBuf> {
    let mut out = vec![root().join("tests/data/sample-trace.jsonl")];
    let dir = root().join("tests/data/traces");
    let mut recorded: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(".jsonl.gz"))
        .collect();
    recorded.sort();
    assert!(recorded.len() >= 3, "the recorded traces are missing");
    out.extend(recorded);
    out
}

/// Every trace through every arm, once for all tests.
fn replayed() -> &'static [Replayed] {
    static DONE: OnceLock<Vec<Replayed>> = OnceLock::new();
    DONE.get_or_init(|| {
        let arms: Vec<_> = ARMS
            .iter()
            .map(|a| {
                let a = match a.split_once('=') {
                    Some((name, files)) => {
                        let files: Vec<String> = files
                            .split(',')
                            .map(|f| root().join(f).display().to_string())
                            .collect();
                        format!("{name}={}", files.join(","))
                    }
                    None => a.to_string(),
                };
                parse_arm(&a).unwrap()
            })
            .collect();
        traces()
            .into_iter()
            .map(|path| {
                let records = read_traces(std::slice::from_ref(&path)).unwrap();
                let stats =
                    replay_all(&records, &arms, None, &indicatif::ProgressBar::hidden()).unwrap();
                for s in &stats {
                    assert_eq!(s.errors, 0, "{}: {:?}", path.display(), s.error_messages);
                }
                Replayed {
                    name: path.file_name().unwrap().to_string_lossy().into_owned(),
                    ideal: ideal(&records, None),
                    arms: stats.into_iter().map(|s| (s.arm.clone(), s)).collect(),
                    records,
                }
            })
            .collect()
    })
}

/// How many times two consecutive requests of one session are more than 5 minutes apart.
fn long_pauses(records: &[Record]) -> usize {
    let mut last: BTreeMap<&str, u64> = BTreeMap::new();
    let mut long = 0;
    for r in records {
        if let Some(before) = last.insert(&r.session, r.time_ms) {
            long += usize::from(r.time_ms - before > 5 * 60 * 1000);
        }
    }
    long
}

fn has_long_pause(records: &[Record]) -> bool {
    long_pauses(records) > 0
}

fn cost(t: &Replayed, arm: &str) -> f64 {
    let s = &t.arms[arm];
    assert_eq!(
        s.unpriced_requests, 0,
        "{}: {arm} has unpriced requests",
        t.name
    );
    s.cost_usd
}

#[test]
fn the_recorded_traces_show_long_and_short_pauses() {
    let long: Vec<bool> = replayed()
        .iter()
        .map(|t| has_long_pause(&t.records))
        .collect();
    assert!(
        long.iter().any(|&l| l) && long.iter().any(|&l| !l),
        "{long:?}"
    );
}

/// The client arm replays each recorded trace to the usage its live run reported: the
/// pauses moved on the emulator's clock and in the records' times agree.
#[test]
fn the_recorded_traces_replay_to_the_usage_their_live_run_reported() {
    for t in replayed().iter().filter(|t| t.name.ends_with(".jsonl.gz")) {
        let client = &t.arms["client"];
        for (i, (record, replayed)) in t.records.iter().zip(&client.per_request).enumerate() {
            let live = record.usage.unwrap();
            assert_eq!(
                (live.cache_read, live.cache_write, live.cache_write_1h),
                (
                    replayed.cache_read,
                    replayed.cache_write,
                    replayed.cache_write_1h
                ),
                "{} request {i}",
                t.name
            );
        }
    }
}

/// Adaptive TTL with keep-warm costs at most the cheaper of "every marker 5m" and "every
/// marker 1h" on every trace: it pays for 1h writes and keep-warms only where the
/// session's pauses make them pay.
#[test]
fn adaptive_ttl_with_keep_warm_is_never_dearer_than_the_cheaper_fixed_lifetime() {
    for t in replayed() {
        let best = cost(t, "5m").min(cost(t, "1h"));
        let auto = cost(t, "auto+keep-warm");
        assert!(
            auto <= best + 1e-9,
            "{}: auto+keep-warm {auto:.4} vs min(5m, 1h) {best:.4}",
            t.name
        );
    }
}

/// Where the person pauses more than 5 minutes between turns, the client's own 5m markers
/// write the whole prompt again after each pause; adaptive TTL with keep-warm reads it.
#[test]
fn after_pauses_over_five_minutes_it_is_at_least_ten_percent_cheaper_than_the_client() {
    let mut seen = 0;
    for t in replayed().iter().filter(|t| has_long_pause(&t.records)) {
        let (auto, client) = (cost(t, "auto+keep-warm"), cost(t, "client"));
        assert!(
            auto <= client * 0.9,
            "{}: auto+keep-warm {auto:.4} vs client {client:.4}",
            t.name
        );
        assert!(
            t.arms["auto+keep-warm"].keep_warm_requests > 0,
            "{}",
            t.name
        );
        seen += 1;
    }
    assert!(seen >= 2, "the traces with long pauses are missing");
}

/// Without keep-warm, `auto` learns the pauses as they come: where none is longer than 5
/// minutes it writes exactly what "every marker 5m" writes; once a long pause was seen, the
/// request likely to end a turn writes for an hour, and the next long pause is read.
#[test]
fn adaptive_ttl_alone_follows_five_minutes_until_a_long_pause_is_seen() {
    let mut learned = 0;
    for t in replayed() {
        let (auto, five, client) = (cost(t, "auto"), cost(t, "5m"), cost(t, "client"));
        if !has_long_pause(&t.records) {
            assert!(
                auto <= five * 1.01,
                "{}: auto {auto:.4} vs 5m {five:.4}",
                t.name
            );
            assert_eq!(
                t.arms["auto"].cache_read_tokens, t.arms["5m"].cache_read_tokens,
                "{}",
                t.name
            );
        } else if long_pauses(&t.records) >= 2 {
            assert!(
                auto < client,
                "{}: auto {auto:.4} vs client {client:.4}",
                t.name
            );
            assert!(t.arms["auto"].cache_read_tokens > t.arms["client"].cache_read_tokens);
            learned += 1;
        }
    }
    assert!(learned >= 1, "no trace with two long pauses");
}

/// Every shipped policy that shapes what the client sent costs no more than the client
/// alone on every trace, and reads at least as much; `stabilize-volatile`, on sessions
/// that never cross midnight, sends every request as the client did.
#[test]
fn no_shipped_policy_costs_more_than_the_client_alone_on_the_traces() {
    for t in replayed() {
        let client = &t.arms["client"];
        for arm in ["shipped", "stabilize", "both", "cache-key"] {
            let s = &t.arms[arm];
            assert!(
                s.cost_usd <= client.cost_usd + 1e-9,
                "{}: {arm} ${:.4} vs the client ${:.4}",
                t.name,
                s.cost_usd,
                client.cost_usd
            );
            assert!(
                s.cache_read_tokens >= client.cache_read_tokens,
                "{}: {arm}",
                t.name
            );
        }
        assert_eq!(
            t.arms["stabilize"].per_request, client.per_request,
            "{}",
            t.name
        );
    }
}

/// The policies page's table of what the shipped policies cost (docs/src/policies.md) is
/// what these replays cost.
#[test]
fn the_books_table_of_shipped_policies_is_what_the_replays_cost() {
    let header = "| trace | client | `stabilize-volatile` | `anthropic-auto-breakpoints` | both |";
    let rows = crate::support::docs::table("docs/src/policies.md", header);
    for (trace, cells) in &rows {
        let t = trace_named(trace);
        for (arm, cell) in ["client", "stabilize", "shipped", "both"].iter().zip(cells) {
            assert_eq!(*cell, format!("${:.4}", cost(t, arm)), "{trace}, {arm}");
        }
    }
    assert_eq!(rows.len(), replayed().len(), "a row for every trace");
}

/// An SDK app that sends no `cache_control` reads nothing from the cache; the shipped
/// `anthropic-auto-breakpoints` policy brings it to 98% of the ideal or more.
#[test]
fn an_unmarked_sdk_app_reaches_the_ideal_with_the_shipped_auto_breakpoints() {
    let t = replayed()
        .iter()
        .find(|t| t.name.starts_with("sdk-unmarked"))
        .expect("the unmarked SDK trace");
    assert_eq!(t.arms["client"].cache_read_tokens, 0);
    assert!(t.ideal.cache_read_tokens > 0);
    for arm in ["shipped", "auto", "auto+keep-warm"] {
        let share = t.ideal.share_of(t.arms[arm].cache_read_tokens).unwrap();
        assert!(share >= 0.98, "{arm}: {share:.3} of the ideal");
    }
}

/// The adaptive lifetime's table in the book (docs/src/cache-markers.md) is what these
/// replays cost: every cell, and the keep-warm requests it names.
#[test]
fn the_books_table_of_arms_is_what_the_replays_cost() {
    let header =
        "| trace | pauses between turns | client | all 5m | all 1h | auto | auto + keep-warm |";
    let rows = crate::support::docs::table("docs/src/cache-markers.md", header);
    let arms = ["client", "5m", "1h", "auto", "auto+keep-warm"];
    for (trace, cells) in &rows {
        let t = trace_named(trace);
        for (arm, cell) in arms.iter().zip(&cells[1..]) {
            let shown = cell.split(' ').next().unwrap();
            assert_eq!(shown, format!("${:.4}", cost(t, arm)), "{trace}, {arm}");
            let warm = t.arms[*arm].keep_warm_requests;
            match cell.split_once('(') {
                Some((_, n)) => assert_eq!(
                    n.split(' ').next().unwrap(),
                    warm.to_string(),
                    "{trace}, {arm}: keep-warm requests"
                ),
                None => assert_eq!(warm, 0, "{trace}, {arm}: keep-warm requests not shown"),
            }
        }
    }
    assert_eq!(rows.len(), replayed().len(), "a row for every trace");
}

/// The replayed trace a table names (`pi-anthropic` for `pi-anthropic.jsonl.gz`).
fn trace_named(trace: &str) -> &'static Replayed {
    replayed()
        .iter()
        .find(|t| t.name == trace || t.name == format!("{trace}.jsonl.gz"))
        .unwrap_or_else(|| panic!("no trace `{trace}`"))
}

/// Every break on the real-client traces, under every arm, says who can fix it: the
/// client's name what changed, a policy's the policy and its patch op, and the provider is
/// blamed only for the behaviours it documents.
#[test]
fn every_break_on_the_real_traces_carries_a_blame() {
    use cachet::measure::{BreakReason, Who};
    let mut breaks = 0;
    for t in replayed() {
        for (arm, stats) in &t.arms {
            for d in stats.diagnoses.iter().flatten() {
                breaks += 1;
                let at = format!("{} arm {arm}: {d:?}", t.name);
                let blame = d.blame.as_ref().unwrap_or_else(|| panic!("{at}"));
                assert!(!blame.what.is_empty(), "{at}");
                match blame.who {
                    Who::Client => assert_ne!(blame.what, "not explained", "{at}"),
                    Who::Policy => {
                        assert!(blame.transformer.is_some() && blame.op.is_some(), "{at}");
                        assert_ne!(arm, "client", "{at}");
                    }
                    Who::Provider => assert!(
                        matches!(
                            d.reason,
                            BreakReason::TtlExpired
                                | BreakReason::OutsideLookback
                                | BreakReason::ThinkingDropped
                                | BreakReason::RateOverflow
                                | BreakReason::ContextEdited
                        ),
                        "{at}"
                    ),
                    Who::Unknown => {}
                }
            }
        }
    }
    assert!(breaks > 0, "the traces pause past their markers' lifetime");
}
