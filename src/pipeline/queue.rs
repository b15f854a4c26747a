//! The after-response queue: what runs once a response has ended (turn_end handlers, the
//! session log entry and its diagnosis), off the request path and in order.
//!
//! An agent sends its next request as soon as the previous answer ends, often before that
//! answer's entry is written; the next entry must still be compared with it, and a request
//! without a session id must find the session the previous one started. So finished
//! requests are identified one at a time, in the order their responses ended, then handed
//! to one of a few workers by session: one session's entries are written in order, other
//! sessions' alongside. The queue is bounded; a request it cannot take is counted
//! (`cachet_session_records_dropped_total`) and logged, never lost silently.

use std::sync::{Mutex, Weak};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::exchange::{Answer, Exchange};
use super::keep_warm::KeepWarm;
use super::Pipeline;

/// An answered exchange waiting for its session record.
type Job = (Box<Exchange>, Answer);

/// Finished requests waiting to be identified.
const INTAKE: usize = 4096;
/// Workers writing session entries; a session always goes to the same one.
const WORKERS: usize = 8;
/// Identified requests waiting for their worker.
const PER_WORKER: usize = 1024;

pub(super) struct AfterQueue {
    intake: Mutex<Option<mpsc::Sender<Job>>>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
}

impl AfterQueue {
    pub(super) fn start(pipeline: Weak<Pipeline>) -> AfterQueue {
        let (intake, mut finished) = mpsc::channel::<Job>(INTAKE);
        let mut tasks = Vec::new();
        let mut workers = Vec::new();
        for _ in 0..WORKERS {
            let (tx, mut rx) = mpsc::channel::<Job>(PER_WORKER);
            let pipeline = pipeline.clone();
            tasks.push(tokio::spawn(async move {
                while let Some((ex, answer)) = rx.recv().await {
                    let_requests_in().await;
                    let Some(p) = pipeline.upgrade() else { break };
                    p.after_response(*ex, answer, KeepWarm::MayArm).await;
                }
            }));
            workers.push(tx);
        }
        tasks.push(tokio::spawn(async move {
            while let Some((mut ex, answer)) = finished.recv().await {
                let Some(p) = pipeline.upgrade() else { break };
                if !p.identify_answered(&mut ex, &answer).await {
                    continue;
                }
                drop(p);
                let worker = shard(ex.session_id().unwrap_or_default());
                if workers[worker].send((ex, answer)).await.is_err() {
                    break;
                }
            }
        }));
        AfterQueue {
            intake: Mutex::new(Some(intake)),
            tasks: Mutex::new(tasks),
        }
    }

    /// Queue an answered exchange; `false` when the queue is full or closed.
    pub(super) fn submit(&self, ex: Exchange, answer: Answer) -> bool {
        let intake = self.intake.lock().ok().and_then(|i| i.clone());
        intake.is_some_and(|tx| tx.try_send((Box::new(ex), answer)).is_ok())
    }

    /// Take no more, and wait (up to `grace`) for what is queued to be written.
    pub(super) async fn drain(&self, grace: Duration) {
        if let Ok(mut intake) = self.intake.lock() {
            intake.take();
        }
        let tasks = self
            .tasks
            .lock()
            .map(|mut t| std::mem::take(&mut *t))
            .unwrap_or_default();
        let all = futures_util::future::join_all(tasks);
        if tokio::time::timeout(grace, all).await.is_err() {
            tracing::warn!("session entries still queued at shutdown were not written");
        }
    }
}

/// Let the requests that arrived meanwhile be read before the next phase of after-response
/// work. The queue runs on the workers that serve requests, and an agent sends its next
/// request the moment an answer ends: on a busy core that request waited behind the whole
/// record of the answer before (about 0.17 ms of CPU), where now it waits behind one phase
/// at most (BENCHMARKS.md, "The record gives way to the next request"). Ordering is
/// untouched: each session's jobs still run one after the other.
pub(super) async fn let_requests_in() {
    // Woken only after the worker has polled for I/O, so a request already on its socket
    // is read first.
    tokio::task::yield_now().await;
}

fn shard(session: &str) -> usize {
    (xxhash_rust::xxh3::xxh3_64(session.as_bytes()) % WORKERS as u64) as usize
}
