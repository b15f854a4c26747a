//! The embedded store's operations, each run by the writer thread on its connection.

use rusqlite::{params, Connection, OptionalExtension};

use super::schema::load_range;
use crate::providers::cache_key::{self, MessageKey, Out};
use crate::session::entry::{now_ms, Entry};
use crate::session::store::{
    Appended, Blob, BlobBytes, Retention, SessionSummary, StoreStats, SweepReport,
};

/// Sessions deleted per write job of a sweep.
pub const SWEEP_SLICE: usize = 200;

/// Append encoded entries; returns the position of the first.
pub fn append(
    conn: &Connection,
    session: &str,
    bodies: &[impl AsRef<str>],
) -> rusqlite::Result<i64> {
    let added = bodies.len() as i64;
    let bytes: i64 = bodies.iter().map(|b| b.as_ref().len() as i64).sum();
    let total: i64 = conn
        .prepare_cached(
            "INSERT INTO sessions (id, created_ms, updated_ms, entries, entry_bytes)
             VALUES (?1, ?2, ?2, ?3, ?4)
             ON CONFLICT(id) DO UPDATE SET entries = entries + ?3, updated_ms = ?2,
               entry_bytes = entry_bytes + ?4
             RETURNING entries",
        )?
        .query_row(params![session, now_ms() as i64, added, bytes], |row| {
            row.get(0)
        })?;
    let first = total - added;
    for (i, body) in bodies.iter().enumerate() {
        insert_text(conn, session, first + i as i64, body.as_ref())?;
    }
    Ok(first)
}

