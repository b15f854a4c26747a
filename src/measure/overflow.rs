//! OpenAI's routing rate as the diagnosis counts it. The provider routes a request by the
//! start of its prompt and its `prompt_cache_key`, and past about 15 requests a minute on one
//! route sends some to machines that have not cached the prefix ("If requests for the same
//! prefix and prompt_cache_key combination exceed a certain rate (approximately 15 requests
//! per minute), some may overflow": developers.openai.com, the prompt-caching guide). The
//! count is per route, whatever session or lane a request belongs to: a compaction that
//! starts a second lane, or a second session with the same key and prefix, shares it.

use std::collections::{HashMap, VecDeque};

use crate::cache_model::{count_in_window, RATE_WINDOW_MS};
use crate::envelope::Envelope;

/// Routes remembered before idle ones are dropped (the emulator keeps as many).
const ROUTES_KEPT: usize = 4096;

/// The route of an OpenAI request (see `providers::openai::route_of`); `None` for an API
/// without the rule.
pub fn route_of(env: &Envelope) -> Option<u64> {
    crate::providers::openai::route_of(env)
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
