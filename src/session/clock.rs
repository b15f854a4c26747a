//! The time the session log is written in: the wall clock, which tests (and the demo) may
//! move forward, so that a gap longer than a cache lifetime can be shown without waiting.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Wall-clock milliseconds since the epoch plus an offset shared by clones.
#[derive(Debug, Clone, Default)]
pub struct SessionClock(Arc<AtomicU64>);

impl SessionClock {
    pub fn now_ms(&self) -> u64 {
        super::now_ms() + self.0.load(Ordering::SeqCst)
    }

    /// Move this clock (and every clone) forward.
    pub fn advance(&self, by: Duration) {
        self.0.fetch_add(by.as_millis() as u64, Ordering::SeqCst);
    }
}