/// Append unless `key` was appended for this session already; then answer those entries.
pub fn append_once(
    conn: &Connection,
    session: &str,
    key: &str,
    bodies: &[String],
) -> rusqlite::Result<Appended> {
    let earlier: Option<(i64, i64)> = conn
        .prepare_cached(
            "SELECT first_seq, count FROM appended_once WHERE session = ?1 AND key = ?2",
        )?
        .query_row(params![session, key], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    if let Some((first, count)) = earlier {
        let (first, count) = (first.max(0) as usize, count.max(0) as usize);
        return Ok(Appended::Existing(load_range(
            conn,
            session,
            first,
            Some(first + count),
        )?));
    }
    let first = append(conn, session, bodies)?;
    conn.prepare_cached(
        "INSERT INTO appended_once (session, key, first_seq, count) VALUES (?1, ?2, ?3, ?4)",
    )?
    .execute(params![session, key, first, bodies.len() as i64])?;
    Ok(Appended::Written {
        at: first.max(0) as u64,
    })
}

/// A request record and the content blobs the session does not hold yet; returns the
/// record's position.
pub fn record(
    conn: &Connection,
    session: &str,
    body: &str,
    blobs: &[Blob],
) -> rusqlite::Result<i64> {
    let at = append(conn, session, &[body])?;
    let added = store_blobs(conn, session, blobs)?;
    if added > 0 {
        conn.prepare_cached("UPDATE sessions SET blob_bytes = blob_bytes + ?2 WHERE id = ?1")?
            .execute(params![session, added])?;
    }
    Ok(at)
}

/// A request record numbered with the session's next request index, and the content blobs
/// the session does not hold yet; returns the index and the record's position. Both
/// counters move in one update of the session's row (the one that moves it in the
/// by-update index); the sizes follow in a second that touches no index. What
/// [`next_request_index`] then [`record`] would write; with the index `taken` in memory
/// instead when there is one, which the counter is moved past.
pub fn record_next(
    conn: &Connection,
    session: &str,
    now: u64,
    entry: Entry,
    blobs: &[Blob],
    taken: Option<u64>,
) -> rusqlite::Result<(u64, i64)> {
    let (counted, at): (i64, i64) = conn
        .prepare_cached(
            "INSERT INTO sessions (id, created_ms, updated_ms, entries, next_request)
             VALUES (?1, ?2, ?2, 1, COALESCE(?3, 0) + 1)
             ON CONFLICT(id) DO UPDATE SET entries = entries + 1,
               next_request = CASE WHEN ?3 IS NULL THEN next_request + 1
                                   ELSE max(next_request, ?3 + 1) END,
               updated_ms = ?2
             RETURNING next_request - 1, entries - 1",
        )?
        .query_row(
            params![session, now as i64, taken.map(|i| i as i64)],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )?;
    let index = taken.unwrap_or(counted.max(0) as u64);
    let written = insert_entry(conn, session, at, &entry.with_request_index(index))?;
    let added = store_blobs(conn, session, blobs)?;
    conn.prepare_cached(
        "UPDATE sessions SET entry_bytes = entry_bytes + ?2, blob_bytes = blob_bytes + ?3
         WHERE id = ?1",
    )?
    .execute(params![session, written as i64, added])?;
    Ok((index, at))
}

/// One entry at `seq`; returns its length. The record of a long history is written into
/// its row in pieces as it is encoded, so neither cachet nor SQLite holds its JSON whole.
fn insert_entry(
    conn: &Connection,
    session: &str,
    seq: i64,
    entry: &Entry,
) -> rusqlite::Result<usize> {
    let len = (entry.size_hint() >= WRITTEN_IN_PIECES).then(|| entry.encoded_len());
    if let Some(len) = len.filter(|&len| len >= WRITTEN_IN_PIECES) {
        insert_entry_in_pieces(conn, session, seq, len, |row| entry.encode_to(row).ok())?;
        return Ok(len);
    }
    let body = entry.encode();
    insert_text(conn, session, seq, &body)?;
    Ok(body.len())
}

/// One entry's text at `seq`: bound, or, from [`WRITTEN_IN_PIECES`] on, written into its
/// row in pieces (binding text copies it into SQLite, and building the row copies it
/// again).
fn insert_text(conn: &Connection, session: &str, seq: i64, body: &str) -> rusqlite::Result<()> {
    if body.len() >= WRITTEN_IN_PIECES {
        return insert_entry_in_pieces(conn, session, seq, body.len(), |row| {
            row.extend_from_slice(body.as_bytes());
            Some(())
        });
    }
    conn.prepare_cached("INSERT INTO entries (session, seq, body) VALUES (?1, ?2, ?3)")?
        .execute(params![session, seq, body])?;
    Ok(())
}

/// An entry's row whose body is `write`'s `len` bytes, written in pieces. The row holds
/// them as a blob, which [`load_range`] reads as the text it is.
fn insert_entry_in_pieces(
    conn: &Connection,
    session: &str,
    seq: i64,
    len: usize,
    write: impl FnOnce(&mut RowWriter<'_>) -> Option<()>,
) -> rusqlite::Result<()> {
    conn.prepare_cached("INSERT INTO entries (session, seq, body) VALUES (?1, ?2, zeroblob(?3))")?
        .execute(params![session, seq, len as i64])?;
    fill_in_pieces(conn, "entries", "body", len, write)
}

/// Blobs this large or larger are written into their row in pieces: binding one copies it
/// into SQLite, and building the row copies it again, two more copies of a message of
/// megabytes (a pasted file) held at once.
const WRITTEN_IN_PIECES: usize = 1 << 20;

/// Store the blobs the session does not hold yet; returns the bytes added.
fn store_blobs(conn: &Connection, session: &str, blobs: &[Blob]) -> rusqlite::Result<i64> {
    let mut known = conn.prepare_cached(
        "SELECT EXISTS(SELECT 1 FROM session_blobs WHERE session = ?1 AND key = ?2)",
    )?;
    let mut insert =
        conn.prepare_cached("INSERT INTO session_blobs (session, key, bytes) VALUES (?1, ?2, ?3)")?;
    let mut added = 0i64;
    for blob in blobs {
        // Checked first, so content already stored is never copied into a statement again.
        if known.query_row(params![session, &blob.key[..]], |r| r.get::<_, bool>(0))? {
            continue;
        }
        // A large message as sent is made canonical straight into its row, never whole in
        // memory: once counted, then written.
        if let BlobBytes::Sent(raw) = &blob.bytes {
            let len = (raw.len() >= WRITTEN_IN_PIECES)
                .then(|| cache_key::canonical_len_of_raw(raw))
                .flatten();
            if let Some(len) = len {
                insert_in_pieces(conn, session, &blob.key, len, |row| {
                    cache_key::write_canonical_of_raw(raw, row)
                })?;
                added += len as i64;
                continue;
            }
        }
        // Made canonical here, one message at a time.
        let Some(bytes) = blob.stored_bytes() else {
            continue;
        };
        if bytes.len() >= WRITTEN_IN_PIECES {
            insert_in_pieces(conn, session, &blob.key, bytes.len(), |row| {
                row.extend_from_slice(&bytes);
                Some(())
            })?;
        } else {
            insert.execute(params![session, &blob.key[..], &bytes[..]])?;
        }
        added += bytes.len() as i64;
    }
    Ok(added)
}

/// The row with a blob of zeros of `len` bytes (SQLite writes its pages without a buffer
/// of that size), then `write`'s bytes written over them in place, in pieces.
fn insert_in_pieces(
    conn: &Connection,
    session: &str,
    key: &MessageKey,
    len: usize,
    write: impl FnOnce(&mut RowWriter<'_>) -> Option<()>,
) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "INSERT INTO session_blobs (session, key, bytes) VALUES (?1, ?2, zeroblob(?3))",
    )?
    .execute(params![session, &key[..], len as i64])?;
    fill_in_pieces(conn, "session_blobs", "bytes", len, write)
}

/// `write`'s bytes written in pieces over the `len` zeros of `column` in the row just
/// inserted into `table`.
fn fill_in_pieces(
    conn: &Connection,
    table: &str,
    column: &str,
    len: usize,
    write: impl FnOnce(&mut RowWriter<'_>) -> Option<()>,
) -> rusqlite::Result<()> {
    let blob = conn.blob_open(
        rusqlite::DatabaseName::Main,
        table,
        column,
        conn.last_insert_rowid(),
        false,
    )?;
    let mut row = RowWriter {
        blob,
        pending: Vec::new(),
        at: 0,
        failed: None,
    };
    let written = write(&mut row);
    row.flush();
    if let Some(e) = row.failed {
        return Err(e);
    }
    if written.is_none() || row.at != len {
        // The bytes did not come out as counted: the job fails rather than keep the row.
        return Err(rusqlite::Error::BlobSizeError);
    }
    Ok(())
}

/// Writes a blob's bytes at their place in its row, small pieces gathered first.
struct RowWriter<'c> {
    blob: rusqlite::blob::Blob<'c>,
    pending: Vec<u8>,
    at: usize,
    failed: Option<rusqlite::Error>,
}

impl RowWriter<'_> {
    const PIECE: usize = 64 * 1024;

    fn write(&mut self, bytes: &[u8]) {
        if self.failed.is_some() {
            return;
        }
        match self.blob.write_at(bytes, self.at) {
            Ok(()) => self.at += bytes.len(),
            Err(e) => self.failed = Some(e),
        }
    }

    fn flush(&mut self) {
        let pending = std::mem::take(&mut self.pending);
        if !pending.is_empty() {
            self.write(&pending);
        }
        self.pending = pending;
        self.pending.clear();
    }
}

