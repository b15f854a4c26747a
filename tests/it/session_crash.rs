//! Crash safety of the embedded store: a child process appends persisted patches in a
//! loop and reports each append once it has returned; it is killed with SIGKILL in the
//! middle of the burst. After reopening, every reported append is present and replays.
//!
//! The child is this test binary run again with `CACHET_CRASH_CHILD_DB` set.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

use crate::session_support::{history, insert_note};
use cachet::session::{Entry, PrefixHashes, SessionStore, SqliteStore};

const CHILD_ENV: &str = "CACHET_CRASH_CHILD_DB";
const SESSION: &str = "crash";
/// Appends the parent waits for before killing the child.
const ACKS_BEFORE_KILL: u64 = 60;
/// The child stops by itself here if the parent never kills it.
const CHILD_LIMIT: u64 = 5_000;

/// Only does work as the child of `appends_that_returned_survive_sigkill`.
#[test]
fn crash_child_writer() {
    let Ok(db) = std::env::var(CHILD_ENV) else {
        return;
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(child_loop(Path::new(&db)));
}

async fn child_loop(db: &Path) {
    let store = SqliteStore::open(db).await.unwrap();
    let full = history(2 * CHILD_LIMIT as usize + 2);
    let mut out = std::io::stdout();
    for i in 0..CHILD_LIMIT {
        let index = store.next_request_index(SESSION).await.unwrap();
        let entry = insert_note(&full[..2 * i as usize + 1], &format!("note {i}"), index);
        store.append(SESSION, &[entry]).await.unwrap();
        use std::io::Write;
        writeln!(out, "acked {i}").unwrap();
        out.flush().unwrap();
    }
}

#[tokio::test]
async fn appends_that_returned_survive_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("sessions.sqlite3");
    let exe = std::env::current_exe().unwrap();
    let mut child = Command::new(exe)
        .args([
            "--exact",
            "session_crash::crash_child_writer",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, &db)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut last_acked: Option<u64> = None;
    for line in BufReader::new(stdout).lines() {
        let line = line.unwrap();
        if let Some(n) = line.strip_prefix("acked ") {
            let n: u64 = n.trim().parse().unwrap();
            last_acked = Some(n);
            if n + 1 >= ACKS_BEFORE_KILL {
                // `kill` sends SIGKILL on Unix: no chance to flush or close anything.
                child.kill().unwrap();
                break;
            }
        }
    }
    let status = child.wait().unwrap();
    assert!(!status.success(), "the child must have been killed");
    let last_acked = last_acked.expect("the child acknowledged appends");
    assert!(
        last_acked + 1 >= ACKS_BEFORE_KILL,
        "the child stopped early at {last_acked}"
    );

    // Integrity of the file as SQLite sees it.
    let check: String = rusqlite::Connection::open(&db)
        .unwrap()
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(check, "ok");

    let store = SqliteStore::open(&db).await.unwrap();
    let log = store.load(SESSION).await.unwrap();
    assert!(
        log.len() as u64 > last_acked,
        "{} entries, last ack {last_acked}",
        log.len()
    );
    for (i, entry) in log.iter().enumerate().take(last_acked as usize + 1) {
        let Entry::ContextTransform(t) = entry else {
            panic!("entry {i} is not a transform")
        };
        assert_eq!(t.request_index, Some(i as u64));
    }
    // Every stored patch replays on a history that extends all of them.
    let full = history(2 * log.len() + 2);
    let plan = log.replay_plan(&PrefixHashes::new(&full));
    assert_eq!(plan.apply.len(), log.len());
    assert!(plan.stale.is_empty());
    // The request counter never hands out an index twice after the crash.
    let next = store.next_request_index(SESSION).await.unwrap();
    assert!(next > last_acked, "next {next}, last ack {last_acked}");
}
