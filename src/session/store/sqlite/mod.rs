//! The embedded store: one SQLite database in WAL mode, held by one connection on a thread
//! of its own that group-commits writes ([`writer`]), opened exclusively with no
//! memory-mapped files ([`schema::open`]), and watched for being deleted or replaced
//! ([`files`]).

mod counters;
mod files;
mod ops;
mod schema;
mod writer;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures_util::future::BoxFuture;
use rusqlite::Connection;
use tokio::sync::{mpsc, oneshot};

use super::{
    Appended, Blob, Retention, SessionStore, SessionSummary, StoreError, StoreHealth, StoreOptions,
    StoreResult, StoreStats, SweepReport,
};
use crate::providers::cache_key::MessageKey;
use crate::session::entry::{now_ms, Entry};
use writer::{read_job, write_job, Durability, Job, Shared};

pub struct SqliteStore {
    jobs: mpsc::Sender<Job>,
    shared: Arc<Shared>,
    path: PathBuf,
    thread: Option<std::thread::JoinHandle<()>>,
}

fn closed<E>(_: E) -> StoreError {
    StoreError::Unavailable("sqlite: the store is closed".into())
}

impl SqliteStore {
    /// Open (or create) the database file, creating its folder when missing.
    pub async fn open(path: &Path) -> StoreResult<SqliteStore> {
        Self::open_with(path, &StoreOptions::default()).await
    }

    pub async fn open_with(path: &Path, options: &StoreOptions) -> StoreResult<SqliteStore> {
        let (tx, rx) = mpsc::channel(writer::QUEUE);
        let (opened_tx, opened_rx) = oneshot::channel();
        let db = path.to_path_buf();
        let errors = options.errors.clone();
        let thread = std::thread::Builder::new()
            .name("cachet-sqlite".into())
            .spawn(move || {
                let opened = schema::open(&db).and_then(|conn| {
                    let files = files::FileWatch::new(&db).map_err(|e| {
                        StoreError::Unavailable(format!("cannot stat {}: {e}", db.display()))
                    })?;
                    Ok((conn, files))
                });
                match opened {
                    Ok((conn, files)) => {
                        let shared = Arc::new(Shared::new(files, errors));
                        let _ = opened_tx.send(Ok(shared.clone()));
                        writer::run(conn, rx, shared);
                    }
                    Err(e) => {
                        let _ = opened_tx.send(Err(e));
                    }
                }
            })
            .map_err(|e| StoreError::Unavailable(format!("cannot start the store thread: {e}")))?;
        let shared = opened_rx.await.map_err(closed)??;
        Ok(SqliteStore {
            jobs: tx,
            shared,
            path: path.to_path_buf(),
            thread: Some(thread),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Synced commits (fsyncs) so far: with group commit, fewer than the synced writes.
    pub fn synced_commits(&self) -> u64 {
        self.shared
            .synced_commits
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Commits so far, synced or not: request records share them.
    pub fn commits(&self) -> u64 {
        self.shared
            .commits
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Reads the store's thread has run so far.
    pub fn reads(&self) -> u64 {
        self.shared.reads.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// A write, answered as `durability` says.
    async fn write<T: Send + 'static>(
        &self,
        durability: Durability,
        f: impl FnOnce(&Connection) -> rusqlite::Result<T> + Send + 'static,
    ) -> StoreResult<T> {
        self.write_then(durability, f, |_: &Shared, _: &T| {}).await
    }

    /// A write, and what the thread notes (in [`Shared`]) once it has committed.
    async fn write_then<T: Send + 'static>(
        &self,
        durability: Durability,
        f: impl FnOnce(&Connection) -> rusqlite::Result<T> + Send + 'static,
        note: impl FnOnce(&Shared, &T) + Send + 'static,
    ) -> StoreResult<T> {
        let shared = self.shared.clone();
        let (job, reply) = write_job(durability, f, move |value| note(&shared, value));
        self.jobs.send(job).await.map_err(closed)?;
        reply.await.map_err(closed)?
    }

    /// Refused as the thread would refuse it: closed, or broken.
    fn refusal(&self) -> Option<StoreError> {
        if self.jobs.is_closed() {
            return Some(closed(()));
        }
        self.shared.broken().map(StoreError::Unavailable)
    }

    async fn read<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Connection) -> rusqlite::Result<T> + Send + 'static,
    ) -> StoreResult<T> {
        let (job, reply) = read_job(f);
        self.jobs.send(job).await.map_err(closed)?;
        reply.await.map_err(closed)?
    }
}

impl SessionStore for SqliteStore {
    fn append<'a>(
        &'a self,
        session: &'a str,
        entries: &'a [Entry],
    ) -> BoxFuture<'a, StoreResult<Option<u64>>> {
        let session = session.to_owned();
        let bodies: Vec<String> = entries.iter().map(Entry::encode).collect();
        Box::pin(async move {
            if bodies.is_empty() {
                return Ok(None);
            }
            let added = bodies.len();
            let noted = session.clone();
            let first = self
                .write_then(
                    Durability::Synced,
                    move |c| ops::append(c, &session, &bodies),
                    move |shared, first| shared.lengths.set(&noted, *first as usize + added),
                )
                .await?;
            Ok(Some(first.max(0) as u64))
        })
    }