impl Out for RowWriter<'_> {
    fn extend_from_slice(&mut self, bytes: &[u8]) {
        if self.pending.len() + bytes.len() <= Self::PIECE {
            self.pending.extend_from_slice(bytes);
            return;
        }
        self.flush();
        if bytes.len() < Self::PIECE {
            self.pending.extend_from_slice(bytes);
        } else {
            self.write(bytes);
        }
    }
}

impl std::io::Write for RowWriter<'_> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

pub fn get_blobs(
    conn: &Connection,
    session: &str,
    keys: &[MessageKey],
) -> rusqlite::Result<Vec<Option<Vec<u8>>>> {
    let mut stmt =
        conn.prepare_cached("SELECT bytes FROM session_blobs WHERE session = ?1 AND key = ?2")?;
    keys.iter()
        .map(|key| {
            stmt.query_row(params![session, &key[..]], |row| row.get::<_, Vec<u8>>(0))
                .optional()
        })
        .collect()
}

pub fn next_request_index(conn: &Connection, session: &str, now: u64) -> rusqlite::Result<u64> {
    let index: i64 = conn
        .prepare_cached(
            "INSERT INTO sessions (id, created_ms, updated_ms, next_request)
             VALUES (?1, ?2, ?2, 1)
             ON CONFLICT(id) DO UPDATE
               SET next_request = next_request + 1, updated_ms = ?2
             RETURNING next_request - 1",
        )?
        .query_row(params![session, now as i64], |row| row.get(0))?;
    Ok(index.max(0) as u64)
}

