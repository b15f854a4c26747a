//! The `store` setting: a Redis URL or a path for the embedded store. Parsed once, here,
//! for `cachet check`, the configuration and `serve` alike.

use std::path::PathBuf;

use super::StoreError;

/// The embedded database's file name inside the store folder.
pub const SQLITE_FILE: &str = "sessions.sqlite3";

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreSpec {
    /// The embedded store: the database file.
    Sqlite(PathBuf),
    /// `redis://` or `rediss://` (TLS).
    Redis(String),
}

impl StoreSpec {
    /// `redis://host:port/db` or `rediss://…` for Redis; any other `scheme://` is refused
    /// (a typo such as `redsi://` must not become a folder); anything else is a path for the
    /// embedded store: a folder, or a file ending in `.sqlite3`, `.sqlite` or `.db`.
    pub fn parse(spec: &str) -> Result<StoreSpec, StoreError> {
        let invalid = |reason: String| StoreError::InvalidSpec {
            spec: redact(spec),
            reason,
        };
        if spec.trim().is_empty() {
            return Err(invalid("empty path".into()));
        }
        if let Some(scheme) = url_scheme(spec) {
            return match scheme.to_ascii_lowercase().as_str() {
                "redis" | "rediss" => {
                    // The client's own parser; its messages never repeat the URL.
                    redis::Client::open(spec).map_err(|e| invalid(e.to_string()))?;
                    Ok(StoreSpec::Redis(spec.to_string()))
                }
                other => Err(invalid(format!(
                    "unknown scheme `{other}://`: use redis://, rediss:// or a folder path"
                ))),
            };
        }
        Ok(StoreSpec::Sqlite(sqlite_path(spec)))
    }
}

/// The scheme of `scheme://…`, if the spec has that form.
fn url_scheme(spec: &str) -> Option<&str> {
    let (scheme, _) = spec.split_once("://")?;
    let mut chars = scheme.chars();
    let first = chars.next()?;
    (first.is_ascii_alphabetic()
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')))
    .then_some(scheme)
}

/// The spec for messages: a URL's password is never shown.
pub fn redact(spec: &str) -> String {
    match (url_scheme(spec), spec.split_once("://")) {
        (Some(scheme), Some((_, rest))) => match rest.rsplit_once('@') {
            Some((_, host)) => format!("{scheme}://…@{host}"),
            None => spec.to_string(),
        },
        _ => spec.to_string(),
    }
}

/// The database file for a path spec.
fn sqlite_path(spec: &str) -> PathBuf {
    let path = PathBuf::from(spec);
    let is_file = path
        .extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| matches!(e, "sqlite3" | "sqlite" | "db"));
    if is_file {
        path
    } else {
        path.join(SQLITE_FILE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_choose_the_store() {
        assert_eq!(
            StoreSpec::parse("redis://127.0.0.1:6379/0").unwrap(),
            StoreSpec::Redis("redis://127.0.0.1:6379/0".into())
        );
        assert!(matches!(
            StoreSpec::parse("rediss://cache.example:6380/0").unwrap(),
            StoreSpec::Redis(_)
        ));
        assert_eq!(
            StoreSpec::parse("./cachet-data/").unwrap(),
            StoreSpec::Sqlite(PathBuf::from("./cachet-data/").join(SQLITE_FILE))
        );
        assert_eq!(
            StoreSpec::parse("/var/lib/cachet/s.db").unwrap(),
            StoreSpec::Sqlite(PathBuf::from("/var/lib/cachet/s.db"))
        );
        assert!(StoreSpec::parse("").is_err());
    }

    #[test]
    fn a_mistyped_scheme_is_refused_not_made_a_folder() {
        for spec in [
            "redsi://x",
            "http://127.0.0.1:6379",
            "sqlite://data",
            "REDIS2://h",
        ] {
            let err = StoreSpec::parse(spec).unwrap_err().to_string();
            assert!(err.contains("unknown scheme"), "{spec}: {err}");
        }
        // Without `://` it is a path (a folder may have a colon in its name).
        assert!(StoreSpec::parse("redis:/x").is_ok());
    }

    #[test]
    fn passwords_never_appear_in_errors() {
        let err = StoreSpec::parse("redsi://user:hunter2@host:6379")
            .unwrap_err()
            .to_string();
        assert!(!err.contains("hunter2"), "{err}");
        assert_eq!(
            redact("rediss://:pw@cache:6380/0"),
            "rediss://…@cache:6380/0"
        );
    }
}
