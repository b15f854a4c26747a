//! The A/B split of sessions between injection modes.

use std::collections::HashMap;

use cachet::inject::{choose_arm, variant_label, Mode};

const ARMS: [(Mode, u32); 3] = [
    (Mode::SystemPrompt, 50),
    (Mode::ContextHook, 30),
    (Mode::Pinned, 20),
];

#[test]
fn split_is_deterministic_and_sticky() {
    for n in 0..500 {
        let session = format!("session-{n}");
        let first = choose_arm(&session, &ARMS).unwrap();
        // Every request of the session, in any order, lands in the same arm.
        for _ in 0..5 {
            assert_eq!(choose_arm(&session, &ARMS), Some(first));
        }
    }
    // Stable across builds and machines. Expected values computed independently:
    // bucket = (first 8 bytes of SHA-256(session), big-endian) * 100 >> 64, over the arms in
    // the order of their names: context-hook [0, 30), pinned [30, 50), system-prompt
    // [50, 100). "g" lands on bucket 80 and "k" on 50 (the first of system-prompt).
    let pinned: Vec<&str> = ["a", "b", "g", "h", "k"]
        .iter()
        .map(|s| variant_label(choose_arm(s, &ARMS)))
        .collect();
    assert_eq!(pinned, PINNED);
}

const PINNED: [&str; 5] = [
    "system-prompt",
    "context-hook",
    "system-prompt",
    "system-prompt",
    "system-prompt",
];

#[test]
fn the_order_an_ab_table_is_written_in_does_not_matter() {
    let reversed: Vec<(Mode, u32)> = ARMS.iter().rev().copied().collect();
    for n in 0..200 {
        let session = format!("s{n}");
        assert_eq!(choose_arm(&session, &ARMS), choose_arm(&session, &reversed));
    }
}

#[test]
fn weights_hold_over_ten_thousand_sessions() {
    let mut counts: HashMap<Mode, u32> = HashMap::new();
    for n in 0..10_000 {
        let arm = choose_arm(&format!("sess-{n:05}-{}", n * 7919), &ARMS).unwrap();
        *counts.entry(arm).or_default() += 1;
    }
    for (mode, weight) in ARMS {
        let share = f64::from(counts[&mode]) / 10_000.0;
        let expected = f64::from(weight) / 100.0;
        // 3 standard deviations of a binomial share at n = 10,000 is at most 1.5 points.
        assert!(
            (share - expected).abs() < 0.015,
            "{mode:?}: {share} vs {expected}"
        );
    }
}

#[test]
fn a_zero_weight_arm_gets_no_session() {
    let arms = [(Mode::Tail, 0), (Mode::Pinned, 1)];
    for n in 0..1000 {
        assert_eq!(choose_arm(&n.to_string(), &arms), Some(Mode::Pinned));
    }
}