/// Move the session's request counter to `next`, for indexes taken in memory
/// ([`super::counters`]); never back.
pub fn count_past(conn: &Connection, session: &str, now: u64, next: u64) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "INSERT INTO sessions (id, created_ms, updated_ms, next_request)
         VALUES (?1, ?2, ?2, ?3)
         ON CONFLICT(id) DO UPDATE
           SET next_request = max(next_request, ?3), updated_ms = ?2",
    )?
    .execute(params![session, now as i64, next as i64])
    .map(drop)
}

pub fn list_sessions(conn: &Connection, limit: usize) -> rusqlite::Result<Vec<SessionSummary>> {
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
}

pub fn stats(conn: &Connection) -> rusqlite::Result<StoreStats> {
    let (sessions, entries, entry_bytes, blob_bytes) = conn.query_row(
        "SELECT COUNT(*), COALESCE(SUM(entries), 0), COALESCE(SUM(entry_bytes), 0),
                COALESCE(SUM(blob_bytes), 0) FROM sessions",
        [],
        |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, i64>(1)?,
                r.get::<_, i64>(2)?,
                r.get::<_, i64>(3)?,
            ))
        },
    )?;
    let blobs: i64 = conn.query_row("SELECT COUNT(*) FROM session_blobs", [], |r| r.get(0))?;
    Ok(StoreStats {
        sessions: sessions.max(0) as u64,
        entries: entries.max(0) as u64,
        entry_bytes: entry_bytes.max(0) as u64,
        blobs: blobs.max(0) as u64,
        blob_bytes: blob_bytes.max(0) as u64,
    })
}

/// Delete up to [`SWEEP_SLICE`] sessions: first those idle past the age limit, then, while
/// the store is over its size limit, the least recently active ones (never one active
/// within [`KEEP_ACTIVE_MS`](crate::session::store::maintenance::KEEP_ACTIVE_MS)).
pub fn sweep_slice(
    conn: &Connection,
    retention: &Retention,
    now: u64,
) -> rusqlite::Result<SweepReport> {
    let mut report = SweepReport::default();
    if let Some(cutoff) = retention.age_cutoff(now) {
        let expired: Vec<(String, i64)> = conn
            .prepare_cached(
                "SELECT id, entry_bytes + blob_bytes FROM sessions WHERE updated_ms < ?1
                 ORDER BY updated_ms LIMIT ?2",
            )?
            .query_map(params![cutoff as i64, SWEEP_SLICE as i64], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })?
            .collect::<rusqlite::Result<_>>()?;
        for (id, bytes) in expired {
            delete_session(conn, &id)?;
            report.expired += 1;
            report.bytes_freed += bytes.max(0) as u64;
        }
    }
    let Some(max) = retention.max_bytes else {
        return Ok(report);
    };
    let mut total: i64 = conn.query_row(
        "SELECT COALESCE(SUM(entry_bytes + blob_bytes), 0) FROM sessions",
        [],
        |r| r.get(0),
    )?;
    let room = SWEEP_SLICE as u64 - report.expired;
    if total <= max as i64 || room == 0 {
        return Ok(report);
    }
    let oldest: Vec<(String, i64)> = conn
        .prepare_cached(
            "SELECT id, entry_bytes + blob_bytes FROM sessions WHERE updated_ms < ?1
             ORDER BY updated_ms, id LIMIT ?2",
        )?
        .query_map(
            params![retention.size_cutoff(now) as i64, room as i64],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?
        .collect::<rusqlite::Result<_>>()?;
    for (id, bytes) in oldest {
        if total <= max as i64 {
            break;
        }
        delete_session(conn, &id)?;
        total -= bytes;
        report.evicted += 1;
        report.bytes_freed += bytes.max(0) as u64;
    }
    Ok(report)
}

