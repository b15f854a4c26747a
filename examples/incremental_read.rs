//! What reading one body of a growing agent session costs, phase by phase, when the
//! previous body of the session is kept (`server.incremental`): the lookup of the kept body,
//! the body check resumed after the repeated messages, the envelope split from what the
//! check gathered (a policy, or monitoring after the response), the envelope split by the
//! scanner from the kept body alone (the session log's read of a shaped body), and keeping
//! the body for the next request.
//!
//! The session is the load benchmark's (`benches/load/bodies.rs`), 60 requests from about
//! 100 KB, each adding about 6 KB, in two layouts of the same fields: Claude Code's (the
//! history first, then the system prompt and the tools, as pi and Codex send them too) and
//! an SDK call that names the system prompt and the tools before the messages. Each phase's
//! figure is the least of five batches of 40 readings of the session (the machine's noise
//! only ever adds time).
//!
//!     cargo run --release --example incremental_read

#[path = "../benches/load/bodies.rs"]
#[allow(dead_code)]
mod bodies;

use std::time::{Duration, Instant};

use bytes::Bytes;
use cachet::envelope::Envelope;
use cachet::known_prefix::KnownPrefixes;
use cachet::route::Endpoint;

const BATCHES: usize = 5;
const ROUNDS: usize = 40;

/// The same body with its top-level fields in `order`.
fn in_order(body: &Bytes, order: &[&str]) -> Bytes {
    let value: serde_json::Value = serde_json::from_slice(body).unwrap();
    let fields = value.as_object().unwrap();
    let mut out = serde_json::Map::new();
    for key in order {
        out.insert(key.to_string(), fields[*key].clone());
    }
    Bytes::from(serde_json::to_vec(&out).unwrap())
}

fn main() {
    let requests = bodies::AgentSession::new("s", 100_000, 6_000, false).requests(60);
    let layouts = [
        (
            "history first (Claude Code, pi, Codex)",
            [
                "model",
                "messages",
                "system",
                "tools",
                "metadata",
                "max_tokens",
                "stream",
            ],
        ),
        (
            "tools first (an SDK call)",
            [
                "model",
                "max_tokens",
                "stream",
                "metadata",
                "system",
                "tools",
                "messages",
            ],
        ),
    ];
    println!("| layout | lookup | check | split from the check | split by the scanner | keep | total (µs per body) |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for (label, order) in layouts {
        let bodies: Vec<Bytes> = requests.iter().map(|b| in_order(b, &order)).collect();
        let mut least = [Duration::MAX; 5];
        for _ in 0..BATCHES {
            let phases = read_session(&bodies);
            for (l, p) in least.iter_mut().zip(phases) {
                *l = (*l).min(p);
            }
        }
        let phases = least;
        let per = |d: Duration| d.as_secs_f64() * 1e6 / (ROUNDS * bodies.len()) as f64;
        let total: Duration = phases.iter().sum();
        let cells: Vec<String> = phases.iter().map(|d| format!("{:.1}", per(*d))).collect();
        println!("| {label} | {} | {:.1} |", cells.join(" | "), per(total));
    }
}

/// The time each phase took over [`ROUNDS`] readings of the session.
fn read_session(bodies: &[Bytes]) -> [Duration; 5] {
    let mut phases = [Duration::ZERO; 5];
    for _ in 0..ROUNDS {
        let known = KnownPrefixes::new(true, 64 << 20);
        for body in bodies {
            let mut at = Instant::now();
            let mut lap = |phase: usize, phases: &mut [Duration; 5]| {
                let now = Instant::now();
                phases[phase] += now - at;
                at = now;
            };
            let found = known.find(body);
            lap(0, &mut phases);
            let mut gathered = cachet::providers::gathered();
            cachet::known_prefix::check(
                Endpoint::Messages,
                body,
                found.as_ref(),
                Some(&mut gathered),
            )
            .unwrap();
            lap(1, &mut phases);
            let split = |gathered: Option<&cachet::json::check::Gathered>| {
                Envelope::parse_checked(
                    cachet::providers::wire(Endpoint::Messages).unwrap(),
                    body.clone(),
                    found.as_ref().map(|m| m.resume()).as_ref(),
                    gathered,
                )
                .unwrap()
            };
            let env = split(Some(&gathered));
            lap(2, &mut phases);
            let scanned = split(None);
            std::hint::black_box(&scanned);
            lap(3, &mut phases);
            known.remember(env.scanned().unwrap(), found.as_ref(), true);
            lap(4, &mut phases);
        }
    }
    phases
}
