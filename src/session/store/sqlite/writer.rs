//! The embedded store's one connection, on a thread of its own, with group commit.
//!
//! Every call becomes a job on one queue. The thread takes whatever has queued up, runs the
//! reads, then the writes, by how each must be committed ([`Durability`]):
//! - request records (monitoring data) and request indexes (counted here, or taken in memory
//!   and written first in the next batch: [`super::counters`]) run in a transaction left open
//!   for at most [`DEFER_AT_MOST`], and their callers hear back as soon as they have run:
//!   at one commit per request, writing the log's frames and checkpointing them was most
//!   of the thread's work. Reads on the connection see them at once;
//! - the other writes that need no sync of their own (sweeps) commit with their batch,
//!   `synchronous = NORMAL`, taking any open records with them;
//! - writes that must be on disk before the caller goes on (persisted patches) commit in a
//!   transaction of their own, `synchronous = FULL`, once the records before them have
//!   committed. So one fsync covers every session that was waiting.
//!
//! Each job runs in a savepoint: one failing job does not undo the others of its batch. A
//! transaction whose commit fails loses the records in it: they are logged and counted
//! (`cachet_store_errors_total{operation="record"}`), and [`Shared::lost`] tells a cache in
//! front to forget what it took from them.
//!
//! In WAL mode `NORMAL` survives a crash of cachet but may lose the last commits on power
//! loss; WAL commits reach the disk in order, so the next synced commit covers them. A
//! crash of cachet loses at most the last [`DEFER_AT_MOST`] of request records, with the
//! indexes they were recorded under.
//!
//! Before every write batch the database file is checked to be still the one opened (see
//! [`super::files`]); once it is not, the store refuses everything, and at shutdown the
//! connection is left unclosed rather than checkpointed into, or deleting the log of,
//! whatever file now has its name.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use prometheus::IntCounterVec;
use rusqlite::Connection;
use tokio::sync::{mpsc, oneshot};

use super::counters::RequestCounters;
use super::files::FileWatch;
use crate::session::entry::now_ms;
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

/// How long request records may wait in the open transaction before it commits.
pub const DEFER_AT_MOST: Duration = Duration::from_millis(10);

/// How a write is committed, and when its caller hears back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Durability {
    /// Once it has run in the open transaction, which commits (`NORMAL`) within
    /// [`DEFER_AT_MOST`], or with the next write that commits: request records and
    /// request indexes.
    Deferred,
    /// Once its batch has committed with `synchronous = NORMAL`: sweeps.
    Committed,
    /// Once its batch is on disk: committed with `synchronous = FULL`.
    Synced,
}

pub enum Job {
    Read(ReadFn),
    Write {
        durability: Durability,
        run: WriteFn,
    },
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
    /// Commits so far, synced or not.
    pub commits: AtomicU64,
    /// Writes whose callers heard they ran, lost since because their commit failed.
    pub lost: AtomicU64,
    /// Reads run so far: what a cache in front saves shows here.
    pub reads: AtomicU64,
    pub lengths: Lengths,
    /// Each counted session's next request index ([`super::counters`]).
    pub next_requests: RequestCounters,
}