fn delete_session(conn: &Connection, id: &str) -> rusqlite::Result<()> {
    for sql in [
        "DELETE FROM entries WHERE session = ?1",
        "DELETE FROM session_blobs WHERE session = ?1",
        "DELETE FROM appended_once WHERE session = ?1",
        "DELETE FROM sessions WHERE id = ?1",
    ] {
        conn.prepare_cached(sql)?.execute(params![id])?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tests measuring SQLite's memory, one at a time: each resets the process-wide
    /// high-water mark, and each writes megabytes another would count as its own.
    static MEASURING: std::sync::Mutex<()> = std::sync::Mutex::new(());

    /// The most SQLite's own allocator held at once while `f` ran, above what it held
    /// before. Process-wide, so the least of three runs is taken: other tests' SQLite use
    /// can only add to a run (and no other measurement runs meanwhile).
    fn sqlite_peak(mut f: impl FnMut(usize)) -> usize {
        let _one_at_a_time = MEASURING
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        (0..3)
            .map(|run| {
                // SAFETY: plain reads of SQLite's memory statistics (reset to the current
                // use by the flag).
                let before = unsafe {
                    rusqlite::ffi::sqlite3_memory_highwater(1);
                    rusqlite::ffi::sqlite3_memory_used()
                };
                f(run);
                let peak = unsafe { rusqlite::ffi::sqlite3_memory_highwater(0) };
                (peak - before).max(0) as usize
            })
            .min()
            .unwrap_or(0)
    }

    /// A message of megabytes is written into its row without SQLite holding a copy of it
    /// (binding a blob copies it, and building the row copies it again), and reads back
    /// whole.
    #[test]
    fn a_huge_blob_is_stored_without_copies_of_it() {
        let dir = tempfile::tempdir().unwrap();
        let conn = super::super::schema::open(&dir.path().join("s.db")).unwrap();
        let big: Vec<u8> = (0..8u32 << 20).map(|i| (i % 251) as u8).collect();
        let small = b"{\"role\":\"user\"}".to_vec();
        let blobs = |run: usize| {
            [
                Blob::canonical([run as u8; 32], big.clone()),
                Blob::canonical([run as u8 + 100; 32], small.clone()),
            ]
        };
        let peak = sqlite_peak(|run| {
            let added = store_blobs(&conn, "s", &blobs(run)).unwrap();
            assert_eq!(added as usize, big.len() + small.len());
        });
        assert!(
            peak < big.len() / 2,
            "SQLite held {peak} bytes to store {}",
            big.len()
        );
        let back = get_blobs(&conn, "s", &[[0; 32], [100; 32], [7; 32]]).unwrap();
        assert_eq!(back, vec![Some(big.clone()), Some(small.clone()), None]);
        // Stored once: a second write of the same keys adds nothing.
        assert_eq!(store_blobs(&conn, "s", &blobs(0)).unwrap(), 0);
    }

    /// A large message as sent is made canonical straight into its row: neither cachet nor
    /// SQLite holds its canonical form whole, and the row holds exactly that form.
    #[test]
    fn a_huge_sent_message_is_made_canonical_into_its_row() {
        let dir = tempfile::tempdir().unwrap();
        let conn = super::super::schema::open(&dir.path().join("s.db")).unwrap();
        let text = "fn main() { println!(\"hi\"); }\n".repeat(80_000);
        let message = serde_json::json!({"role": "user", "content": [
            {"type": "text", "text": text, "cache_control": {"type": "ephemeral"}}]});
        let raw = bytes::Bytes::from(serde_json::to_vec(&message).unwrap());
        let canonical = cache_key::canonical_bytes(&message);
        let key = cache_key::key_of_bytes(&canonical);
        let blobs = [Blob::sent(key, raw.clone())];
        let mut held = 0;
        let sqlite = sqlite_peak(|run| {
            conn.execute("DELETE FROM session_blobs", []).unwrap();
            let (added, peak) = crate::alloc_meter::peak_during(|| {
                store_blobs(&conn, &format!("s{run}"), &blobs).unwrap()
            });
            assert_eq!(added as usize, canonical.len());
            held = peak;
        });
        assert!(
            held < raw.len() / 4,
            "{held} bytes held to store {}",
            raw.len()
        );
        assert!(sqlite < raw.len() / 2, "SQLite held {sqlite} bytes");
        let back = get_blobs(&conn, "s2", &[key]).unwrap();
        assert_eq!(back, vec![Some(canonical)]);
    }

    /// The record of a long history (megabytes of keys) is written into its row in
    /// pieces: neither cachet nor SQLite holds its JSON whole (binding text copies it, and
    /// building the row copies it again), and it reads back as the entry it was.
    #[test]
    fn a_long_record_is_written_into_its_row_without_copies_of_it() {
        use crate::session::entry::{RequestRecord, SentMessages};
        let dir = tempfile::tempdir().unwrap();
        let conn = super::super::schema::open(&dir.path().join("s.db")).unwrap();
        let keys: Vec<MessageKey> = (0..40_000u32)
            .map(|i| cache_key::key_of_bytes(&i.to_le_bytes()))
            .collect();
        let entry = Entry::Request(RequestRecord {
            model: "claude-sonnet-4-5".into(),
            sent: SentMessages {
                count: keys.len(),
                hash: "h".into(),
                keys,
                ..Default::default()
            },
            ..Default::default()
        });
        let len = entry.clone().with_request_index(0).encode().len();
        assert!(len > 2 << 20, "a record of {len} bytes");
        let mut held = 0;
        let sqlite = sqlite_peak(|run| {
            let session = format!("s{run}");
            let entry = entry.clone();
            let (written, peak) = crate::alloc_meter::peak_during(|| {
                record_next(&conn, &session, 1, entry, &[], None).unwrap()
            });
            assert_eq!(written, (0, 0));
            held = peak;
        });
        assert!(held < len / 4, "{held} bytes held to write {len}");
        assert!(
            sqlite < len / 4,
            "SQLite held {sqlite} bytes to write {len}"
        );
        assert_eq!(load_range(&conn, "s2", 0, None).unwrap(), vec![entry]);
        let counted: i64 = conn
            .query_row(
                "SELECT entry_bytes FROM sessions WHERE id = 's2'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(counted as usize, len);
    }

    /// A record is written as the text it is: a record of a long history is megabytes of
    /// JSON, and a copy of it made to bind it was held beside it, then SQLite's two (the
    /// bound text, the row built from it).
    #[test]
    fn a_record_is_written_without_a_copy_of_it() {
        let dir = tempfile::tempdir().unwrap();
        let conn = super::super::schema::open(&dir.path().join("s.db")).unwrap();
        let body = format!("{{\"keys\":[{}\"\"]}}", "\"ab\",".repeat(400_000));
        let mut held = 0;
        let sqlite = sqlite_peak(|run| {
            let session = format!("s{run}");
            let (at, peak) =
                crate::alloc_meter::peak_during(|| record(&conn, &session, &body, &[]));
            assert_eq!(at.unwrap(), 0);
            held = peak;
        });
        let len = body.len();
        assert!(held < len / 4, "{held} bytes held to write {len}");
        assert!(
            sqlite < len / 4,
            "SQLite held {sqlite} bytes to write {len}"
        );
        let stored: Vec<u8> = conn
            .query_row("SELECT body FROM entries WHERE session = 's2'", [], |r| {
                r.get(0)
            })
            .unwrap();
        assert_eq!(stored, body.as_bytes());
    }
}
