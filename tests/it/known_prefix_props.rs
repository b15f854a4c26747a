//! The incremental read of a body (from where it stops repeating a remembered body, see
//! `cachet::known_prefix`) answers exactly what the full read answers: the same body check
//! verdict (model or error), the same envelope (every span, and the same compiled bytes)
//! the same message kinds, content blocks (markers, thinking) and history prefix hashes
//! (session identity and anchors),
//! on generated sessions of real clients' shapes that extend, fork, truncate, edit, move
//! the client's cache marker, change a field before the history, reformat, and break the
//! JSON after the repeated part. The same holds whether the remembered body was kept by its
//! envelope read or by the body check alone (no policy, monitoring off), and whether the
//! envelope is split by the scanner or from what the body check gathered as it passed the
//! body (one pass, as the pipeline reads a checked body).

use bytes::Bytes;
use cachet::envelope::{BreakpointMode, CompileOptions, Envelope, Ttl};
use cachet::known_prefix::KnownPrefixes;
use cachet::route::Endpoint;
use cachet::session::PrefixHashes;
use proptest::prelude::*;

use crate::support::sessions::{fixture, session, step, Step, CLIENTS};

/// What keeps a read body for the next one.
#[derive(Clone, Copy, PartialEq)]
enum Keeper {
    /// Nothing: every body is read whole.
    Nothing,
    /// The envelope read (a policy, or monitoring).
    Envelope,
    /// The body check, from what it gathered as it passed the body.
    Check,
}

/// What a read answers, for comparison: the check's verdict, and the envelope's structure
/// and compiled bytes (with the client's markers, and with `auto` markers). `one_pass`:
/// the envelope is split from what the check gathered, not by the scanner.
fn read(
    endpoint: Endpoint,
    body: &[u8],
    known: &KnownPrefixes,
    keeper: Keeper,
    one_pass: bool,
) -> (String, String, Vec<Bytes>) {
    let incremental = keeper != Keeper::Nothing;
    let found = if incremental { known.find(body) } else { None };
    let mut gathered = (keeper == Keeper::Check || one_pass).then(cachet::providers::gathered);
    let checked = cachet::known_prefix::check(endpoint, body, found.as_ref(), gathered.as_mut());
    if let (Some(gathered), Ok(_), Keeper::Check) = (&gathered, &checked, keeper) {
        known.remember_checked(&Bytes::copy_from_slice(body), gathered, found.as_ref());
    }
    let verdict = match &checked {
        Ok(model) => format!("ok {model}"),
        Err(e) => format!("error {}", e.message),
    };
    let parsed = Envelope::parse_checked(
        cachet::providers::wire(endpoint).unwrap(),
        Bytes::copy_from_slice(body),
        found.as_ref().map(|m| m.resume()).as_ref(),
        gathered.as_ref().filter(|_| one_pass && checked.is_ok()),
    );
    let (structure, compiled) = match &parsed {
        Err(e) => (format!("error {}", e.message), Vec::new()),
        Ok(env) => {
            let auto = CompileOptions {
                breakpoints: BreakpointMode::Auto {
                    ttl: Ttl::FiveMinutes,
                },
                ..Default::default()
            };
            let compiled = vec![
                env.compile_with_markers(&CompileOptions::default())
                    .to_bytes(),
                env.compile_with_markers(&auto).to_bytes(),
            ];
            // Message kinds (taken from the kept body for the messages it repeats) and
            // what is read from them.
            let kinds = format!(
                "{:?} {} {:?} {:?} {:?}",
                env.history_kinds(),
                env.turn_index(),
                env.latest_user_prompt(cachet::inject::QUERY_MAX_BYTES / 2),
                env.prefix_marks(env.history_len()),
                (0..env.history_len())
                    .map(|i| env.history_has_thinking(i))
                    .collect::<Vec<_>>()
            );
            (format!("{env:?}\n{kinds}"), compiled)
        }
    };
    // The session layer's prefix hashes (identity and anchors), as the pipeline takes them.
    let mut structure = structure;
    if let Ok(env) = &parsed {
        let history = match keeper {
            Keeper::Envelope => {
                let remembered = env
                    .scanned()
                    .and_then(|scanned| known.remember(scanned, found.as_ref(), checked.is_ok()));
                cachet::known_prefix::history_hashes(env, found.as_ref(), remembered.as_ref())
            }
            Keeper::Check => cachet::known_prefix::history_hashes(env, found.as_ref(), None),
            Keeper::Nothing => PrefixHashes::of_raw(env.history_raw()),
        };
        structure.push_str(&format!("\n{:?} {:?}", history.keys(), history.full()));
        for n in 0..=history.len() {
            structure.push_str(&format!(" {:?}", history.anchor_at(n)));
        }
    }
    (verdict, structure, compiled)
}

/// Reads every body of a generated session whole by the scanner, and compares: whole in
/// one pass, and incrementally (kept by the envelope read, split by the scanner or in one
/// pass; kept by the check alone); returns how many bodies each incremental read found a
/// kept prefix for.
fn same_reads(client: usize, steps: &[Step]) -> Result<[usize; 3], TestCaseError> {
    let (name, _, endpoint) = CLIENTS[client];
    let bodies = session(&fixture(name), endpoint, steps);
    let kept = [
        (Keeper::Envelope, false),
        (Keeper::Envelope, true),
        (Keeper::Check, true),
    ]
    .map(|k| (k, KnownPrefixes::new(true, 64 << 20)));
    let mut incremental = [0; 3];
    let whole = KnownPrefixes::new(false, 0);
    for (i, body) in bodies.iter().enumerate() {
        let full = read(endpoint, body, &whole, Keeper::Nothing, false);
        let one_pass = read(endpoint, body, &whole, Keeper::Nothing, true);
        prop_assert_eq!(
            &one_pass,
            &full,
            "{} body {} read whole in one pass",
            name,
            i
        );
        for (count, ((keeper, one_pass), known)) in incremental.iter_mut().zip(&kept) {
            *count += usize::from(known.find(body).is_some());
            let inc = read(endpoint, body, known, *keeper, *one_pass);
            let by = match (keeper, one_pass) {
                (Keeper::Check, _) => "kept by the check",
                (_, true) => "kept by the envelope, one pass",
                _ => "kept by the envelope",
            };
            prop_assert_eq!(&inc.0, &full.0, "{} body {} {}: check verdict", name, i, by);
            prop_assert_eq!(&inc.1, &full.1, "{} body {} {}: envelope", name, i, by);
            prop_assert!(
                inc.2 == full.2,
                "{} body {} {}: compiled bytes",
                name,
                i,
                by
            );
        }
    }
    Ok(incremental)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn incremental_reads_equal_full_reads(
        client in 0..CLIENTS.len(),
        steps in prop::collection::vec(step(), 1..14),
    ) {
        same_reads(client, &steps)?;
    }
}

/// The incremental path is taken: an append-only session of each client reads every body
/// after the first from where the previous one ended (so the property above compares
/// something), and a fork reads from the body it forks.
#[test]
fn append_only_sessions_are_read_incrementally() {
    for (client, (name, ..)) in CLIENTS.iter().enumerate() {
        let steps = vec![Step::Extend(1); 8];
        let incremental = same_reads(client, &steps).unwrap();
        assert_eq!(incremental, [7, 7, 7], "{name}");
        let mut forked = steps.clone();
        forked.push(Step::Fork(3));
        assert_eq!(same_reads(client, &forked).unwrap(), [8, 8, 8], "{name}");
    }
}
