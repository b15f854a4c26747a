//! Inputs the fuzz targets (fuzz/, `scripts/fuzz.sh`) single out, kept as tests: every
//! crash a campaign finds lands here. The campaign recorded in BENCHMARKS.md found none.

use cachet::route::Endpoint;
use serde::de::IgnoredAny;

/// Nesting far deeper than serde_json's value limit of 128: the fast body check and
/// serde_json skipping a value (no depth limit either) agree that it is JSON, neither
/// overflows the stack, and only reading it into a `Value` fails (which is why `--record`
/// keeps such bodies as bytes).
#[test]
fn deep_nesting_is_checked_without_overflow() {
    for depth in [129, 10_000, 1_000_000] {
        let doc = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        assert!(cachet::json::check::check(doc.as_bytes(), |_| {}).is_ok());
        assert!(serde_json::from_str::<IgnoredAny>(&doc).is_ok());
        let err = serde_json::from_str::<serde_json::Value>(&doc).unwrap_err();
        assert!(
            err.to_string().starts_with("recursion limit exceeded"),
            "{err}"
        );
        let body = format!(r#"{{"model":"m","messages":[],"metadata":{doc}}}"#);
        assert!(cachet::providers::check::check(Endpoint::Messages, body.as_bytes()).is_ok());
        // Unclosed, it is invalid for both.
        let open = "[".repeat(depth);
        assert!(cachet::json::check::check(open.as_bytes(), |_| {}).is_err());
        assert!(serde_json::from_str::<IgnoredAny>(&open).is_err());
        assert!(cachet::providers::check::check(Endpoint::Chat, open.as_bytes()).is_err());
    }
}
