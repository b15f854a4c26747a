//! Adaptive cache lifetime (`[breakpoints] ttl = "auto"`).
//!
//! Per session, cachet learns the gaps between requests from the session log: tool-loop
//! gaps (seconds, while the agent runs tools) and turn gaps (the person's think time).
//! Per request it writes its markers with a 1-hour lifetime only where the expected reuse
//! comes after more than 5 minutes and the expected saving beats the 1h write's extra
//! cost (prices from `data/models.toml`); otherwise with 5 minutes. The decision and its
//! expected saving go into the request's session-log entry (`ttl_decision`).
//!
//! Which request ends a turn is known only from its answer, so the first long pause of a
//! session cannot be foreseen; [`keep_warm`] (opt-in) covers it after the fact.

mod decide;
pub mod keep_warm;

pub use crate::session::TtlDecision;
pub use decide::{decide, Inputs};

/// The decision for one shaped request of a policy with `ttl = "auto"` (and keep-warm
/// after `keep_warm_after_secs`, when on): `None` for APIs whose markers have no lifetime
/// to choose (OpenAI entries live as the API says) and for models the table does not know.
pub fn for_request(
    env: &crate::envelope::Envelope,
    session: &crate::session::SessionContext,
    headers: &http::HeaderMap,
    now_ms: u64,
    keep_warm_after_secs: Option<u64>,
) -> Option<TtlDecision> {
    if env.endpoint().read_as() != crate::route::Endpoint::Messages {
        return None;
    }
    let allowed = keep_warm::allowed(env, headers);
    decide(
        env,
        &Inputs {
            log: &session.log,
            history: &session.history,
            now_ms,
            keep_warm_after_secs: keep_warm_after_secs.filter(|_| allowed),
        },
    )
}
