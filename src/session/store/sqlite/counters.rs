//! Request counters kept in memory, so that a shaped request takes its index without a
//! trip to the store's thread.
//!
//! Once the thread has counted a session's request from the database, it remembers the
//! next index. A request takes it from there, on its own thread, and the count it leaves
//! is written to the database by the thread with its next write batch, in that batch's
//! transaction: taking an index wakes nothing. Anything that could refer to the index
//! (the request's record, a patch it persists) is a write that comes after it, so its
//! batch carries the count; a stop writes what is left. The thread takes indexes from the
//! same memory, so each is given once whichever side takes it.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use rusqlite::Connection;

use super::ops;

/// Sessions whose next index is remembered (about 100 bytes each).
const SESSIONS_KEPT: usize = 16_384;

#[derive(Default)]
pub struct RequestCounters(Mutex<Counters>);

#[derive(Default)]
struct Counters {
    /// Each counted session's next index.
    next: HashMap<String, u64>,
    /// Counts taken in memory that the database has not been given yet: the next index.
    unwritten: HashMap<String, u64>,
}

impl RequestCounters {
    fn lock(&self) -> MutexGuard<'_, Counters> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The session's next request index, counted past, when it is known; the count is
    /// left for the thread to write. Called on any thread: the count moves under the lock.
    pub fn take(&self, session: &str) -> Option<u64> {
        let Counters { next, unwritten } = &mut *self.lock();
        let next = next.get_mut(session)?;
        let index = *next;
        *next += 1;
        match unwritten.get_mut(session) {
            Some(count) => *count = *next,
            None => {
                unwritten.insert(session.to_owned(), *next);
            }
        }
        Some(index)
    }

    /// As [`take`](Self::take), for a write that moves the database's counter itself.
    fn take_written(&self, session: &str) -> Option<u64> {
        let mut counters = self.lock();
        let next = counters.next.get_mut(session)?;
        let index = *next;
        *next += 1;
        Some(index)
    }

    /// On the store's thread: `write` with the session's next index when it is known, else
    /// with `None`, for the database to count it (after any count of the session not
    /// written yet); the index written is remembered, and the next one is known. `write`
    /// moves the database's counter past the index either way, so a record that takes its
    /// own index writes its count in its own statement, not in a second one.
    pub fn numbered<T>(
        &self,
        conn: &Connection,
        session: &str,
        now: u64,
        write: impl FnOnce(Option<u64>) -> rusqlite::Result<(u64, T)>,
    ) -> rusqlite::Result<(u64, T)> {
        let taken = self.take_written(session);
        if taken.is_none() {
            // Its memory was forgotten after a count was taken from it.
            let pending = self.lock().unwritten.remove(session);
            if let Some(next) = pending {
                ops::count_past(conn, session, now, next)?;
            }
        }
        let (index, written) = write(taken)?;
        if taken.is_none() {
            let mut counters = self.lock();
            if counters.next.len() >= SESSIONS_KEPT {
                counters.next.clear();
            }
            counters.next.insert(session.to_owned(), index + 1);
        }
        Ok((index, written))
    }

    /// On the store's thread: the session's next request index, from memory when it is
    /// known (the database's counter moved past it here), else counted by the database.
    pub fn next_index(&self, conn: &Connection, session: &str, now: u64) -> rusqlite::Result<u64> {
        self.numbered(conn, session, now, |taken| match taken {
            Some(index) => Ok((index, ops::count_past(conn, session, now, index + 1)?)),
            None => Ok((ops::next_request_index(conn, session, now)?, ())),
        })
        .map(|(index, ())| index)
    }

    /// On the store's thread, in a write transaction: give the database every count taken
    /// since the last time. What fails is not tried again.
    pub fn write(&self, conn: &Connection, now: u64) -> rusqlite::Result<()> {
        let unwritten = std::mem::take(&mut self.lock().unwritten);
        for (session, next) in unwritten {
            ops::count_past(conn, &session, now, next)?;
        }
        Ok(())
    }

    /// Whether counts are waiting to be written.
    pub fn any_unwritten(&self) -> bool {
        !self.lock().unwritten.is_empty()
    }

    /// Sessions were deleted: count theirs from the database again. Counts taken and not
    /// written yet are still written (the request that took one is on its way).
    pub fn forget(&self) {
        self.lock().next.clear();
    }

    /// A commit was lost, with any counts written in it: write every known count again.
    pub fn rewrite(&self) {
        let Counters { next, unwritten } = &mut *self.lock();
        for (session, count) in next.iter() {
            unwritten.insert(session.clone(), *count);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counted(conn: &Connection, session: &str) -> u64 {
        conn.query_row(
            "SELECT next_request FROM sessions WHERE id = ?1",
            [session],
            |r| r.get::<_, i64>(0),
        )
        .unwrap() as u64
    }

    fn by_the_thread(counters: &RequestCounters, conn: &Connection, session: &str) -> u64 {
        counters.next_index(conn, session, 1).unwrap()
    }

    /// An index taken in memory, then the memory forgotten (sessions deleted, or too many
    /// kept) before its count was written: the thread writes that count before it counts
    /// the session from the database again, so the index is not given twice.
    #[test]
    fn a_count_taken_before_the_memory_was_forgotten_is_not_given_again() {
        let dir = tempfile::tempdir().unwrap();
        let conn = super::super::schema::open(&dir.path().join("s.db")).unwrap();
        let counters = RequestCounters::default();
        assert_eq!(by_the_thread(&counters, &conn, "s"), 0);
        assert_eq!(counters.take("s"), Some(1));
        counters.forget();
        assert_eq!(counters.take("s"), None);
        assert_eq!(by_the_thread(&counters, &conn, "s"), 2);
        assert_eq!(counters.take("s"), Some(3));
        counters.write(&conn, 1).unwrap();
        assert_eq!(counted(&conn, "s"), 4);
    }

    /// Counts written in a transaction whose commit is lost are written again.
    #[test]
    fn counts_of_a_lost_commit_are_written_again() {
        let dir = tempfile::tempdir().unwrap();
        let conn = super::super::schema::open(&dir.path().join("s.db")).unwrap();
        let counters = RequestCounters::default();
        assert_eq!(by_the_thread(&counters, &conn, "s"), 0);
        assert_eq!(counters.take("s"), Some(1));
        conn.execute_batch("BEGIN").unwrap();
        counters.write(&conn, 1).unwrap();
        assert!(!counters.any_unwritten());
        conn.execute_batch("ROLLBACK").unwrap();
        assert_eq!(counted(&conn, "s"), 1);
        counters.rewrite();
        counters.write(&conn, 1).unwrap();
        assert_eq!(counted(&conn, "s"), 2);
    }
}
