//! The embedded store's one connection, on a thread of its own, with group commit.
//!
//! Every call becomes a job on one queue. The thread takes whatever has queued up, runs the
//! reads, then commits the writes in at most two transactions: first those that need no
//! sync of their own (request counters, request records), with `synchronous = NORMAL`,
//! then those that must be on disk before the caller goes on (persisted patches), with
//! `synchronous = FULL`. So one fsync covers every session that was waiting, and a caller
//! hears back only once its transaction has committed. Each job runs in a savepoint: one
//! failing job does not undo the others of its batch.
//!
//! In WAL mode `NORMAL` survives a crash of cachet but may lose the last commits on power
//! loss; WAL commits reach the disk in order, so the next synced commit covers them.
//!
//! Before every write batch the database file is checked to be still the one opened (see
//! [`super::files`]); once it is not, the store refuses everything, and at shutdown the
//! connection is left unclosed rather than checkpointed into, or deleting the log of,
//! whatever file now has its name.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use prometheus::IntCounterVec;
use rusqlite::Connection;
use tokio::sync::{mpsc, oneshot};

use super::files::FileWatch;
use crate::session::store::{StoreError, StoreResult};

/// At most this many jobs per batch, so one batch's transaction stays short.
const MAX_BATCH: usize = 512;
/// Jobs waiting beyond this make callers wait (back-pressure instead of unbounded memory).
pub const QUEUE: usize = 4096;

type ReadFn = Box<dyn FnOnce(Result<&Connection, StoreError>) + Send>;
/// Runs a write inside the batch's transaction (`None`: the batch could not start, the
/// write is not run) and returns what to do once the batch's commit is known.
type WriteFn = Box<dyn FnOnce(Option<&Connection>) -> Finish + Send>;
type Finish = Box<dyn FnOnce(Result<(), StoreError>) + Send>;

pub enum Job {
    Read(ReadFn),
    Write { synced: bool, run: WriteFn },
    Close(oneshot::Sender<()>),
}

/// Each session's log length as the thread last knew it, so that asking how long a log is
/// (every session load) needs no trip to the thread. Only the thread writes it: after a
/// read, and after each write's commit, in job order, so a caller that has heard its write
/// committed reads at least that length. Cleared when it grows past [`LENGTHS_KEPT`]
/// sessions and whenever sessions are deleted.
#[derive(Default)]
pub struct Lengths(Mutex<HashMap<String, usize>>);

/// Sessions whose lengths are remembered (about 100 bytes each).
const LENGTHS_KEPT: usize = 16_384;

impl Lengths {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, usize>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn get(&self, session: &str) -> Option<usize> {
        self.map().get(session).copied()
    }

    /// Called on the store's thread only.
    pub fn set(&self, session: &str, len: usize) {
        let mut map = self.map();
        if map.len() >= LENGTHS_KEPT && !map.contains_key(session) {
            map.clear();
        }
        match map.get_mut(session) {
            Some(known) => *known = len,
            None => {
                map.insert(session.to_owned(), len);
            }
        }
    }

    /// Called on the store's thread only.
    pub fn forget(&self, session: &str) {
        self.map().remove(session);
    }

    /// Called on the store's thread only.
    pub fn clear(&self) {
        self.map().clear();
    }
}

/// What the thread and the store's callers share.
pub struct Shared {
    pub files: FileWatch,
    /// Why the store stopped, once it has.
    pub broken: Mutex<Option<String>>,
    pub errors: Option<IntCounterVec>,
    /// Synced commits so far (each one fsync), for the group-commit figures.
    pub synced_commits: AtomicU64,
    /// Reads run so far: what a cache in front saves shows here.
    pub reads: AtomicU64,
    pub lengths: Lengths,
}

impl Shared {
    pub fn broken(&self) -> Option<String> {
        self.broken
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Check the files; the first failure is logged, counted and remembered.
    pub fn check(&self) -> Result<(), StoreError> {
        if let Some(reason) = self.broken() {
            return Err(StoreError::Unavailable(reason));
        }
        match self.files.check() {
            Ok(()) => Ok(()),
            Err(reason) => {
                let mut slot = self.broken.lock().unwrap_or_else(|p| p.into_inner());
                if slot.is_none() {
                    tracing::error!(
                        "session store lost: {reason}; refusing further session writes until restart"
                    );
                    if let Some(errors) = &self.errors {
                        errors.with_label_values(&["file_check"]).inc();
                    }
                    *slot = Some(reason.clone());
                }
                Err(StoreError::Unavailable(reason))
            }
        }
    }
}

fn sqlite_error(err: rusqlite::Error) -> StoreError {
    StoreError::Unavailable(format!("sqlite: {err}"))
}

/// A job that runs `f` in a savepoint and reports its result after the commit; `committed`
/// runs on the thread first, once the result is on record.
pub fn write_job<T: Send + 'static>(
    synced: bool,
    f: impl FnOnce(&Connection) -> rusqlite::Result<T> + Send + 'static,
    committed: impl FnOnce(&T) + Send + 'static,
) -> (Job, oneshot::Receiver<StoreResult<T>>) {
    let (tx, rx) = oneshot::channel();
    let run: WriteFn = Box::new(move |conn| {
        let result = conn.map(|c| in_savepoint(c, f));
        Box::new(move |commit: Result<(), StoreError>| {
            let outcome = commit.and_then(|()| match result {
                Some(r) => r.map_err(sqlite_error),
                None => Err(StoreError::Unavailable("sqlite: write not run".into())),
            });
            if let Ok(value) = &outcome {
                committed(value);
            }
            let _ = tx.send(outcome);
        })
    });
    (Job::Write { synced, run }, rx)
}

