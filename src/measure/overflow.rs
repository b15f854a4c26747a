//! OpenAI's routing rate as the diagnosis counts it. The provider routes a request by the
//! start of its prompt and its `prompt_cache_key`, and past about 15 requests a minute on one
//! route sends some to machines that have not cached the prefix ("If requests for the same
//! prefix and prompt_cache_key combination exceed a certain rate (approximately 15 requests
//! per minute), some may overflow": developers.openai.com, the prompt-caching guide). The
//! count is per route, whatever session or lane a request belongs to: a compaction that
//! starts a second lane, or a second session with the same key and prefix, shares it.

use std::collections::{HashMap, VecDeque};

use xxhash_rust::xxh3::Xxh3;

use crate::cache_model::{count_in_window, RATE_WINDOW_MS, ROUTING_TOKENS};
use crate::envelope::Envelope;
use crate::route::Endpoint;

/// Bytes of the prompt start hashed for the route: the provider's [`ROUTING_TOKENS`] at
/// about four bytes a token.
const ROUTING_BYTES: usize = ROUTING_TOKENS * 4;
/// Routes remembered before idle ones are dropped (the emulator keeps as many).
const ROUTES_KEPT: usize = 4096;

/// The route of an OpenAI request: its model, `prompt_cache_key` and the first
/// [`ROUTING_BYTES`] of its prompt in the provider's cache-key order (tools, instructions,
/// input). `None` for an API without the rule.
pub fn route_of(env: &Envelope) -> Option<u64> {
    if !matches!(env.endpoint(), Endpoint::Chat | Endpoint::Responses) {
        return None;
    }
    let mut h = Xxh3::new();
    for key in ["model", "prompt_cache_key"] {
        let value = env.option_raw(key).unwrap_or_default();
        h.update(&(value.len() as u64).to_le_bytes());
        h.update(value);
    }
    let mut left = ROUTING_BYTES;
    let parts = env
        .tools_raw()
        .chain(env.system_raw().flatten())
        .chain(env.history_raw());
    for part in parts {
        let take = part.len().min(left);
        h.update(&part[..take]);
        left -= take;
        if left == 0 {
            break;
        }
    }
    Some(h.digest())
}

/// Recent request times per route, for [`Routes::count`].
#[derive(Debug, Default)]
pub struct Routes {
    recent: HashMap<u64, VecDeque<u64>>,
}

impl Routes {
    /// Count a request on `route` at `now_ms`: how many requests took the route in the
    /// provider's rate window ending with this one, this one included.
    pub fn count(&mut self, route: u64, now_ms: u64) -> usize {
        if self.recent.len() > ROUTES_KEPT {
            self.recent
                .retain(|_, times| times.back().is_some_and(|&t| t + RATE_WINDOW_MS > now_ms));
        }
        count_in_window(self.recent.entry(route).or_default(), now_ms)
    }
}
