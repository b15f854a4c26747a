//! The embedded store's tables, how a connection is opened, and its migration from older
//! layouts (the first: one global `blobs` table, no per-session sizes; the second: the log
//! and the content in `WITHOUT ROWID` tables).

use std::path::Path;

use rusqlite::{params, Connection, OptionalExtension};

use crate::session::entry::Entry;
use crate::session::store::{StoreError, StoreResult};

/// Pages the write-ahead log holds before it is checkpointed into the database.
pub const WAL_PAGES: i64 = 8_000;

/// `PRAGMA user_version` of the current layout.
const VERSION: i64 = 2;

const TABLES: &str = "
CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY,
    created_ms INTEGER NOT NULL,
    updated_ms INTEGER NOT NULL,
    entries INTEGER NOT NULL DEFAULT 0,
    next_request INTEGER NOT NULL DEFAULT 0,
    entry_bytes INTEGER NOT NULL DEFAULT 0,
    blob_bytes INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS sessions_by_update ON sessions(updated_ms);
CREATE TABLE IF NOT EXISTS entries (
    session TEXT NOT NULL,
    seq INTEGER NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (session, seq)
);
CREATE TABLE IF NOT EXISTS session_blobs (
    session TEXT NOT NULL,
    key BLOB NOT NULL,
    bytes BLOB NOT NULL,
    PRIMARY KEY (session, key)
);
CREATE TABLE IF NOT EXISTS appended_once (
    session TEXT NOT NULL,
    key TEXT NOT NULL,
    first_seq INTEGER NOT NULL,
    count INTEGER NOT NULL,
    PRIMARY KEY (session, key)
) WITHOUT ROWID;
";

fn unavailable(path: &Path, err: impl std::fmt::Display) -> StoreError {
    StoreError::Unavailable(format!("sqlite {}: {err}", path.display()))
}

/// Open (or create) the database, creating its folder when missing.
///
/// The connection holds the database exclusively (`locking_mode = EXCLUSIVE`, set before
/// WAL mode): SQLite then keeps the WAL index in its own memory instead of a memory-mapped
/// `-shm` file, so a store file that is truncated, deleted or on a failing file system
/// gives I/O errors, never a SIGBUS. One cachet process per embedded store; a second one
/// is refused at open (Redis is the store for several instances).
pub fn open(path: &Path) -> StoreResult<Connection> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| {
            StoreError::Unavailable(format!("cannot create {}: {e}", dir.display()))
        })?;
    }
    let conn = Connection::open(path)
        .map_err(|e| StoreError::Unavailable(format!("cannot open {}: {e}", path.display())))?;
    conn.execute_batch(
        "PRAGMA busy_timeout = 2000; PRAGMA locking_mode = EXCLUSIVE; PRAGMA auto_vacuum = INCREMENTAL;",
    )
    .map_err(|e| in_use_or(path, e))?;
    let mode: String = conn
        .query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0))
        .map_err(|e| in_use_or(path, e))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(unavailable(
            path,
            format!("does not support WAL mode (got {mode})"),
        ));
    }
    // The log is copied into the database every `wal_autocheckpoint` pages. Each request
    // record rewrites a few of the same pages (the session's row, the tail of its log), and
    // a page is copied once per checkpoint however often it changed. Once both checkpoint,
    // 8,000 pages (about 32 MB of log) and SQLite's 1,000 cost a monitored request the same
    // CPU within the benchmark's noise (BENCHMARKS.md, "(b) once the session store
    // checkpoints").
    // Each job runs in a savepoint, whose undo pages go to a statement journal; in a
    // transaction left open for deferred records that journal outgrows SQLite's 64 KiB and
    // becomes a temporary file, written on every job. In memory, it is dropped with the
    // transaction.
    conn.execute_batch(&format!(
        "PRAGMA synchronous = FULL; PRAGMA wal_autocheckpoint = {WAL_PAGES}; \
         PRAGMA temp_store = MEMORY;"
    ))
    .map_err(|e| unavailable(path, e))?;
    migrate(&conn).map_err(|e| in_use_or(path, e))?;
    // Room for every statement the store prepares (about twenty): past rusqlite's default
    // of 16 the least recently used is compiled again when next asked for.
    conn.set_prepared_statement_cache_capacity(STATEMENTS_KEPT);
    Ok(conn)
}