pub fn read_job<T: Send + 'static>(
    f: impl FnOnce(&Connection) -> rusqlite::Result<T> + Send + 'static,
) -> (Job, oneshot::Receiver<StoreResult<T>>) {
    let (tx, rx) = oneshot::channel();
    let run: ReadFn = Box::new(move |conn| {
        let _ = tx.send(conn.and_then(|c| f(c).map_err(sqlite_error)));
    });
    (Job::Read(run), rx)
}

fn in_savepoint<T>(
    conn: &Connection,
    f: impl FnOnce(&Connection) -> rusqlite::Result<T>,
) -> rusqlite::Result<T> {
    conn.execute_batch("SAVEPOINT job")?;
    match f(conn) {
        Ok(value) => {
            conn.execute_batch("RELEASE job")?;
            Ok(value)
        }
        Err(e) => {
            let _ = conn.execute_batch("ROLLBACK TO job; RELEASE job");
            Err(e)
        }
    }
}

/// The thread's loop: batches until the queue closes or a `Close` job arrives.
pub fn run(conn: Connection, mut jobs: mpsc::Receiver<Job>, shared: Arc<Shared>) {
    let mut closed = None;
    while closed.is_none() {
        let Some(first) = jobs.blocking_recv() else {
            break;
        };
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match jobs.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        let (mut unsynced, mut synced) = (Vec::new(), Vec::new());
        for job in batch {
            match job {
                Job::Read(read) => {
                    shared.reads.fetch_add(1, Ordering::Relaxed);
                    read(match shared.broken() {
                        None => Ok(&conn),
                        Some(reason) => Err(StoreError::Unavailable(reason)),
                    });
                }
                Job::Write { synced: true, run } => synced.push(run),
                Job::Write { synced: false, run } => unsynced.push(run),
                // The rest of this batch is still done; jobs queued after it are dropped
                // with the queue, and their callers hear "closed".
                Job::Close(done) => closed = Some(done),
            }
        }
        commit(&conn, &shared, unsynced, false);
        commit(&conn, &shared, synced, true);
    }
    jobs.close();
    close(conn, &shared);
    if let Some(done) = closed {
        let _ = done.send(());
    }
}

/// Run a batch of writes in one transaction and tell each caller how it went.
fn commit(conn: &Connection, shared: &Shared, writes: Vec<WriteFn>, synced: bool) {
    if writes.is_empty() {
        return;
    }
    let sync = if synced { "FULL" } else { "NORMAL" };
    // Not run when the files are gone: SQLite would take the write and lose it silently.
    let began = shared.check().and_then(|()| {
        conn.execute_batch(&format!("PRAGMA synchronous = {sync}; BEGIN IMMEDIATE"))
            .map_err(sqlite_error)
    });
    if let Err(e) = began {
        for run in writes {
            run(None)(Err(e.clone()));
        }
        return;
    }
    let finishes: Vec<Finish> = writes.into_iter().map(|run| run(Some(conn))).collect();
    let committed = conn.execute_batch("COMMIT").map_err(sqlite_error);
    match &committed {
        Ok(()) if synced => {
            shared.synced_commits.fetch_add(1, Ordering::Relaxed);
        }
        Ok(()) => {}
        Err(_) => {
            let _ = conn.execute_batch("ROLLBACK");
        }
    }
    for finish in finishes {
        finish(committed.clone());
    }
}

/// Close the connection, checkpointing the log into the database, unless the files are no
/// longer the ones opened.
fn close(conn: Connection, shared: &Shared) {
    if let Err(e) = shared.check() {
        tracing::warn!("session store not checkpointed at shutdown: {e}");
        // Closing would checkpoint into, and delete the log of, whatever now has the name.
        std::mem::forget(conn);
        return;
    }
    if let Err((conn, e)) = conn.close() {
        tracing::warn!("session store did not close cleanly: {e}");
        std::mem::forget(conn);
    }
}
