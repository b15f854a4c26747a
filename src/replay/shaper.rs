//! How an arm turns a recorded request into the request it would have sent.

use serde_json::Value;

use crate::trace::Record;

/// The request an arm sends for one record.
#[derive(Debug, Clone, PartialEq)]
pub struct Shaped {
    /// The request body to account.
    pub body: Value,
    /// The injection arm the request fell in (`None`: no injection).
    pub variant: Option<String>,
    /// Trailing messages that are the request-only uncached tail: left out of the prefix
    /// comparison (they never belong to the cached prefix).
    pub uncached_tail: usize,
    /// A keep-warm request follows this one this long after it, if its answer ends the
    /// turn and the session's next request is later (`[breakpoints] keep_warm`).
    pub keep_warm_after_ms: Option<u64>,
    /// The system parts as shaped, by name (a policy's part by its name, where the body
    /// read back names parts by position): what the diagnosis calls them.
    pub system: Vec<crate::measure::Named>,
}

/// One arm's shaping. Records arrive in time order, across all sessions, so an
/// implementation may keep per-session state (persisted patches, turn content).
pub trait Shaper {
    fn shape(&mut self, record: &Record) -> anyhow::Result<Shaped>;

    /// The usage the cache model gave the request just shaped: arms that keep a session
    /// log (the live pipeline) record it, so later requests see the log as live.
    fn answered(&mut self, _record: &Record, _usage: &crate::usage::Usage) {}

    /// The patches of the request shaped last, as its session log would list them (what a
    /// break's blame names).
    fn patches(&mut self) -> Vec<crate::session::PatchEvent> {
        Vec::new()
    }
}

/// The request exactly as recorded.
pub struct AsRecorded;

impl Shaper for AsRecorded {
    fn shape(&mut self, record: &Record) -> anyhow::Result<Shaped> {
        Ok(Shaped {
            system: Vec::new(),
            body: record.body.clone(),
            variant: None,
            uncached_tail: 0,
            keep_warm_after_ms: None,
        })
    }
}
