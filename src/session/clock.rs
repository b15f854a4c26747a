//! The time the session log is written in: the wall clock, which tests (and the demo) may
//! move forward, so that a gap longer than a cache lifetime can be shown without waiting;
//! or a clock that stands at the time it is set to, for requests replayed at their recorded
//! times.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Wall-clock milliseconds since the epoch plus an offset shared by clones, or a time set
/// by hand.
#[derive(Debug, Clone, Default)]
pub struct SessionClock(Arc<Hands>);

#[derive(Debug, Default)]
struct Hands {
    offset: AtomicU64,
    /// The time a stopped clock shows, plus one (0: the clock runs).
    stopped_at: AtomicU64,
}

impl SessionClock {
    /// A clock that shows `at_ms` until it is [`set`](Self::set) again.
    pub fn stopped(at_ms: u64) -> SessionClock {
        let clock = SessionClock::default();
        clock.set(at_ms);
        clock
    }

    pub fn now_ms(&self) -> u64 {
        match self.0.stopped_at.load(Ordering::SeqCst) {
            0 => super::now_ms() + self.0.offset.load(Ordering::SeqCst),
            stopped => stopped - 1,
        }
    }

    /// Move this clock (and every clone) forward.
    pub fn advance(&self, by: Duration) {
        let by = by.as_millis() as u64;
        let stopped = self.0.stopped_at.load(Ordering::SeqCst);
        match stopped {
            0 => self.0.offset.fetch_add(by, Ordering::SeqCst),
            _ => self.0.stopped_at.fetch_add(by, Ordering::SeqCst),
        };
    }

    /// Stop this clock (and every clone) at `at_ms`.
    pub fn set(&self, at_ms: u64) {
        self.0
            .stopped_at
            .store(at_ms.saturating_add(1), Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stopped_clock_shows_what_it_was_set_to_and_moves_only_when_told() {
        let clock = SessionClock::stopped(1_000);
        let clone = clock.clone();
        assert_eq!(clone.now_ms(), 1_000);
        clock.advance(Duration::from_millis(500));
        assert_eq!(clone.now_ms(), 1_500);
        clock.set(0);
        assert_eq!(clone.now_ms(), 0);
    }

    #[test]
    fn a_running_clock_moved_forward_stays_ahead_of_the_wall() {
        let clock = SessionClock::default();
        clock.advance(Duration::from_secs(3600));
        assert!(clock.now_ms() >= super::super::now_ms() + 3_600_000);
    }
}
