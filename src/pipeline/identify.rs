//! Identify the session: the first identifier that applies (see `session::identity`);
//! without one, the session whose latest request this request's history extends, as the
//! provider's prefix cache would see it; only when none does, the fingerprint of a new
//! session. A tool or system change mid-session (an MCP server connecting) is then a
//! diagnosed break inside the session, not a new session.

use http::HeaderMap;
use serde_json::Value;

use super::Pipeline;
use crate::providers::Route;
use crate::session::{self, IdSource, PrefixHashes, SessionContext, SessionId};

/// How many recent histories are remembered for continuation.
pub(super) const REMEMBERED_HISTORIES: u64 = 100_000;
/// A request continues a session only by a history of this many messages or more (a
/// prompt and an answer at least): a shared first prompt alone is no continuation.
const MIN_CONTINUED: usize = 2;

impl Pipeline {
    pub(super) async fn identify(
        &self,
        headers: &HeaderMap,
        body: &Value,
        route: Route,
        hashes: &PrefixHashes,
    ) -> SessionId {
        let id = session::identify(headers, body, route.provider, route.endpoint);
        if id.source != IdSource::Fingerprint {
            return id;
        }
        for n in (MIN_CONTINUED..=hashes.len()).rev() {
            let Some(anchor) = hashes.anchor_at(n) else {
                continue;
            };
            if let Some(found) = self.histories.get(&anchor.hash).await {
                return SessionId {
                    id: found,
                    source: IdSource::History,
                };
            }
        }
        id
    }

    /// Remember a recorded request's client history, so that a later request extending it
    /// continues its session.
    pub(super) async fn remember_history(&self, ctx: &SessionContext) {
        if ctx.history.len() >= MIN_CONTINUED {
            self.histories
                .insert(ctx.history.full().hash, ctx.id.id.clone())
                .await;
        }
    }
}
