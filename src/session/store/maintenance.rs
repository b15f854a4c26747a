//! Retention: sessions idle longer than `sessions.retention_days` are deleted, and when the
//! store holds more than `sessions.max_store_bytes`, the least recently active sessions go
//! first. A sweeper task enforces both at start and every `sessions.sweep_interval_secs`;
//! Redis also expires a session's keys by itself (TTLs refreshed on every write).
//!
//! [`Maintenance`] owns that task and closes the store at shutdown.

use std::sync::Arc;
use std::time::Duration;

use prometheus::IntCounterVec;
use serde::Serialize;

use super::SessionStore;
use crate::session::entry::now_ms;
use crate::session::SessionsConfig;

const DAY_MS: u64 = 24 * 60 * 60 * 1000;

/// Sessions active this recently are never deleted for size: they are in use, and deleting
/// their persisted patches would change what their next request carries. The size limit
/// takes them once they go quiet.
pub const KEEP_ACTIVE_MS: u64 = 5 * 60 * 1000;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Retention {
    /// Sessions idle longer than this are deleted; `None` keeps them forever.
    pub max_age_ms: Option<u64>,
    /// Stored log and content bytes above which the least recently active sessions are
    /// deleted; `None` for no limit.
    pub max_bytes: Option<u64>,
}

impl Retention {
    pub fn from_config(config: &SessionsConfig) -> Retention {
        Retention {
            max_age_ms: (config.retention_days > 0)
                .then(|| config.retention_days.saturating_mul(DAY_MS)),
            max_bytes: (config.max_store_bytes > 0).then_some(config.max_store_bytes),
        }
    }

    /// Sessions last active before this go for age.
    pub fn age_cutoff(&self, now_ms: u64) -> Option<u64> {
        self.max_age_ms.map(|age| now_ms.saturating_sub(age))
    }

    /// Only sessions last active before this may go for size.
    pub fn size_cutoff(&self, now_ms: u64) -> u64 {
        now_ms.saturating_sub(KEEP_ACTIVE_MS)
    }

    /// The age limit in whole seconds, for Redis key TTLs.
    pub fn ttl_secs(&self) -> Option<u64> {
        self.max_age_ms.map(|ms| ms.div_ceil(1000).max(1))
    }
}

/// What one sweep deleted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct SweepReport {
    /// Sessions deleted for age.
    pub expired: u64,
    /// Sessions deleted to bring the store under its size limit.
    pub evicted: u64,
    /// Log and content bytes those sessions held.
    pub bytes_freed: u64,
}

/// Unix milliseconds now; injectable so tests can move time.
pub type Clock = Arc<dyn Fn() -> u64 + Send + Sync>;

/// The retention sweeper of a running proxy, and the store it closes at shutdown.
pub struct Maintenance {
    store: Option<Arc<dyn SessionStore>>,
    sweeper: Option<tokio::task::JoinHandle<()>>,
}

impl Maintenance {
    /// Sweep now, then every `sessions.sweep_interval_secs` (0: only at start).
    pub fn start(
        store: Option<Arc<dyn SessionStore>>,
        config: &SessionsConfig,
        errors: IntCounterVec,
    ) -> Maintenance {
        Self::start_with_clock(store, config, errors, Arc::new(now_ms))
    }

    pub fn start_with_clock(
        store: Option<Arc<dyn SessionStore>>,
        config: &SessionsConfig,
        errors: IntCounterVec,
        clock: Clock,
    ) -> Maintenance {
        let retention = Retention::from_config(config);
        let interval = Duration::from_secs(config.sweep_interval_secs);
        let sweeper = store
            .clone()
            .filter(|_| retention != Retention::default())
            .map(|s| tokio::spawn(sweep_forever(s, retention, interval, errors, clock)));
        Maintenance { store, sweeper }
    }

    /// Stop sweeping, let queued writes finish and close the store.
    pub async fn stop(self) {
        if let Some(task) = self.sweeper {
            task.abort();
            let _ = task.await;
        }
        if let Some(store) = self.store {
            store.close().await;
        }
    }
}

async fn sweep_forever(
    store: Arc<dyn SessionStore>,
    retention: Retention,
    every: Duration,
    errors: IntCounterVec,
    clock: Clock,
) {
    let mut ticks = (!every.is_zero()).then(|| {
        let mut t = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        t
    });
    loop {
        sweep_once(store.as_ref(), &retention, clock(), &errors).await;
        match ticks.as_mut() {
            Some(t) => {
                t.tick().await;
            }
            None => return,
        }
    }
}

/// One sweep, with its outcome logged and failures counted.
pub async fn sweep_once(
    store: &dyn SessionStore,
    retention: &Retention,
    now_ms: u64,
    errors: &IntCounterVec,
) {
    match store.sweep(retention, now_ms).await {
        Ok(report) if report.expired + report.evicted > 0 => tracing::info!(
            expired = report.expired,
            evicted = report.evicted,
            bytes_freed = report.bytes_freed,
            "session retention: deleted sessions"
        ),
        Ok(_) => {}
        Err(e) => {
            errors.with_label_values(&["sweep"]).inc();
            tracing::warn!("session retention sweep failed: {e}");
        }
    }
}
