//! "Shaping never costs", replayed: generated sessions of pi and Claude Code (with and
//! without pauses between turns, extended thinking, a midnight crossing, fast tool loops;
//! `support::agent_sessions`) through the shipped policies and the fixed and adaptive
//! cache lifetimes, each against the client alone. Relations, not totals: every shipped
//! policy costs no more than the client and reads at least as much (to the cent the same
//! where it changes nothing); `ttl = "auto"` with keep-warm costs at most the cheaper of
//! all-5m and all-1h, and at least 10% less than the client where every pause is over 5
//! minutes.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use cachet::replay::{parse_arm, replay_all, ArmStats};

use crate::support::agent_sessions::{records, Agent, Spec};

const MINUTE: u64 = 60;

/// The shipped policies that shape what the client sent (the memory policies add notes
/// the client never sent, so they cost more by design) and the lifetime arms.
const ARMS: &[&str] = &[
    "client",
    "stabilize=policies/stabilize-volatile.toml",
    "auto-breakpoints=policies/anthropic-auto-breakpoints.toml",
    "both=policies/anthropic-auto-breakpoints.toml,policies/stabilize-volatile.toml",
    "cache-key=policies/openai-cache-key.toml",
    "5m=tests/data/traces/arms/ttl-5m.toml",
    "1h=tests/data/traces/arms/ttl-1h.toml",
    "auto+keep-warm=tests/data/traces/arms/ttl-auto-keep-warm.toml",
];

/// The shipped arms among [`ARMS`].
const SHIPPED: &[&str] = &["stabilize", "auto-breakpoints", "both", "cache-key"];

fn specs() -> Vec<Spec> {
    let pi = |name, budget, start, pauses: &[u64], steps, tool_gap| Spec {
        name,
        agent: Agent::Pi,
        budget,
        start,
        pauses: pauses.to_vec(),
        steps,
        tool_gap,
    };
    let day = "2026-11-23T13:55:00Z";
    let late = "2026-11-23T23:56:00Z";
    let later = "2026-11-23T23:59:40Z";
    let before = "2026-11-23T23:49:00Z";
    vec![
        pi("pi-fast", None, day, &[40, 90, 30], 8, 3),
        pi(
            "pi-paused",
            None,
            day,
            &[6 * MINUTE, 8 * MINUTE, 7 * MINUTE, 11 * MINUTE],
            8,
            3,
        ),
        pi(
            "pi-thinking-paused",
            Some(8192),
            day,
            &[7 * MINUTE, 6 * MINUTE, 9 * MINUTE, 8 * MINUTE, 6 * MINUTE],
            8,
            4,
        ),
        pi(
            "pi-thinking-long-loops",
            Some(2048),
            day,
            &[6 * MINUTE, 12 * MINUTE, 20 * MINUTE, 9 * MINUTE, 7 * MINUTE],
            14,
            2,
        ),
        pi("pi-thinking-fast-loop", Some(1024), day, &[50, 20], 12, 1),
        pi(
            "pi-midnight",
            None,
            late,
            &[2 * MINUTE, 3 * MINUTE, 2 * MINUTE],
            8,
            3,
        ),
        pi(
            "pi-thinking-midnight",
            Some(4096),
            later,
            &[2 * MINUTE, MINUTE],
            10,
            4,
        ),
        pi(
            "pi-midnight-in-a-pause",
            None,
            before,
            &[4 * MINUTE, 7 * MINUTE, 9 * MINUTE],
            6,
            3,
        ),
        pi(
            "pi-thinking-midnight-in-a-pause",
            Some(4096),
            before,
            &[3 * MINUTE, 8 * MINUTE, 2 * MINUTE],
            6,
            3,
        ),
        pi(
            "pi-thinking-mixed",
            Some(8192),
            day,
            &[6 * MINUTE, 2 * MINUTE, 25 * MINUTE, MINUTE],
            8,
            3,
        ),
        Spec {
            name: "claude-code-paused",
            agent: Agent::ClaudeCode,
            budget: None,
            start: day,
            pauses: vec![7 * MINUTE, 15 * MINUTE, 6 * MINUTE, 9 * MINUTE],
            steps: 6,
            tool_gap: 4,
        },
        Spec {
            name: "claude-code-fast",
            agent: Agent::ClaudeCode,
            budget: None,
            start: day,
            pauses: vec![45, 20],
            steps: 10,
            tool_gap: 1,
        },
    ]
}

