//! The embedded store: one SQLite database in WAL mode.
//!
//! `synchronous = FULL` for log appends: in WAL mode, `NORMAL` survives a crash of cachet
//! but may lose the last commits on power loss; a persisted patch must be on disk before the
//! request it shaped is forwarded, so every append is synced. The request counter and
//! content blobs are committed with `NORMAL` (no sync of their own, so the hot path pays no
//! fsync for them): WAL commits reach the disk in order, so the next synced append makes
//! them durable too. Blocking calls run on tokio's blocking pool.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use futures_util::future::BoxFuture;
use rusqlite::{params, Connection, OptionalExtension};

use super::{Blob, SessionStore, SessionSummary, StoreError, StoreResult, StoreStats};
use crate::session::entry::{now_ms, Entry};
use crate::session::normalize::MessageKey;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY,
    created_ms INTEGER NOT NULL,
    updated_ms INTEGER NOT NULL,
    entries INTEGER NOT NULL DEFAULT 0,
    next_request INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS sessions_by_update ON sessions(updated_ms);
CREATE TABLE IF NOT EXISTS entries (
    session TEXT NOT NULL,
    seq INTEGER NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (session, seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS blobs (
    key BLOB PRIMARY KEY,
    bytes BLOB NOT NULL
) WITHOUT ROWID;
";

pub struct SqliteStore {
    conn: Arc<Mutex<Connection>>,
    path: PathBuf,
}

fn unavailable(err: impl std::fmt::Display) -> StoreError {
    StoreError::Unavailable(format!("sqlite: {err}"))
}

impl SqliteStore {
    /// Open (or create) the database file, creating its folder when missing.
    pub async fn open(path: &Path) -> StoreResult<SqliteStore> {
        let path = path.to_path_buf();
        let opened = path.clone();
        let conn = tokio::task::spawn_blocking(move || open_connection(&opened))
            .await
            .map_err(unavailable)??;
        Ok(SqliteStore {
            conn: Arc::new(Mutex::new(conn)),
            path,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Run `f` with the connection on the blocking pool.
    async fn with<T, F>(&self, f: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> rusqlite::Result<T> + Send + 'static,
    {
        let conn = Arc::clone(&self.conn);
        tokio::task::spawn_blocking(move || {
            let mut guard = conn
                .lock()
                .map_err(|_| StoreError::Unavailable("sqlite: connection poisoned".into()))?;
            f(&mut guard).map_err(unavailable)
        })
        .await
        .map_err(unavailable)?
    }
}

/// Run `f` in a commit that is not synced by itself (see the module comment).
fn unsynced<T>(
    conn: &mut Connection,
    f: impl FnOnce(&mut Connection) -> rusqlite::Result<T>,
) -> rusqlite::Result<T> {
    conn.execute_batch("PRAGMA synchronous = NORMAL")?;
    let result = f(conn);
    conn.execute_batch("PRAGMA synchronous = FULL")?;
    result
}

fn open_connection(path: &Path) -> StoreResult<Connection> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| {
            StoreError::Unavailable(format!("cannot create {}: {e}", dir.display()))
        })?;
    }
    let conn = Connection::open(path)
        .map_err(|e| StoreError::Unavailable(format!("cannot open {}: {e}", path.display())))?;
    let mode: String = conn
        .query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0))
        .map_err(unavailable)?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(StoreError::Unavailable(format!(
            "sqlite: {} does not support WAL mode (got {mode})",
            path.display()
        )));
    }
    conn.execute_batch("PRAGMA synchronous = FULL; PRAGMA busy_timeout = 5000;")
        .map_err(unavailable)?;
    conn.execute_batch(SCHEMA).map_err(unavailable)?;
    Ok(conn)
}

fn append_tx(conn: &mut Connection, session: &str, bodies: &[String]) -> rusqlite::Result<()> {
    let tx = conn.transaction()?;
    let added = bodies.len() as i64;
    let total: i64 = tx.query_row(
        "INSERT INTO sessions (id, created_ms, updated_ms, entries) VALUES (?1, ?2, ?2, ?3)
         ON CONFLICT(id) DO UPDATE SET entries = entries + ?3, updated_ms = ?2
         RETURNING entries",
        params![session, now_ms() as i64, added],
        |row| row.get(0),
    )?;
    {
        let mut insert =
            tx.prepare_cached("INSERT INTO entries (session, seq, body) VALUES (?1, ?2, ?3)")?;
        for (i, body) in bodies.iter().enumerate() {
            insert.execute(params![session, total - added + i as i64, body])?;
        }
    }
    tx.commit()
}

