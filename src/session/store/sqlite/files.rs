//! Is the database file still the one cachet opened? A file deleted or replaced under a
//! running cachet would otherwise take every later write with it, silently: SQLite keeps
//! writing to the open (now nameless) file, and it is gone at the next restart.
//!
//! The device and inode of the database file (and of its write-ahead log, once it exists)
//! are taken at open and compared as each write transaction begins, before it commits,
//! and on every health check.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

type Identity = (u64, u64);

pub struct FileWatch {
    db: PathBuf,
    wal: PathBuf,
    db_id: Identity,
    wal_id: Mutex<Option<Identity>>,
}

fn identity(path: &Path) -> std::io::Result<Identity> {
    std::fs::metadata(path).map(|m| (m.dev(), m.ino()))
}

impl FileWatch {
    /// Take the identity of a database file that is open now.
    pub fn new(db: &Path) -> std::io::Result<FileWatch> {
        let mut wal = db.as_os_str().to_owned();
        wal.push("-wal");
        let wal = PathBuf::from(wal);
        Ok(FileWatch {
            db_id: identity(db)?,
            wal_id: Mutex::new(identity(&wal).ok()),
            db: db.to_path_buf(),
            wal,
        })
    }

    /// `Err` with what happened when the files are no longer the ones opened.
    pub fn check(&self) -> Result<(), String> {
        check_one(&self.db, "database file", Some(self.db_id))?;
        let mut wal = self.wal_id.lock().unwrap_or_else(|p| p.into_inner());
        match *wal {
            Some(id) => check_one(&self.wal, "write-ahead log", Some(id)),
            // The log appears with the first write; remember it then.
            None => {
                *wal = identity(&self.wal).ok();
                Ok(())
            }
        }
    }
}

fn check_one(path: &Path, what: &str, expected: Option<Identity>) -> Result<(), String> {
    match identity(path) {
        Ok(id) if Some(id) == expected => Ok(()),
        Ok(_) => Err(format!(
            "the {what} {} was replaced while cachet had it open",
            path.display()
        )),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(format!(
            "the {what} {} was deleted while cachet had it open",
            path.display()
        )),
        Err(e) => Err(format!("cannot check the {what} {}: {e}", path.display())),
    }
}