struct Replayed {
    spec: Spec,
    arms: BTreeMap<String, ArmStats>,
}

/// Every generated session through every arm, once for all tests.
fn replayed() -> &'static [Replayed] {
    static DONE: OnceLock<Vec<Replayed>> = OnceLock::new();
    DONE.get_or_init(|| {
        let root = env!("CARGO_MANIFEST_DIR");
        let arms: Vec<_> = ARMS
            .iter()
            .map(|a| {
                let a = match a.split_once('=') {
                    Some((name, files)) => {
                        let files: Vec<String> =
                            files.split(',').map(|f| format!("{root}/{f}")).collect();
                        format!("{name}={}", files.join(","))
                    }
                    None => a.to_string(),
                };
                parse_arm(&a).unwrap()
            })
            .collect();
        specs()
            .into_iter()
            .map(|spec| {
                let stats = replay_all(
                    &records(&spec),
                    &arms,
                    None,
                    &indicatif::ProgressBar::hidden(),
                )
                .unwrap();
                for s in &stats {
                    assert_eq!(
                        s.errors, 0,
                        "{}: {}: {:?}",
                        spec.name, s.arm, s.error_messages
                    );
                    assert_eq!(s.unpriced_requests, 0, "{}: {}", spec.name, s.arm);
                }
                Replayed {
                    spec,
                    arms: stats.into_iter().map(|s| (s.arm.clone(), s)).collect(),
                }
            })
            .collect()
    })
}

fn cost(t: &Replayed, arm: &str) -> f64 {
    t.arms[arm].cost_usd
}

/// The generated sessions show what the relations are about.
#[test]
fn the_generated_sessions_cover_pauses_thinking_midnight_and_fast_loops() {
    let specs = specs();
    assert!(specs.iter().any(|s| s.paused() && s.budget.is_some()));
    assert!(specs.iter().any(|s| s.paused() && s.budget.is_none()));
    assert!(specs
        .iter()
        .any(|s| s.crosses_midnight() && s.budget.is_some()));
    assert!(specs
        .iter()
        .any(|s| s.crosses_midnight() && s.budget.is_none()));
    assert!(specs.iter().any(|s| s.tool_gap <= 1));
    assert!(specs
        .iter()
        .any(|s| s.agent == Agent::ClaudeCode && s.paused()));
    assert!(specs.iter().any(|s| !s.crosses_midnight() && !s.paused()));
}

/// The shipped arms that choose a lifetime (and keep-warm) from what the session showed so
/// far: a bet, which a session that changes its pattern can make them lose.
const CHOOSING: &[&str] = &["auto-breakpoints", "both"];

/// Every shipped policy costs no more than the client alone and reads at least as much, on
/// every session whose pattern holds ([`Spec::regular`]).
#[test]
fn no_shipped_policy_costs_more_than_the_client_alone() {
    for t in replayed() {
        let client = &t.arms["client"];
        for arm in SHIPPED {
            if !t.spec.regular() && CHOOSING.contains(arm) {
                continue;
            }
            let s = &t.arms[*arm];
            assert!(
                s.cost_usd <= client.cost_usd + 1e-9,
                "{}: {arm} ${:.4} vs the client ${:.4}",
                t.spec.name,
                s.cost_usd,
                client.cost_usd
            );
            assert!(
                s.cache_read_tokens >= client.cache_read_tokens,
                "{}: {arm} reads {} vs the client {}",
                t.spec.name,
                s.cache_read_tokens,
                client.cache_read_tokens
            );
        }
    }
}

/// Where a policy changes nothing, it costs what the client alone costs, to the cent:
/// `stabilize-volatile` on a day without a date change, `openai-cache-key` on Anthropic.
#[test]
fn a_policy_that_changes_nothing_costs_the_client_to_the_cent() {
    for t in replayed() {
        let client = format!("{:.2}", cost(t, "client"));
        assert_eq!(
            format!("{:.2}", cost(t, "cache-key")),
            client,
            "{}",
            t.spec.name
        );
        if !t.spec.crosses_midnight() {
            assert_eq!(
                format!("{:.2}", cost(t, "stabilize")),
                client,
                "{}",
                t.spec.name
            );
            assert_eq!(
                t.arms["stabilize"].per_request, t.arms["client"].per_request,
                "{}: the same tokens, request by request",
                t.spec.name
            );
        }
    }
}