impl SessionStore for SqliteStore {
    fn append<'a>(
        &'a self,
        session: &'a str,
        entries: &'a [Entry],
    ) -> BoxFuture<'a, StoreResult<()>> {
        let session = session.to_owned();
        let bodies: Vec<String> = entries.iter().map(Entry::encode).collect();
        Box::pin(self.with(move |conn| append_tx(conn, &session, &bodies)))
    }

    fn entry_count<'a>(&'a self, session: &'a str) -> BoxFuture<'a, StoreResult<usize>> {
        let session = session.to_owned();
        Box::pin(async move {
            let count = self
                .with(move |conn| {
                    conn.query_row(
                        "SELECT entries FROM sessions WHERE id = ?1",
                        params![session],
                        |row| row.get::<_, i64>(0),
                    )
                    .optional()
                })
                .await?;
            Ok(count.unwrap_or(0).max(0) as usize)
        })
    }

    fn load_from<'a>(
        &'a self,
        session: &'a str,
        start: usize,
    ) -> BoxFuture<'a, StoreResult<Vec<Entry>>> {
        let session = session.to_owned();
        Box::pin(self.with(move |conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT body FROM entries WHERE session = ?1 AND seq >= ?2 ORDER BY seq",
            )?;
            let rows = stmt.query_map(params![session, start as i64], |row| {
                row.get::<_, String>(0)
            })?;
            rows.map(|body| body.map(|b| Entry::decode(&b))).collect()
        }))
    }

    fn put_blobs<'a>(&'a self, blobs: &'a [Blob]) -> BoxFuture<'a, StoreResult<()>> {
        let blobs = blobs.to_vec();
        Box::pin(self.with(move |conn| {
            unsynced(conn, |conn| {
                let tx = conn.transaction()?;
                {
                    let mut insert = tx.prepare_cached(
                        "INSERT OR IGNORE INTO blobs (key, bytes) VALUES (?1, ?2)",
                    )?;
                    for blob in &blobs {
                        insert.execute(params![&blob.key[..], &blob.bytes])?;
                    }
                }
                tx.commit()
            })
        }))
    }

    fn get_blobs<'a>(
        &'a self,
        keys: &'a [MessageKey],
    ) -> BoxFuture<'a, StoreResult<Vec<Option<Vec<u8>>>>> {
        let keys = keys.to_vec();
        Box::pin(self.with(move |conn| {
            let mut stmt = conn.prepare_cached("SELECT bytes FROM blobs WHERE key = ?1")?;
            keys.iter()
                .map(|key| {
                    stmt.query_row(params![&key[..]], |row| row.get::<_, Vec<u8>>(0))
                        .optional()
                })
                .collect()
        }))
    }

    fn next_request_index<'a>(&'a self, session: &'a str) -> BoxFuture<'a, StoreResult<u64>> {
        let session = session.to_owned();
        Box::pin(async move {
            let index = self
                .with(move |conn| {
                    unsynced(conn, |conn| {
                        conn.query_row(
                            "INSERT INTO sessions (id, created_ms, updated_ms, next_request)
                             VALUES (?1, ?2, ?2, 1)
                             ON CONFLICT(id) DO UPDATE
                               SET next_request = next_request + 1, updated_ms = ?2
                             RETURNING next_request - 1",
                            params![session, now_ms() as i64],
                            |row| row.get::<_, i64>(0),
                        )
                    })
                })
                .await?;
            Ok(index.max(0) as u64)
        })
    }

    fn list_sessions(&self, limit: usize) -> BoxFuture<'_, StoreResult<Vec<SessionSummary>>> {
        Box::pin(self.with(move |conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT id, created_ms, updated_ms, entries, next_request FROM sessions
                 ORDER BY updated_ms DESC, id LIMIT ?1",
            )?;
            let rows = stmt.query_map(params![limit as i64], |row| {
                Ok(SessionSummary {
                    id: row.get(0)?,
                    created: row.get::<_, i64>(1)?.max(0) as u64,
                    updated: row.get::<_, i64>(2)?.max(0) as u64,
                    entries: row.get::<_, i64>(3)?.max(0) as u64,
                    requests: row.get::<_, i64>(4)?.max(0) as u64,
                })
            })?;
            rows.collect()
        }))
    }

    fn stats(&self) -> BoxFuture<'_, StoreResult<StoreStats>> {
        Box::pin(self.with(|conn| {
            let (entries, entry_bytes) = conn.query_row(
                "SELECT COUNT(*), COALESCE(SUM(LENGTH(CAST(body AS BLOB))), 0) FROM entries",
                [],
                |row| Ok((row.get::<_, i64>(0)?, row.get::<_, i64>(1)?)),
            )?;
            let (blobs, blob_bytes) = conn.query_row(
                "SELECT COUNT(*), COALESCE(SUM(LENGTH(bytes)), 0) FROM blobs",
                [],
                |row| Ok((row.get::<_, i64>(0)?, row.get::<_, i64>(1)?)),
            )?;
            let sessions = conn.query_row("SELECT COUNT(*) FROM sessions", [], |row| {
                row.get::<_, i64>(0)
            })?;
            Ok(StoreStats {
                sessions: sessions as u64,
                entries: entries as u64,
                entry_bytes: entry_bytes as u64,
                blobs: blobs as u64,
                blob_bytes: blob_bytes as u64,
            })
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn appends_stay_synced_after_unsynced_commits() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(&dir.path().join("s.db")).await.unwrap();
        let synchronous =
            || store.with(|conn| conn.query_row("PRAGMA synchronous", [], |r| r.get::<_, i64>(0)));
        // 2 is FULL.
        assert_eq!(synchronous().await.unwrap(), 2);
        assert_eq!(store.next_request_index("s").await.unwrap(), 0);
        store
            .put_blobs(&[Blob {
                key: [7; 32],
                bytes: vec![1],
            }])
            .await
            .unwrap();
        assert_eq!(synchronous().await.unwrap(), 2);
        let journal: String = store
            .with(|conn| conn.query_row("PRAGMA journal_mode", [], |r| r.get(0)))
            .await
            .unwrap();
        assert_eq!(journal, "wal");
    }
}