impl Shared {
    /// A freshly opened store's: nothing broken, counted or remembered yet.
    pub fn new(files: FileWatch, errors: Option<IntCounterVec>) -> Shared {
        Shared {
            files,
            broken: Mutex::new(None),
            errors,
            synced_commits: Default::default(),
            commits: Default::default(),
            lost: Default::default(),
            reads: Default::default(),
            lengths: Default::default(),
            next_requests: Default::default(),
        }
    }

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
    durability: Durability,
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
    (Job::Write { durability, run }, rx)
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
    // Prepared once and kept: `execute_batch` compiles its SQL again on every call, and
    // every job of every batch opens and releases a savepoint.
    conn.prepare_cached("SAVEPOINT job")?.execute([])?;
    match f(conn) {
        Ok(value) => {
            conn.prepare_cached("RELEASE job")?.execute([])?;
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
    run_as_batch();
    // Waiting for the next job only until the open transaction is due takes a timer; without
    // one, records commit with their batch.
    let timer = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .ok();
    let mut open = Open::default();
    let mut closed = None;
    while closed.is_none() {
        let next = match (open.due_at(), &timer) {
            (Some(due), Some(timer)) => {
                let due = tokio::time::Instant::from_std(due);
                // The timer is made inside the runtime, which drives it.
                match timer.block_on(async { tokio::time::timeout_at(due, jobs.recv()).await }) {
                    Ok(job) => job,
                    Err(_) => {
                        open.commit(&conn, &shared);
                        continue;
                    }
                }
            }
            _ => jobs.blocking_recv(),
        };
        let Some(first) = next else {
            break;
        };
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match jobs.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        let (mut deferred, mut unsynced, mut synced) = (Vec::new(), Vec::new(), Vec::new());
        for job in batch {
            match job {
                Job::Read(read) => {
                    shared.reads.fetch_add(1, Ordering::Relaxed);
                    read(match shared.broken() {
                        None => Ok(&conn),
                        Some(reason) => Err(StoreError::Unavailable(reason)),
                    });
                }
                Job::Write { durability, run } => match durability {
                    Durability::Deferred => deferred.push(run),
                    Durability::Committed => unsynced.push(run),
                    Durability::Synced => synced.push(run),
                },
                // The rest of this batch is still done; jobs queued after it are dropped
                // with the queue, and their callers hear "closed".
                Job::Close(done) => closed = Some(done),
            }
        }
        if shared.next_requests.any_unwritten() {
            deferred.insert(0, counts_write(&shared));
        }
        open.run(&conn, &shared, deferred);
        commit(&conn, &shared, &mut open, unsynced, false);
        commit(&conn, &shared, &mut open, synced, true);
        if timer.is_none() || open.is_due() {
            open.commit(&conn, &shared);
        }
    }
    if shared.next_requests.any_unwritten() {
        open.run(&conn, &shared, vec![counts_write(&shared)]);
    }
    open.commit(&conn, &shared);
    jobs.close();
    close(conn, &shared);
    if let Some(done) = closed {
        let _ = done.send(());
    }
}

/// The thread runs as `SCHED_BATCH`: it keeps its share of the CPU, but waking up (a record
/// handed over by the after-response queue) no longer takes the core from a worker that is
/// reading the next request; it runs once the worker sleeps, or at the next tick. On one
/// busy core that took about 0.02 ms off a monitored request's added p50 (BENCHMARKS.md,
/// "The record gives way to the next request"). Where the policy cannot be set (another
/// OS, a sandbox refusing the call), the thread runs as before.
fn run_as_batch() {
    #[cfg(target_os = "linux")]
    {
        let param = libc::sched_param { sched_priority: 0 };
        // SAFETY: sets the calling thread's policy (pid 0) from a valid parameter.
        if unsafe { libc::sched_setscheduler(0, libc::SCHED_BATCH, &param) } != 0 {
            let e = std::io::Error::last_os_error();
            tracing::debug!("session store thread keeps its scheduling policy: {e}");
        }
    }
}

/// The request counts taken in memory since the last batch, written first in this one.
/// Its commit is the open transaction's (a lost one is counted there); a failure to run
/// is logged and counted here.
fn counts_write(shared: &Arc<Shared>) -> WriteFn {
    let shared = shared.clone();
    Box::new(move |conn| {
        let result = conn.map(|c| in_savepoint(c, |c| shared.next_requests.write(c, now_ms())));
        Box::new(move |_| {
            if let Some(Err(e)) = result {
                tracing::error!("session store: writing request counters failed: {e}");
                if let Some(errors) = &shared.errors {
                    errors.with_label_values(&["request_index"]).inc();
                }
            }
        })
    })
}

/// Check the files and begin a transaction committed with `synchronous = sync`.
fn begin(conn: &Connection, shared: &Shared, sync: &str) -> Result<(), StoreError> {
    // Not run when the files are gone: SQLite would take the write and lose it silently.
    shared.check()?;
    conn.execute_batch(&format!("PRAGMA synchronous = {sync}; BEGIN IMMEDIATE"))
        .map_err(sqlite_error)
}

/// The transaction deferred writes have run in, not committed yet.
#[derive(Default)]
struct Open {
    since: Option<Instant>,
    writes: u64,
}

impl Open {
    fn due_at(&self) -> Option<Instant> {
        self.since.map(|since| since + DEFER_AT_MOST)
    }

    fn is_due(&self) -> bool {
        self.writes >= MAX_BATCH as u64 || self.due_at().is_some_and(|due| Instant::now() >= due)
    }

    /// Run deferred writes in the open transaction (begun when none is), and tell each
    /// caller how it went at once.
    fn run(&mut self, conn: &Connection, shared: &Shared, writes: Vec<WriteFn>) {
        if writes.is_empty() {
            return;
        }
        if let Err(e) = self.enter(conn, shared, "NORMAL") {
            return refuse(writes, &e);
        }
        self.since.get_or_insert_with(Instant::now);
        for run in writes {
            self.writes += 1;
            run(Some(conn))(Ok(()));
        }
    }

    /// Join the open transaction, or begin one committed with `synchronous = sync`. The
    /// files are checked as a transaction begins and again before it commits, not as
    /// writes join it: at one record per batch, checking on every join was two `stat`s a
    /// request. A write that joined after the files went is lost with its transaction,
    /// logged and counted ([`lost`]), or refused to its caller.
    fn enter(&mut self, conn: &Connection, shared: &Shared, sync: &str) -> Result<(), StoreError> {
        match self.since {
            Some(_) => Ok(()),
            None => begin(conn, shared, sync),
        }
    }

    /// Once the files are gone, what is open cannot be committed either: it is abandoned.
    fn files_still_there(&mut self, conn: &Connection, shared: &Shared) -> Result<(), StoreError> {
        shared
            .check()
            .inspect_err(|e| self.abandon(conn, shared, e))
    }

    /// The transaction is no longer this one's to commit (a batch commits it).
    fn take(&mut self) -> u64 {
        self.since = None;
        std::mem::take(&mut self.writes)
    }

    fn commit(&mut self, conn: &Connection, shared: &Shared) {
        if self.since.is_none() || self.files_still_there(conn, shared).is_err() {
            return;
        }
        let writes = self.take();
        match conn.execute_batch("COMMIT") {
            Ok(()) => {
                shared.commits.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                let _ = conn.execute_batch("ROLLBACK");
                lost(shared, writes, &sqlite_error(e));
            }
        }
    }

    fn abandon(&mut self, conn: &Connection, shared: &Shared, why: &StoreError) {
        let writes = self.take();
        let _ = conn.execute_batch("ROLLBACK");
        lost(shared, writes, why);
    }
}

/// Deferred writes (records, request indexes) whose callers heard they ran did not commit:
/// logged, counted, the lengths the thread remembered forgotten, and the request counts
/// it remembered written again.
fn lost(shared: &Shared, writes: u64, why: &StoreError) {
    if writes == 0 {
        return;
    }
    tracing::error!("session store lost {writes} request records and indexes: {why}");
    if let Some(errors) = &shared.errors {
        errors.with_label_values(&["record"]).inc_by(writes);
    }
    shared.lengths.clear();
    shared.next_requests.rewrite();
    shared.lost.fetch_add(writes, Ordering::Relaxed);
}

/// Writes that could not run: each caller hears why.
fn refuse(writes: Vec<WriteFn>, why: &StoreError) {
    for run in writes {
        run(None)(Err(why.clone()));
    }
}

/// Run a batch of writes in one transaction (the open one, unless they must be synced) and
/// tell each caller how it went once it has committed.
fn commit(conn: &Connection, shared: &Shared, open: &mut Open, writes: Vec<WriteFn>, synced: bool) {
    if writes.is_empty() {
        return;
    }
    if synced {
        // `synchronous` cannot change inside a transaction.
        open.commit(conn, shared);
    }
    let joins = open.since.is_some();
    if let Err(e) = open.enter(conn, shared, if synced { "FULL" } else { "NORMAL" }) {
        return refuse(writes, &e);
    }
    let finishes: Vec<Finish> = writes.into_iter().map(|run| run(Some(conn))).collect();
    // A transaction begun here was checked as it began; the open one is checked now.
    if joins {
        if let Err(e) = open.files_still_there(conn, shared) {
            for finish in finishes {
                finish(Err(e.clone()));
            }
            return;
        }
    }
    let carried = open.take();
    let committed = conn.execute_batch("COMMIT").map_err(sqlite_error);
    match &committed {
        Ok(()) => {
            shared.commits.fetch_add(1, Ordering::Relaxed);
            if synced {
                shared.synced_commits.fetch_add(1, Ordering::Relaxed);
            }
        }
        Err(e) => {
            let _ = conn.execute_batch("ROLLBACK");
            lost(shared, carried, e);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn write(durability: Durability) -> (WriteFn, oneshot::Receiver<StoreResult<()>>) {
        let (job, rx) = write_job(
            durability,
            |c| super::super::ops::count_past(c, "s", 1, 5),
            |_| {},
        );
        match job {
            Job::Write { run, .. } => (run, rx),
            _ => unreachable!(),
        }
    }

    /// The store's thread gives up preempting the workers that serve requests.
    #[cfg(target_os = "linux")]
    #[test]
    fn the_store_thread_runs_as_a_batch_thread() {
        let policy = std::thread::spawn(|| {
            run_as_batch();
            // SAFETY: reads the calling thread's policy.
            unsafe { libc::sched_getscheduler(0) }
        })
        .join()
        .unwrap();
        assert_eq!(policy, libc::SCHED_BATCH);
    }

    /// Files deleted while a transaction is open: the writes that joined it, before and
    /// after, and a batch that would commit it, are each refused to their caller or counted
    /// lost; none is committed to the file that is gone.
    #[test]
    fn writes_joining_a_transaction_after_its_files_went_are_not_committed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.db");
        let conn = super::super::schema::open(&path).unwrap();
        let shared = Shared::new(FileWatch::new(&path).unwrap(), None);
        let mut open = Open::default();
        let (first, mut first_rx) = write(Durability::Deferred);
        open.run(&conn, &shared, vec![first]);
        std::fs::remove_file(&path).unwrap();
        let (second, mut second_rx) = write(Durability::Deferred);
        open.run(&conn, &shared, vec![second]);
        let (sweep, mut sweep_rx) = write(Durability::Committed);
        commit(&conn, &shared, &mut open, vec![sweep], false);
        open.commit(&conn, &shared);

        let refused = [first_rx.try_recv(), second_rx.try_recv()]
            .into_iter()
            .filter(|heard| heard.as_ref().unwrap().is_err())
            .count() as u64;
        assert_eq!(refused + shared.lost.load(Ordering::Relaxed), 2);
        assert!(sweep_rx.try_recv().unwrap().is_err());
        assert_eq!(shared.commits.load(Ordering::Relaxed), 0);
        assert!(shared.broken().unwrap().contains("was deleted"));
    }
}
