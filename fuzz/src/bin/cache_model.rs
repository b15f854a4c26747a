//! The emulator's cache model over a sequence of requests (split at 0xFF bytes, each one's
//! first byte choosing its API and the time passed): never panics, and never reports more
//! cached input than the request holds.

use cachet::cache_model::{CacheModel, CacheModelConfig};

fn main() {
    afl::fuzz!(|data: &[u8]| {
        let mut model = CacheModel::new(CacheModelConfig::default());
        let mut now_ms = 1_000_000u64;
        for part in data.split(|&b| b == 0xFF).take(8) {
            let Some((endpoint, rest)) = cachet_fuzz::endpoint_and_rest(part) else {
                continue;
            };
            now_ms += u64::from(part[0]) * 10_000;
            let Ok(request) = serde_json::from_slice::<serde_json::Value>(rest) else {
                continue;
            };
            if let Ok(accounting) = model.account(endpoint, &request, now_ms) {
                assert!(
                    accounting.cache_read + accounting.cache_write() <= accounting.input_tokens,
                    "more input read or written than the request holds: {accounting:?}"
                );
            }
            let _ = CacheModel::count_tokens(endpoint, &request);
        }
    });
}
