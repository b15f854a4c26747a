//! A clock the cache model reads and tests move: frozen for tests and replay (no sleeps),
//! running for an emulator agents talk to.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch, shared by clones. A frozen clock only moves when told
/// to (`advance`), so cache lifetimes are decided by the test or the replay, never by the
/// machine's speed. A running one also follows the time that passes: an agent pacing its
/// requests is seen at its pace (the OpenAI routing rate counts requests a minute).
#[derive(Debug, Clone)]
pub struct Clock(Arc<AtomicU64>, Option<Instant>);

impl Clock {
    /// A clock frozen at `ms` milliseconds since the epoch.
    pub fn at_ms(ms: u64) -> Self {
        Clock(Arc::new(AtomicU64::new(ms)), None)
    }

    /// A clock at the current time that runs with it (and moves further when told to).
    pub fn running() -> Self {
        let frozen = Self::starting_now();
        Clock(frozen.0, Some(Instant::now()))
    }

    /// A clock frozen at the wall-clock time of creation (so timestamps in replies look real).
    pub fn starting_now() -> Self {
        let ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        Self::at_ms(ms)
    }

    pub fn now_ms(&self) -> u64 {
        let ran = self.1.map_or(0, |since| since.elapsed().as_millis() as u64);
        self.0.load(Ordering::SeqCst).saturating_add(ran)
    }

    /// Whole seconds since the epoch, for `created` / `created_at` fields.
    pub fn now_secs(&self) -> u64 {
        self.now_ms() / 1000
    }

    pub fn advance(&self, by: Duration) {
        self.0.fetch_add(by.as_millis() as u64, Ordering::SeqCst);
    }

    /// Move forward by `seconds` (fractions allowed; negative or non-finite values are ignored).
    pub fn advance_secs(&self, seconds: f64) {
        if seconds.is_finite() && seconds > 0.0 {
            self.0
                .fetch_add((seconds * 1000.0).round() as u64, Ordering::SeqCst);
        }
    }
}

impl Default for Clock {
    fn default() -> Self {
        Self::starting_now()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clones_share_time_and_only_move_forward() {
        let c = Clock::at_ms(1_000);
        let d = c.clone();
        c.advance_secs(1.5);
        assert_eq!(d.now_ms(), 2_500);
        d.advance(Duration::from_secs(10));
        assert_eq!(c.now_secs(), 12);
        c.advance_secs(-5.0);
        c.advance_secs(f64::NAN);
        assert_eq!(c.now_ms(), 12_500);
    }

    /// `cachet emulate` runs on this clock: an agent's requests 25 s apart are seen 25 s
    /// apart, not all at one frozen instant.
    #[test]
    fn a_running_clock_follows_the_time_that_passes_and_still_advances() {
        let c = Clock::running();
        let d = c.clone();
        let start = c.now_ms();
        std::thread::sleep(Duration::from_millis(30));
        assert!(d.now_ms() >= start + 30);
        c.advance_secs(60.0);
        assert!(d.now_ms() >= start + 60_030);
    }
}
