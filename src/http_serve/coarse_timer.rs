//! The clock behind a listener's header-read timeout: pending deadlines in one table that a
//! single task reads every tick, instead of one tokio timer per request.
//!
//! hyper starts its header-read timer each time a keep-alive connection waits for its next
//! request head, and drops it when the head arrives: once per request. A tokio timer due
//! before the runtime's next planned wake-up wakes the I/O driver to plan again (an
//! `eventfd` write and one more `epoll_wait`), so every request paid a system call and an
//! extra turn of the event loop for a timer that almost never fires (BENCHMARKS.md, "The
//! header timer off tokio's wheel"). A guard against clients that never finish their head
//! does not need that precision. Here a waiting connection's deadline goes into a table
//! (a lock and a slab insert, no system call); one task per listener wakes every tick (a
//! tenth of the timeout, between 10 ms and 1 s) and wakes the connections whose deadline
//! has passed. A timeout therefore fires at most one tick late.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use slab::Slab;

/// Shortest and longest tick.
const TICK_RANGE: (Duration, Duration) = (Duration::from_millis(10), Duration::from_secs(1));

/// A [`hyper::rt::Timer`] whose deadlines are checked every tick. Clones share one table and
/// one ticking task, which ends at its first tick after the last clone (and every sleep
/// made by it) is dropped.
#[derive(Clone)]
pub struct CoarseTimer {
    table: Arc<Table>,
}

#[derive(Default)]
struct Table {
    waiting: Mutex<Slab<Waiting>>,
}

struct Waiting {
    deadline: Instant,
    waker: Waker,
    /// Woken once past its deadline; the sleep removes it when it next runs or is dropped.
    woken: bool,
}

impl CoarseTimer {
    /// A timer for timeouts of `timeout`, its ticking task spawned on the current runtime.
    pub fn start(timeout: Duration) -> CoarseTimer {
        let tick = (timeout / 10).clamp(TICK_RANGE.0, TICK_RANGE.1);
        let table = Arc::new(Table::default());
        tokio::spawn(tick_until_dropped(Arc::downgrade(&table), tick));
        CoarseTimer { table }
    }

    /// Deadlines waiting now (for tests).
    #[cfg(test)]
    fn waiting(&self) -> usize {
        self.table.lock().len()
    }
}

async fn tick_until_dropped(table: Weak<Table>, tick: Duration) {
    let mut ticks = tokio::time::interval(tick);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let Some(table) = table.upgrade() else { return };
        table.wake_due(Instant::now());
    }
}

impl Table {
    fn lock(&self) -> MutexGuard<'_, Slab<Waiting>> {
        self.waiting.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn wake_due(&self, now: Instant) {
        let mut due = Vec::new();
        for (_, waiting) in self.lock().iter_mut() {
            if !waiting.woken && waiting.deadline <= now {
                waiting.woken = true;
                due.push(waiting.waker.clone());
            }
        }
        // Woken outside the lock: a waker may run its task's poll on this thread.
        due.into_iter().for_each(Waker::wake);
    }
}

impl hyper::rt::Timer for CoarseTimer {
    fn sleep(&self, duration: Duration) -> Pin<Box<dyn hyper::rt::Sleep>> {
        self.sleep_until(Instant::now() + duration)
    }

    fn sleep_until(&self, deadline: Instant) -> Pin<Box<dyn hyper::rt::Sleep>> {
        Box::pin(CoarseSleep {
            deadline,
            entry: None,
            table: self.table.clone(),
        })
    }
}

/// One deadline; it enters the table only when polled before it is due.
struct CoarseSleep {
    deadline: Instant,
    entry: Option<usize>,
    table: Arc<Table>,
}

impl CoarseSleep {
    fn leave_table(&mut self) {
        if let Some(entry) = self.entry.take() {
            self.table.lock().remove(entry);
        }
    }
}

impl Future for CoarseSleep {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        if Instant::now() >= this.deadline {
            this.leave_table();
            return Poll::Ready(());
        }
        let mut waiting = this.table.lock();
        match this.entry.and_then(|entry| waiting.get_mut(entry)) {
            Some(entry) => {
                if !entry.waker.will_wake(cx.waker()) {
                    entry.waker = cx.waker().clone();
                }
            }
            None => {
                this.entry = Some(waiting.insert(Waiting {
                    deadline: this.deadline,
                    waker: cx.waker().clone(),
                    woken: false,
                }));
            }
        }
        Poll::Pending
    }
}

impl Drop for CoarseSleep {
    fn drop(&mut self) {
        self.leave_table();
    }
}

impl hyper::rt::Sleep for CoarseSleep {}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::rt::Timer;

    fn poll_once(sleep: &mut Pin<Box<dyn hyper::rt::Sleep>>) -> Poll<()> {
        let waker = futures_util::task::noop_waker();
        sleep.as_mut().poll(&mut Context::from_waker(&waker))
    }

    #[tokio::test]
    async fn a_deadline_fires_within_a_tick_after_it_is_due() {
        let timer = CoarseTimer::start(Duration::from_millis(200));
        let started = Instant::now();
        timer.sleep(Duration::from_millis(50)).await;
        let took = started.elapsed();
        assert!(took >= Duration::from_millis(50), "{took:?}");
        // The tick is 20 ms; the bound leaves room for a loaded machine.
        assert!(took < Duration::from_secs(5), "{took:?}");
        assert_eq!(timer.waiting(), 0, "a fired sleep leaves the table");
    }

    #[tokio::test]
    async fn a_sleep_dropped_before_its_deadline_leaves_the_table() {
        let timer = CoarseTimer::start(Duration::from_secs(30));
        let mut sleep = timer.sleep(Duration::from_secs(30));
        assert!(poll_once(&mut sleep).is_pending());
        assert_eq!(timer.waiting(), 1);
        drop(sleep);
        assert_eq!(timer.waiting(), 0);
    }

    #[tokio::test]
    async fn a_sleep_past_its_deadline_is_ready_without_entering_the_table() {
        let timer = CoarseTimer::start(Duration::from_secs(30));
        let mut sleep = timer.sleep_until(Instant::now() - Duration::from_millis(1));
        assert!(poll_once(&mut sleep).is_ready());
        assert_eq!(timer.waiting(), 0);
    }

    #[tokio::test]
    async fn the_ticking_task_does_not_keep_the_table_alive() {
        let timer = CoarseTimer::start(Duration::from_millis(100));
        let table = Arc::downgrade(&timer.table);
        drop(timer);
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(table.upgrade().is_none(), "nothing else holds the table");
    }
}
