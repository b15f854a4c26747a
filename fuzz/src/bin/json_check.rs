//! The fast body check agrees with serde_json on validity (valid UTF-8 and one JSON value,
//! skipped as serde_json skips a value: no depth limit), and the shape check never panics.

use serde::de::IgnoredAny;

fn main() {
    afl::fuzz!(|data: &[u8]| {
        let fast = cachet::json::check::check(data, |_| {}).is_ok();
        let serde =
            std::str::from_utf8(data).is_ok() && serde_json::from_slice::<IgnoredAny>(data).is_ok();
        assert_eq!(fast, serde, "json_check and serde_json disagree");
        if let Some((endpoint, rest)) = cachet_fuzz::endpoint_and_rest(data) {
            let _ = cachet::providers::check::check(endpoint, rest);
        }
    });
}