    fn append_once<'a>(
        &'a self,
        session: &'a str,
        key: &'a str,
        entries: &'a [Entry],
    ) -> BoxFuture<'a, StoreResult<Appended>> {
        let (session, key) = (session.to_owned(), key.to_owned());
        let bodies: Vec<String> = entries.iter().map(Entry::encode).collect();
        let added = bodies.len();
        let noted = session.clone();
        Box::pin(self.write_then(
            Durability::Synced,
            move |c| ops::append_once(c, &session, &key, &bodies),
            move |shared, appended| match appended {
                Appended::Written { at } => shared.lengths.set(&noted, *at as usize + added),
                // Its length is not known here: the next load asks.
                Appended::Existing(_) => shared.lengths.forget(&noted),
            },
        ))
    }

    fn record<'a>(
        &'a self,
        session: &'a str,
        entry: &'a Entry,
        blobs: Vec<Blob>,
    ) -> BoxFuture<'a, StoreResult<u64>> {
        let session = session.to_owned();
        let body = entry.encode();
        let noted = session.clone();
        Box::pin(async move {
            let at = self
                .write_then(
                    Durability::Deferred,
                    move |c| ops::record(c, &session, &body, &blobs),
                    move |shared, at| shared.lengths.set(&noted, *at as usize + 1),
                )
                .await?;
            Ok(at.max(0) as u64)
        })
    }

    fn record_next<'a>(
        &'a self,
        session: &'a str,
        entry: Entry,
        blobs: Vec<Blob>,
    ) -> BoxFuture<'a, StoreResult<(u64, u64)>> {
        let session = session.to_owned();
        let noted = session.clone();
        let shared = self.shared.clone();
        Box::pin(self.write_then(
            Durability::Deferred,
            move |c| {
                let now = now_ms();
                let (index, at) = shared.next_requests.numbered(c, &session, now, |taken| {
                    ops::record_next(c, &session, now, entry, &blobs, taken)
                })?;
                Ok((index, at.max(0) as u64))
            },
            move |shared, (_, at)| shared.lengths.set(&noted, *at as usize + 1),
        ))
    }

    fn entry_count<'a>(&'a self, session: &'a str) -> BoxFuture<'a, StoreResult<usize>> {
        Box::pin(async move {
            // A closed or lost store answers as its thread would: with an error.
            if let Some(refused) = self.refusal() {
                return Err(refused);
            }
            if let Some(len) = self.shared.lengths.get(session) {
                return Ok(len);
            }
            let session = session.to_owned();
            let shared = self.shared.clone();
            self.read(move |c| {
                let len = schema::entry_count(c, &session)?;
                shared.lengths.set(&session, len);
                Ok(len)
            })
            .await
        })
    }

    fn load_from<'a>(
        &'a self,
        session: &'a str,
        start: usize,
    ) -> BoxFuture<'a, StoreResult<Vec<Entry>>> {
        let session = session.to_owned();
        Box::pin(self.read(move |c| schema::load_range(c, &session, start, None)))
    }

    fn get_blobs<'a>(
        &'a self,
        session: &'a str,
        keys: &'a [MessageKey],
    ) -> BoxFuture<'a, StoreResult<Vec<Option<Vec<u8>>>>> {
        let session = session.to_owned();
        let keys = keys.to_vec();
        Box::pin(self.read(move |c| ops::get_blobs(c, &session, &keys)))
    }

    fn next_request_index<'a>(&'a self, session: &'a str) -> BoxFuture<'a, StoreResult<u64>> {
        let session = session.to_owned();
        Box::pin(async move {
            if let Some(refused) = self.refusal() {
                return Err(refused);
            }
            // Counted before: taken here, without waking the thread, which writes the
            // count with its next batch.
            if let Some(index) = self.shared.next_requests.take(&session) {
                return Ok(index);
            }
            // Deferred like the record it numbers: a persisted patch commits it first, and a
            // crash that loses it loses every record under it too.
            let shared = self.shared.clone();
            self.write(Durability::Deferred, move |c| {
                shared.next_requests.next_index(c, &session, now_ms())
            })
            .await
        })
    }

    fn list_sessions(&self, limit: usize) -> BoxFuture<'_, StoreResult<Vec<SessionSummary>>> {
        Box::pin(self.read(move |c| ops::list_sessions(c, limit)))
    }

    fn stats(&self) -> BoxFuture<'_, StoreResult<StoreStats>> {
        Box::pin(self.read(ops::stats))
    }

    fn sweep<'a>(
        &'a self,
        retention: &'a Retention,
        now_ms: u64,
    ) -> BoxFuture<'a, StoreResult<SweepReport>> {
        let retention = *retention;
        Box::pin(async move {
            let mut report = SweepReport::default();
            // In slices, so the writes of requests in flight are never held up for long.
            loop {
                let slice = self
                    .write_then(
                        Durability::Committed,
                        move |c| ops::sweep_slice(c, &retention, now_ms),
                        |shared, slice| {
                            if slice.expired + slice.evicted > 0 {
                                shared.lengths.clear();
                                shared.next_requests.forget();
                            }
                        },
                    )
                    .await?;
                report.expired += slice.expired;
                report.evicted += slice.evicted;
                report.bytes_freed += slice.bytes_freed;
                if slice.expired + slice.evicted < ops::SWEEP_SLICE as u64 {
                    break;
                }
            }
            if report.expired + report.evicted > 0 {
                // Give the freed pages back to the file system, a few MB per write so
                // that requests' writes do not queue behind all of it.
                const PAGES_PER_WRITE: u32 = 2048;
                while self
                    .write(Durability::Committed, |c| {
                        schema::give_back_free_pages(c, PAGES_PER_WRITE)
                    })
                    .await?
                    == PAGES_PER_WRITE
                {}
            }
            Ok(report)
        })
    }

    fn health(&self) -> BoxFuture<'_, StoreHealth> {
        Box::pin(async move {
            if self.jobs.is_closed() {
                return StoreHealth::failing("sqlite", "the store is closed");
            }
            match self.shared.check() {
                Ok(()) => StoreHealth::ok("sqlite"),
                Err(StoreError::Unavailable(reason)) => StoreHealth::failing("sqlite", reason),
                Err(e) => StoreHealth::failing("sqlite", e.to_string()),
            }
        })
    }

    fn lost_writes(&self) -> u64 {
        self.shared.lost.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn close(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            let (done, closed) = oneshot::channel();
            if self.jobs.send(Job::Close(done)).await.is_ok() {
                let _ = closed.await;
            }
        })
    }
}