/// Prepared statements kept compiled on the store's connection.
const STATEMENTS_KEPT: usize = 64;

fn in_use_or(path: &Path, err: rusqlite::Error) -> StoreError {
    if err.sqlite_error_code() == Some(rusqlite::ErrorCode::DatabaseBusy) {
        unavailable(
            path,
            "in use by another process (one cachet per embedded store; share sessions through Redis)",
        )
    } else {
        unavailable(path, err)
    }
}

/// Create the tables, or bring an older layout up to date, in one transaction (which also
/// takes the exclusive lock at once).
fn migrate(conn: &Connection) -> rusqlite::Result<()> {
    conn.execute_batch("BEGIN IMMEDIATE")?;
    let result = (|| {
        let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
        let had_sessions: bool = conn.query_row(
            "SELECT EXISTS(SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'sessions')",
            [],
            |r| r.get(0),
        )?;
        if version < 1 && had_sessions {
            migrate_from_first_layout(conn)?;
        }
        // `user_version` says the layout: a current store is not looked at again.
        let rebuilt = match version < VERSION && had_sessions {
            true => set_aside_without_rowid_tables(conn)?,
            false => Vec::new(),
        };
        conn.execute_batch(TABLES)?;
        copy_back(conn, &rebuilt)?;
        conn.execute_batch(&format!("PRAGMA user_version = {VERSION}"))
    })();
    match result {
        Ok(()) => conn.execute_batch("COMMIT"),
        Err(e) => {
            let _ = conn.execute_batch("ROLLBACK");
            Err(e)
        }
    }
}

/// The first layout kept content in one global `blobs` table. Each session now keeps its
/// own (so retention can delete a session with its content): every blob a session's
/// request entries name is copied to it, then the global table goes.
fn migrate_from_first_layout(conn: &Connection) -> rusqlite::Result<()> {
    for column in ["entry_bytes", "blob_bytes"] {
        let has: bool = conn.query_row(
            "SELECT EXISTS(SELECT 1 FROM pragma_table_info('sessions') WHERE name = ?1)",
            params![column],
            |r| r.get(0),
        )?;
        if !has {
            conn.execute_batch(&format!(
                "ALTER TABLE sessions ADD COLUMN {column} INTEGER NOT NULL DEFAULT 0"
            ))?;
        }
    }
    conn.execute_batch(TABLES)?;
    conn.execute_batch(
        "UPDATE sessions SET entry_bytes = COALESCE(
            (SELECT SUM(LENGTH(CAST(body AS BLOB))) FROM entries WHERE session = sessions.id), 0)",
    )?;
    let had_blobs: bool = conn.query_row(
        "SELECT EXISTS(SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'blobs')",
        [],
        |r| r.get(0),
    )?;
    if !had_blobs {
        return Ok(());
    }
    {
        let mut bodies = conn.prepare("SELECT session, body FROM entries")?;
        let mut copy = conn.prepare(
            "INSERT OR IGNORE INTO session_blobs (session, key, bytes)
             SELECT ?1, key, bytes FROM blobs WHERE key = ?2",
        )?;
        let rows =
            bodies.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))?;
        for row in rows {
            let (session, body) = row?;
            if let Entry::Request(record) = Entry::decode(&body) {
                let lists = [&record.system_key, &record.tools_key]
                    .into_iter()
                    .filter_map(|k| k.as_deref().and_then(crate::session::entry::decode_key));
                for key in record.sent.keys.iter().copied().chain(lists) {
                    copy.execute(params![session, &key[..]])?;
                }
            }
        }
    }
    conn.execute_batch(
        "UPDATE sessions SET blob_bytes = COALESCE(
            (SELECT SUM(LENGTH(bytes)) FROM session_blobs WHERE session = sessions.id), 0);
         DROP TABLE blobs;",
    )
}