/// On a session that changes its pattern (a long pause after short ones; a long pause
/// across midnight, after which the client's new date line breaks the prefix a keep-warm
/// kept), a lifetime chosen from the earlier turns, or a keep-warm, can be lost: the guard
/// of `cachet replay` lists those requests. What they lose stays below 1% of the client's
/// cost, and the deterministic policies still cost no more than the client.
#[test]
fn a_session_that_changes_its_pattern_loses_at_most_a_bet() {
    let irregular: Vec<&Replayed> = replayed().iter().filter(|t| !t.spec.regular()).collect();
    assert!(irregular.len() >= 3);
    for t in irregular {
        let client = cost(t, "client");
        for arm in CHOOSING {
            assert!(
                cost(t, arm) <= client * 1.01,
                "{}: {arm} ${:.4} vs the client ${client:.4}",
                t.spec.name,
                cost(t, arm)
            );
        }
    }
}

/// Across midnight while the prefix is warm, `stabilize-volatile` keeps the date the
/// cached prefix holds: it reads more and costs less than the client, whose new date line
/// breaks the prefix.
#[test]
fn across_midnight_the_held_date_reads_more_than_the_client() {
    let mut seen = 0;
    for t in replayed().iter().filter(|t| t.spec.crosses_midnight_warm()) {
        let (held, client) = (&t.arms["stabilize"], &t.arms["client"]);
        assert!(
            held.cache_read_tokens > client.cache_read_tokens,
            "{}",
            t.spec.name
        );
        assert!(held.cost_usd < client.cost_usd, "{}", t.spec.name);
        seen += 1;
    }
    assert!(seen >= 2);
}

/// `ttl = "auto"` with keep-warm costs at most the cheaper of every marker at 5 minutes
/// and every marker at an hour, on every session whose pattern holds.
#[test]
fn adaptive_ttl_with_keep_warm_costs_at_most_the_cheaper_fixed_lifetime() {
    for t in replayed().iter().filter(|t| t.spec.regular()) {
        let best = cost(t, "5m").min(cost(t, "1h"));
        let auto = cost(t, "auto+keep-warm");
        assert!(
            auto <= best + 1e-9,
            "{}: auto+keep-warm ${auto:.4} vs min(5m, 1h) ${best:.4}",
            t.spec.name
        );
    }
}

/// Where every turn comes more than 5 minutes after the previous answer, `ttl = "auto"`
/// with keep-warm costs at least 10% less than the client alone, pi with thinking on a
/// budget included.
#[test]
fn after_pauses_over_five_minutes_adaptive_ttl_saves_at_least_ten_percent() {
    let mut seen = Vec::new();
    for t in replayed().iter().filter(|t| t.spec.paused()) {
        let (auto, client) = (cost(t, "auto+keep-warm"), cost(t, "client"));
        assert!(
            auto <= 0.9 * client,
            "{}: auto+keep-warm ${auto:.4} vs the client ${client:.4}",
            t.spec.name
        );
        assert!(
            t.arms["auto+keep-warm"].keep_warm_requests > 0,
            "{}",
            t.spec.name
        );
        seen.push(t.spec.name);
    }
    assert!(
        seen.iter().any(|n| n.starts_with("pi-thinking")),
        "{seen:?}"
    );
    assert!(
        seen.iter().any(|n| n.starts_with("claude-code")),
        "{seen:?}"
    );
}

/// The book's table of generated sessions (docs/src/cache-markers.md) is what these
/// replays cost, cell by cell.
#[test]
fn the_books_table_of_generated_sessions_is_what_the_replays_cost() {
    let header =
        "| session | turns × tool calls, pauses | client | all 5m | all 1h | auto + keep-warm |";
    let rows = crate::support::docs::table("docs/src/cache-markers.md", header);
    // Every row compared, and the cost columns the replays give printed on a mismatch, so
    // that a change to the generated sessions shows the whole table to write.
    let mut wrong = Vec::new();
    for (name, cells) in &rows {
        let t = replayed()
            .iter()
            .find(|t| t.spec.name == name)
            .unwrap_or_else(|| panic!("no session `{name}`"));
        let costs: Vec<String> = ["client", "5m", "1h", "auto+keep-warm"]
            .iter()
            .map(|arm| format!("${:.4}", cost(t, arm)))
            .collect();
        if cells[1..] != costs[..] {
            wrong.push(format!("{name}: {}", costs.join(" | ")));
        }
    }
    assert!(
        wrong.is_empty(),
        "the book's table differs:\n{}",
        wrong.join("\n")
    );
    assert!(rows.len() >= 4);
}