impl Drop for SqliteStore {
    /// The database is closed (and checkpointed) before the store is gone, so whoever
    /// removes its folder next, or opens it again, finds it closed.
    fn drop(&mut self) {
        let (done, _) = oneshot::channel();
        // With a full queue the thread ends once this sender is gone; waiting here for it
        // would wait forever.
        let ends = !matches!(
            self.jobs.try_send(Job::Close(done)),
            Err(mpsc::error::TrySendError::Full(_))
        );
        if let (true, Some(thread)) = (ends, self.thread.take()) {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::entry::fixtures::memory_patch;

    /// 32 sessions persisting patches at once: every append is synced before it returns,
    /// and one synced commit (one fsync) covers many of them.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_synced_appends_share_commits() {
        const SESSIONS: u64 = 32;
        const EACH: u64 = 8;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.db");
        let store = Arc::new(SqliteStore::open(&path).await.unwrap());
        let tasks: Vec<_> = (0..SESSIONS)
            .map(|s| {
                let store = store.clone();
                tokio::spawn(async move {
                    for i in 0..EACH {
                        store
                            .append(&format!("s{s}"), &[memory_patch(i)])
                            .await
                            .unwrap();
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
        let appends = SESSIONS * EACH;
        let commits = store.synced_commits();
        assert!(
            commits * 4 <= appends,
            "{commits} synced commits for {appends} appends"
        );
        drop(store);
        let reopened = SqliteStore::open(&path).await.unwrap();
        for s in 0..SESSIONS {
            assert_eq!(
                reopened.entry_count(&format!("s{s}")).await.unwrap(),
                EACH as usize
            );
        }
    }

    fn synchronous(c: &Connection) -> rusqlite::Result<i64> {
        c.query_row("PRAGMA synchronous", [], |r| r.get(0))
    }

    /// Persisted patches commit with `synchronous = FULL` (2), records and counters with
    /// `NORMAL` (1), whatever order the batches come in (a synced write first commits the
    /// records open before it); the store is WAL, held exclusively.
    #[tokio::test]
    async fn synced_writes_commit_full_and_the_rest_normal() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(&dir.path().join("s.db")).await.unwrap();
        for _ in 0..2 {
            assert_eq!(
                store
                    .write(Durability::Deferred, synchronous)
                    .await
                    .unwrap(),
                1
            );
            assert_eq!(
                store
                    .write(Durability::Committed, synchronous)
                    .await
                    .unwrap(),
                1
            );
            assert_eq!(
                store.write(Durability::Synced, synchronous).await.unwrap(),
                2
            );
        }
        let (a, b) = tokio::join!(
            store.write(Durability::Synced, synchronous),
            store.write(Durability::Committed, synchronous)
        );
        assert_eq!((a.unwrap(), b.unwrap()), (2, 1));
        let journal: String = store
            .read(|c| c.query_row("PRAGMA journal_mode", [], |r| r.get(0)))
            .await
            .unwrap();
        assert_eq!(journal, "wal");
        let locking: String = store
            .read(|c| c.query_row("PRAGMA locking_mode", [], |r| r.get(0)))
            .await
            .unwrap();
        assert_eq!(locking, "exclusive");
        let checkpoint_every: i64 = store
            .read(|c| c.query_row("PRAGMA wal_autocheckpoint", [], |r| r.get(0)))
            .await
            .unwrap();
        assert_eq!(checkpoint_every, schema::WAL_PAGES);
        // 2: MEMORY, so savepoints' statement journals are never temporary files.
        let temp_store: i64 = store
            .read(|c| c.query_row("PRAGMA temp_store", [], |r| r.get(0)))
            .await
            .unwrap();
        assert_eq!(temp_store, 2);
    }

    /// A record numbered in its own write leaves the store as numbering it first, then
    /// recording it, would: the session's counters and sizes, the log and the blobs. A
    /// repeated blob is stored once.
    #[tokio::test]
    async fn a_numbered_record_writes_what_numbering_then_recording_writes() {
        let dir = tempfile::tempdir().unwrap();
        let one = SqliteStore::open(&dir.path().join("one.db")).await.unwrap();
        let two = SqliteStore::open(&dir.path().join("two.db")).await.unwrap();
        let blob = |n: u8| Blob::canonical([n; 32], vec![n; 10 + usize::from(n)]);
        for i in 0..12u64 {
            let blobs = vec![blob(i as u8 % 5), blob(7)];
            let (entry, again) = (memory_patch(i), blobs.clone());
            let numbered = one
                .write(Durability::Committed, move |c| {
                    ops::record_next(c, "s", 5, entry, &again, None)
                })
                .await
                .unwrap();
            let entry = memory_patch(i);
            let separately = two
                .write(Durability::Committed, move |c| {
                    let index = ops::next_request_index(c, "s", 5)?;
                    let body = entry.with_request_index(index).encode();
                    Ok((index, ops::record(c, "s", &body, &blobs)?))
                })
                .await
                .unwrap();
            assert_eq!(numbered, separately);
            // Another session's request index between two records.
            two.next_request_index("other").await.unwrap();
        }
        let contents = |c: &Connection| {
            let row: [i64; 4] = c.query_row(
                "SELECT entries, next_request, entry_bytes, blob_bytes FROM sessions WHERE id = 's'",
                [],
                |r| Ok([r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?]),
            )?;
            let log = schema::load_range(c, "s", 0, None)?;
            let mut blobs =
                c.prepare("SELECT key, bytes FROM session_blobs WHERE session = 's' ORDER BY key")?;
            let blobs: Vec<(Vec<u8>, Vec<u8>)> = blobs
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect::<rusqlite::Result<_>>()?;
            Ok((row, log, blobs))
        };
        let (a, b) = (
            one.read(contents).await.unwrap(),
            two.read(contents).await.unwrap(),
        );
        assert_eq!(a, b);
        assert_eq!(a.0[..2], [12, 12]);
        assert_eq!(a.1.len(), 12);
        assert_eq!(a.2.len(), 6, "each blob once");
    }

    /// One session's records, each awaited before the next as the after-response worker
    /// does, and a shaped session's indexes and records: each is read back at once, they
    /// share commits, and all are in the file once the store is closed.
    #[tokio::test]
    async fn records_are_read_at_once_and_share_commits() {
        const RECORDS: u64 = 40;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.db");
        let store = SqliteStore::open(&path).await.unwrap();
        for i in 0..RECORDS {
            let (index, at) = store
                .record_next("s", memory_patch(i), vec![])
                .await
                .unwrap();
            assert_eq!((index, at), (i, i));
            // Read by the thread, not from the lengths it remembers.
            let read = store.read(|c| schema::entry_count(c, "s")).await.unwrap();
            assert_eq!(read, i as usize + 1);
        }
        // A shaped request takes its index before forwarding, and is recorded after.
        for i in 0..RECORDS {
            let index = store.next_request_index("t").await.unwrap();
            assert_eq!(index, i);
            let at = store.record("t", &memory_patch(i), vec![]).await.unwrap();
            assert_eq!(at, i);
        }
        let commits = store.commits();
        assert!(
            commits * 4 <= 2 * RECORDS,
            "{commits} commits for {} records",
            2 * RECORDS
        );
        drop(store);
        let reopened = SqliteStore::open(&path).await.unwrap();
        assert_eq!(reopened.entry_count("s").await.unwrap(), RECORDS as usize);
        assert_eq!(reopened.entry_count("t").await.unwrap(), RECORDS as usize);
        assert_eq!(reopened.next_request_index("t").await.unwrap(), RECORDS);
    }

    /// A shaped request takes its index before forwarding. Once the thread has counted a
    /// session, the next index is taken without a trip to it: here the thread is held up
    /// by another write (as by a commit) while the index is taken.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_counted_session_takes_its_request_index_without_waiting_for_the_thread() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.db");
        let store = Arc::new(SqliteStore::open(&path).await.unwrap());
        assert_eq!(store.next_request_index("s").await.unwrap(), 0);
        let (inside_tx, inside_rx) = std::sync::mpsc::channel::<()>();
        let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
        let held = tokio::spawn({
            let store = store.clone();
            async move {
                store
                    .write(Durability::Deferred, move |_| {
                        inside_tx.send(()).unwrap();
                        release_rx.recv().unwrap();
                        Ok(())
                    })
                    .await
            }
        });
        inside_rx.recv().unwrap();
        let taken = tokio::time::timeout(
            std::time::Duration::from_secs(10),
            store.next_request_index("s"),
        )
        .await
        .expect("the index waited for the store's thread");
        assert_eq!(taken.unwrap(), 1);
        release_tx.send(()).unwrap();
        held.await.unwrap().unwrap();
        // The thread's next batch writes the count first.
        let count = store
            .write(Durability::Deferred, |c| {
                c.query_row(
                    "SELECT next_request FROM sessions WHERE id = 's'",
                    [],
                    |r| r.get::<_, i64>(0),
                )
            })
            .await
            .unwrap();
        assert_eq!(count, 2);
        // A record numbered by the thread comes next, then one more index from memory,
        // which no write follows: the store writes it as it closes, and a reopened store
        // goes on from there.
        let (index, _) = store
            .record_next("s", memory_patch(0), vec![])
            .await
            .unwrap();
        assert_eq!(index, 2);
        assert_eq!(store.next_request_index("s").await.unwrap(), 3);
        drop(Arc::into_inner(store).unwrap());
        let reopened = SqliteStore::open(&path).await.unwrap();
        assert_eq!(reopened.next_request_index("s").await.unwrap(), 4);
    }

    /// The count of an index taken in memory, written with the next batch, still reports
    /// a failure: it is counted under `request_index` (and logged).
    #[tokio::test]
    async fn a_count_that_fails_to_be_written_is_counted() {
        let errors = prometheus::IntCounterVec::new(
            prometheus::Opts::new("store_errors", "store errors"),
            &["operation"],
        )
        .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let options = StoreOptions {
            errors: Some(errors.clone()),
            ..Default::default()
        };
        let store = SqliteStore::open_with(&dir.path().join("s.db"), &options)
            .await
            .unwrap();
        assert_eq!(store.next_request_index("s").await.unwrap(), 0);
        store
            .write(Durability::Committed, |c| {
                c.execute_batch(
                    "CREATE TRIGGER no_count BEFORE UPDATE OF next_request ON sessions
                     BEGIN SELECT RAISE(ABORT, 'not counted'); END;",
                )
            })
            .await
            .unwrap();
        assert_eq!(store.next_request_index("s").await.unwrap(), 1);
        // The next batch writes the count first.
        store.write(Durability::Deferred, |_| Ok(())).await.unwrap();
        assert_eq!(errors.with_label_values(&["request_index"]).get(), 1);
    }

    /// A record that takes its own index moves the counter in its own statement: a session
    /// no policy shapes leaves no count for the next batch to write again. An index taken
    /// in memory does.
    #[tokio::test]
    async fn records_that_take_their_own_index_leave_no_count_to_write() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(&dir.path().join("s.db")).await.unwrap();
        for i in 0..3 {
            let (index, _) = store
                .record_next("s", memory_patch(i), vec![])
                .await
                .unwrap();
            assert_eq!(index, i);
            assert!(!store.shared.next_requests.any_unwritten());
        }
        assert_eq!(store.next_request_index("s").await.unwrap(), 3);
        assert!(store.shared.next_requests.any_unwritten());
    }

    /// Shaped requests (an index, then a record) and observed ones (a record that takes its
    /// own index) of the same sessions at once: each index is given once, none is skipped,
    /// and a reopened store counts on from the last.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn request_indexes_taken_both_ways_at_once_are_given_once() {
        const SESSIONS: usize = 3;
        const TASKS: usize = 6;
        const EACH: usize = 30;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.db");
        let store = Arc::new(SqliteStore::open(&path).await.unwrap());
        let tasks: Vec<_> = (0..TASKS)
            .map(|t| {
                let store = store.clone();
                tokio::spawn(async move {
                    let mut taken = vec![Vec::new(); SESSIONS];
                    for i in 0..EACH {
                        let s = (t + i) % SESSIONS;
                        let session = format!("s{s}");
                        let index = if (t + i / 3) % 2 == 0 {
                            let index = store.next_request_index(&session).await.unwrap();
                            store
                                .record(&session, &memory_patch(index), vec![])
                                .await
                                .unwrap();
                            index
                        } else {
                            let entry = memory_patch(i as u64);
                            store.record_next(&session, entry, vec![]).await.unwrap().0
                        };
                        taken[s].push(index);
                        tokio::task::yield_now().await;
                    }
                    taken
                })
            })
            .collect();
        let mut taken = vec![Vec::new(); SESSIONS];
        for task in tasks {
            for (s, indexes) in task.await.unwrap().into_iter().enumerate() {
                taken[s].extend(indexes);
            }
        }
        drop(Arc::into_inner(store).unwrap());
        let reopened = SqliteStore::open(&path).await.unwrap();
        for (s, mut indexes) in taken.into_iter().enumerate() {
            indexes.sort_unstable();
            let count = indexes.len() as u64;
            assert_eq!(indexes, (0..count).collect::<Vec<_>>(), "session s{s}");
            let session = format!("s{s}");
            assert_eq!(reopened.next_request_index(&session).await.unwrap(), count);
        }
    }

    /// With nothing queued after them, open records commit once they are due.
    #[tokio::test]
    async fn open_records_commit_when_due() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(&dir.path().join("s.db")).await.unwrap();
        store.record("s", &memory_patch(0), vec![]).await.unwrap();
        let waited = std::time::Instant::now();
        while store.commits() == 0 {
            assert!(
                waited.elapsed() < std::time::Duration::from_secs(5),
                "not committed"
            );
            tokio::time::sleep(writer::DEFER_AT_MOST / 2).await;
        }
    }

    /// Records whose commit fails are counted as lost, and a cache in front forgets the
    /// content it was told they stored: the next record sends it again.
    #[tokio::test]
    async fn records_lost_at_commit_are_counted_and_forgotten() {
        use crate::session::store::cached::CachedStore;
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(SqliteStore::open(&dir.path().join("s.db")).await.unwrap());
        // A deferred foreign key makes the open transaction's commit fail.
        store
            .read(|c| {
                c.execute_batch(
                    "PRAGMA foreign_keys = ON; CREATE TABLE p (x PRIMARY KEY);
                     CREATE TABLE t (a REFERENCES p (x) DEFERRABLE INITIALLY DEFERRED);",
                )
            })
            .await
            .unwrap();
        let cached = CachedStore::new(store.clone(), 1 << 20);
        let key = [7u8; 32];
        let blob = || Blob::canonical(key, b"content".to_vec());
        cached
            .record("s", &memory_patch(0), vec![blob()])
            .await
            .unwrap();
        store
            .write(Durability::Deferred, |c| {
                c.execute("INSERT INTO t (a) VALUES (1)", []).map(drop)
            })
            .await
            .unwrap();
        let waited = std::time::Instant::now();
        while store.lost_writes() < 2 {
            assert!(
                waited.elapsed() < std::time::Duration::from_secs(5),
                "lost {} writes",
                store.lost_writes()
            );
            tokio::time::sleep(writer::DEFER_AT_MOST / 2).await;
        }
        assert_eq!(store.entry_count("s").await.unwrap(), 0);
        cached
            .record("s", &memory_patch(1), vec![blob()])
            .await
            .unwrap();
        let found = store.get_blobs("s", &[key]).await.unwrap();
        assert_eq!(found, vec![Some(b"content".to_vec())]);
    }
}