/// The log and the content tables, with the columns a rebuild copies.
const ROW_TABLES: [(&str, &str); 2] = [
    ("entries", "session, seq, body"),
    ("session_blobs", "session, key, bytes"),
];

/// The second layout kept the log and the content in `WITHOUT ROWID` tables. Their rows (a
/// log entry, a message) are far larger than SQLite advises for that layout (a twentieth
/// of a page, <https://sqlite.org/withoutrowid.html>): most spilled into overflow pages,
/// and inserts at random keys split pages full of content. Such a table is renamed here,
/// and [`copy_back`] moves its rows into the rowid table [`TABLES`] creates.
fn set_aside_without_rowid_tables(conn: &Connection) -> rusqlite::Result<Vec<&'static str>> {
    let mut set_aside = Vec::new();
    for (table, _) in ROW_TABLES {
        if without_rowid(conn, table)? {
            tracing::info!(
                table,
                "rebuilding a session store table as a rowid table (once)"
            );
            conn.execute_batch(&format!("ALTER TABLE {table} RENAME TO {table}_layout2"))?;
            set_aside.push(table);
        }
    }
    Ok(set_aside)
}

/// Whether `table` exists and is a `WITHOUT ROWID` table.
fn without_rowid(conn: &Connection, table: &str) -> rusqlite::Result<bool> {
    let wr = conn
        .query_row(
            "SELECT wr FROM pragma_table_list WHERE schema = 'main' AND name = ?1",
            params![table],
            |r| r.get(0),
        )
        .optional()?;
    Ok(wr.unwrap_or(false))
}

fn copy_back(conn: &Connection, tables: &[&str]) -> rusqlite::Result<()> {
    for (table, columns) in ROW_TABLES.iter().filter(|(t, _)| tables.contains(t)) {
        conn.execute_batch(&format!(
            "INSERT INTO {table} ({columns}) SELECT {columns} FROM {table}_layout2;
             DROP TABLE {table}_layout2;"
        ))?;
    }
    if !tables.is_empty() {
        // All of them: nothing waits for the store while it opens.
        give_back_free_pages(conn, u32::MAX)?;
    }
    Ok(())
}

/// Give up to `at_most` of the database's free pages back to the file system (in a store
/// cachet created, which has incremental auto-vacuum; an older file reuses them as it
/// grows). Returns how many it gave back. The pragma frees one page each time it is
/// stepped, so it is stepped to its end (`execute_batch` would step it once).
pub fn give_back_free_pages(conn: &Connection, at_most: u32) -> rusqlite::Result<u32> {
    let mut pragma = conn.prepare(&format!("PRAGMA incremental_vacuum({at_most})"))?;
    let mut freed = pragma.query([])?;
    let mut pages = 0;
    while freed.next()?.is_some() {
        pages += 1;
    }
    Ok(pages)
}

/// Lookups by session, shared by the store's operations.
pub fn entry_count(conn: &Connection, session: &str) -> rusqlite::Result<usize> {
    let count: Option<i64> = conn
        .prepare_cached("SELECT entries FROM sessions WHERE id = ?1")?
        .query_row(params![session], |row| row.get(0))
        .optional()?;
    Ok(count.unwrap_or(0).max(0) as usize)
}

pub fn load_range(
    conn: &Connection,
    session: &str,
    start: usize,
    end: Option<usize>,
) -> rusqlite::Result<Vec<Entry>> {
    let mut stmt = conn.prepare_cached(
        "SELECT body FROM entries WHERE session = ?1 AND seq >= ?2 AND seq < ?3 ORDER BY seq",
    )?;
    let end = end.map(|e| e as i64).unwrap_or(i64::MAX);
    let rows = stmt.query_map(params![session, start as i64, end], |row| {
        Ok(entry_of(row.get_ref(0)?))
    })?;
    rows.collect()
}

