//! The fast body check agrees with serde_json on validity (valid UTF-8 and one JSON value),
//! and the shape check never panics. One known difference is left out: serde_json stops at
//! nesting deeper than 128 ("recursion limit exceeded"), the fast check has no depth limit
//! (it keeps its own stack, so deep nesting cannot overflow it).

use serde::de::IgnoredAny;

fn main() {
    afl::fuzz!(|data: &[u8]| {
        let fast = cachet::json_check::check(data, |_| {}).is_ok();
        let serde = match serde_json::from_slice::<IgnoredAny>(data) {
            Err(e) if e.to_string().starts_with("recursion limit exceeded") => None,
            parsed => Some(std::str::from_utf8(data).is_ok() && parsed.is_ok()),
        };
        if let Some(serde) = serde {
            assert_eq!(fast, serde, "json_check and serde_json disagree");
        }
        if let Some((endpoint, rest)) = cachet_fuzz::endpoint_and_rest(data) {
            let _ = cachet::shape::check(endpoint, rest);
        }
    });
}
