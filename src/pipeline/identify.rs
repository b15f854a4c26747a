//! Identify the session: the first identifier that applies (see `session::identity`);
//! without one, the session whose latest request this request's history extends, as the
//! provider's prefix cache would see it; only when none does, the fingerprint of a new
//! session. A tool or system change mid-session (an MCP server connecting) is then a
//! diagnosed break inside the session, not a new session.

use http::HeaderMap;
use serde_json::Value;

use super::Pipeline;
use crate::providers::Route;
use crate::session::{self, IdSource, PrefixHashes, SessionId};

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
        let mut id = session::identify(headers, body, route.provider, route.endpoint);
        if id.source == IdSource::Fingerprint {
            for n in (MIN_CONTINUED..=hashes.len()).rev() {
                let Some(anchor) = hashes.anchor_at(n) else {
                    continue;
                };
                if let Some(found) = self.histories.get(&anchor.hash).await {
                    id = SessionId {
                        id: found,
                        source: IdSource::History,
                    };
                    break;
                }
            }
        }
        // Remembered as soon as it is identified: the next request may come before this
        // one's entry is written.
        if hashes.len() >= MIN_CONTINUED {
            self.histories
                .insert(hashes.full().hash, id.id.clone())
                .await;
        }
        id
    }
}