/// An entry as its row holds it: JSON text, or (a long record, written in pieces) the
/// same bytes as a blob.
fn entry_of(body: rusqlite::types::ValueRef<'_>) -> Entry {
    use rusqlite::types::ValueRef;
    match body {
        ValueRef::Text(bytes) | ValueRef::Blob(bytes) => {
            std::str::from_utf8(bytes).map_or(Entry::Unknown, Entry::decode)
        }
        _ => Entry::Unknown,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::entry::fixtures::memory_patch;
    use crate::session::store::sqlite::SqliteStore;
    use crate::session::store::SessionStore;
    use sha2::Digest;

    /// The log and content tables as a store of the second layout (`user_version` 1)
    /// created them.
    const SECOND_LAYOUT: &str = "
        PRAGMA auto_vacuum = INCREMENTAL;
        CREATE TABLE sessions (
            id TEXT PRIMARY KEY, created_ms INTEGER NOT NULL, updated_ms INTEGER NOT NULL,
            entries INTEGER NOT NULL DEFAULT 0, next_request INTEGER NOT NULL DEFAULT 0,
            entry_bytes INTEGER NOT NULL DEFAULT 0, blob_bytes INTEGER NOT NULL DEFAULT 0);
        CREATE TABLE entries (session TEXT NOT NULL, seq INTEGER NOT NULL, body TEXT NOT NULL,
            PRIMARY KEY (session, seq)) WITHOUT ROWID;
        CREATE TABLE session_blobs (session TEXT NOT NULL, key BLOB NOT NULL,
            bytes BLOB NOT NULL, PRIMARY KEY (session, key)) WITHOUT ROWID;
        PRAGMA user_version = 1;";

    /// A message key, as the store gets them: a hash, so keys arrive in no order.
    fn key(n: u64) -> [u8; 32] {
        sha2::Sha256::digest(n.to_le_bytes()).into()
    }

    /// Whether the log and the content are both rowid tables.
    fn all_rowid(conn: &Connection) -> bool {
        ROW_TABLES
            .iter()
            .all(|(t, _)| !without_rowid(conn, t).unwrap())
    }

    /// A store of the first layout (one global `blobs` table, no sizes, `user_version` 0)
    /// goes through both migrations: each session gets the content its records name, with
    /// its sizes, in rowid tables, and the global table goes.
    #[tokio::test]
    async fn a_first_layout_store_gets_per_session_content_in_rowid_tables() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.db");
        let (named, system, unnamed) = (key(1), key(2), key(3));
        let mut record = crate::session::entry::RequestRecord::default();
        record.sent.keys = vec![named];
        record.system_key = Some(hex::encode(system));
        let body = Entry::Request(record).encode();
        {
            let conn = Connection::open(&path).unwrap();
            conn.execute_batch(
                "CREATE TABLE sessions (id TEXT PRIMARY KEY, created_ms INTEGER NOT NULL,
                    updated_ms INTEGER NOT NULL, entries INTEGER NOT NULL DEFAULT 0,
                    next_request INTEGER NOT NULL DEFAULT 0);
                 CREATE INDEX sessions_by_update ON sessions(updated_ms);
                 CREATE TABLE entries (session TEXT NOT NULL, seq INTEGER NOT NULL,
                    body TEXT NOT NULL, PRIMARY KEY (session, seq)) WITHOUT ROWID;
                 CREATE TABLE blobs (key BLOB PRIMARY KEY, bytes BLOB NOT NULL) WITHOUT ROWID;
                 INSERT INTO sessions VALUES ('s', 1, 1, 1, 1);",
            )
            .unwrap();
            conn.execute("INSERT INTO entries VALUES ('s', 0, ?1)", params![body])
                .unwrap();
            for (k, bytes) in [(named, "message"), (system, "system"), (unnamed, "other")] {
                conn.execute(
                    "INSERT INTO blobs VALUES (?1, ?2)",
                    params![&k[..], bytes.as_bytes()],
                )
                .unwrap();
            }
        }
        let store = SqliteStore::open(&path).await.unwrap();
        assert_eq!(store.load("s").await.unwrap().len(), 1);
        let found = store
            .get_blobs("s", &[named, system, unnamed])
            .await
            .unwrap();
        let text = |t: &str| Some(t.as_bytes().to_vec());
        assert_eq!(found, vec![text("message"), text("system"), None]);
        let (sizes, rowid, global) = store
            .read(|c| {
                let sizes: (i64, i64) = c.query_row(
                    "SELECT entry_bytes, blob_bytes FROM sessions WHERE id = 's'",
                    [],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )?;
                let rowid = all_rowid(c);
                let global: bool = c.query_row(
                    "SELECT EXISTS(SELECT 1 FROM sqlite_master WHERE name = 'blobs')",
                    [],
                    |r| r.get(0),
                )?;
                Ok((sizes, rowid, global))
            })
            .await
            .unwrap();
        let stored = ("message".len() + "system".len()) as i64;
        assert_eq!(sizes, (body.len() as i64, stored));
        assert!(rowid && !global);
        store.close().await;
    }

    /// A store of the second layout opens with its log and content, in rowid tables, and
    /// goes on numbering where it stopped; opening it again changes nothing.
    #[tokio::test]
    async fn a_second_layout_store_keeps_its_log_and_content_in_rowid_tables() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.db");
        let entries: Vec<Entry> = (0..3).map(memory_patch).collect();
        let contents: Vec<Vec<u8>> = (0..4).map(|n| vec![b'm'; 500 * (n + 1)]).collect();
        {
            let conn = Connection::open(&path).unwrap();
            conn.execute_batch(SECOND_LAYOUT).unwrap();
            conn.execute("INSERT INTO sessions VALUES ('s', 1, 1, 3, 3, 0, 0)", [])
                .unwrap();
            for (seq, entry) in entries.iter().enumerate() {
                conn.execute(
                    "INSERT INTO entries VALUES ('s', ?1, ?2)",
                    params![seq as i64, entry.encode()],
                )
                .unwrap();
            }
            for (n, bytes) in contents.iter().enumerate() {
                conn.execute(
                    "INSERT INTO session_blobs VALUES ('s', ?1, ?2)",
                    params![&key(n as u64)[..], bytes],
                )
                .unwrap();
            }
        }
        let keys: Vec<[u8; 32]> = (0..4).map(key).collect();
        for reopening in 0..2u64 {
            let store = SqliteStore::open(&path).await.unwrap();
            let log = store.load("s").await.unwrap();
            assert_eq!(log.len() as u64, 3 + reopening);
            assert_eq!(log.to_vec()[..3], entries[..]);
            let found = store.get_blobs("s", &keys).await.unwrap();
            assert_eq!(
                found,
                contents.iter().cloned().map(Some).collect::<Vec<_>>()
            );
            let (version, rowid, leftovers, free_pages) = store
                .read(|c| {
                    let version: i64 = c.query_row("PRAGMA user_version", [], |r| r.get(0))?;
                    let rowid = all_rowid(c);
                    let leftovers: i64 = c.query_row(
                        "SELECT COUNT(*) FROM sqlite_master WHERE name LIKE '%layout2%'",
                        [],
                        |r| r.get(0),
                    )?;
                    let free: i64 = c.query_row("PRAGMA freelist_count", [], |r| r.get(0))?;
                    Ok((version, rowid, leftovers, free))
                })
                .await
                .unwrap();
            assert_eq!((version, rowid, leftovers), (VERSION, true, 0));
            assert_eq!(
                free_pages, 0,
                "the old tables' pages are given back ({reopening})"
            );
            if reopening == 0 {
                let (index, _) = store
                    .record_next("s", memory_patch(3), vec![])
                    .await
                    .unwrap();
                assert_eq!(index, 3, "numbering goes on where it stopped");
            }
            store.close().await;
        }
    }
}
