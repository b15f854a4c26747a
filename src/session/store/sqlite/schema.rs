//! The embedded store's tables, how a connection is opened, and its migration from the
//! first layout (one global `blobs` table, no per-session sizes).

use std::path::Path;

use rusqlite::{params, Connection, OptionalExtension};

use crate::session::entry::Entry;
use crate::session::store::{StoreError, StoreResult};

/// Pages the write-ahead log holds before it is checkpointed into the database.
pub const WAL_PAGES: i64 = 8_000;

/// `PRAGMA user_version` of the current layout.
const VERSION: i64 = 1;

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
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS session_blobs (
    session TEXT NOT NULL,
    key BLOB NOT NULL,
    bytes BLOB NOT NULL,
    PRIMARY KEY (session, key)
) WITHOUT ROWID;
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
    // a page is copied once per checkpoint however often it changed: 8,000 pages (about
    // 32 MB of log) took about 7% off a monitored request's CPU against SQLite's 1,000.
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
    Ok(conn)
}

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
        if version < VERSION && had_sessions {
            migrate_from_first_layout(conn)?;
        }
        conn.execute_batch(TABLES)?;
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
                let keys = record
                    .sent
                    .keys
                    .iter()
                    .chain(record.system_key.iter())
                    .chain(record.tools_key.iter());
                for hex_key in keys {
                    let mut key = [0u8; 32];
                    if hex::decode_to_slice(hex_key, &mut key).is_ok() {
                        copy.execute(params![session, &key[..]])?;
                    }
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
        row.get::<_, String>(0)
    })?;
    rows.map(|body| body.map(|b| Entry::decode(&b))).collect()
}
