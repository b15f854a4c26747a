//! The shared store: Redis, so several cachet instances serve one session interchangeably.
//!
//! Keys, all under `cachet:`: per session `s:{id}:log` (a list of entry JSON), `s:{id}:meta`
//! (a hash: `created`, `requests`, `entry_bytes`, `blob_bytes`), `s:{id}:blobs` (content
//! address → bytes), `s:{id}:once` (keys of [`append_once`](SessionStore::append_once));
//! and `sessions`, a sorted set of ids by latest activity. Writes are Lua scripts
//! ([`scripts`]), atomic across instances. With an age limit, every write refreshes the
//! TTL of the session's keys; the sweeper removes expired ids from `sessions` and enforces
//! the size limit. Durability is Redis's own (`appendonly yes` with `appendfsync always`
//! for the same guarantee as the embedded store). `rediss://` connects with TLS (rustls).

mod scripts;

use std::time::Duration;

use futures_util::future::BoxFuture;
use redis::aio::MultiplexedConnection;
use redis::{AsyncCommands, AsyncConnectionConfig, Client, RedisError, Script};
use tokio::sync::Mutex;

use super::{
    Appended, Blob, Retention, SessionStore, SessionSummary, StoreError, StoreHealth, StoreOptions,
    StoreResult, StoreStats, SweepReport,
};
use crate::providers::cache_key::MessageKey;
use crate::session::entry::{now_ms, Entry};

const PREFIX: &str = "cachet:";
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(2);
/// Sessions read per pipeline when summing sizes.
const SCAN_CHUNK: usize = 500;

pub struct RedisStore {
    client: Client,
    /// The shared connection; dropped after an error so the next call reconnects.
    conn: Mutex<Option<MultiplexedConnection>>,
    /// Key TTL from the retention age limit (0: keys never expire).
    ttl_secs: u64,
}

fn unavailable(err: RedisError) -> StoreError {
    // Redis errors can carry the URL; say only what kind of failure it was.
    StoreError::Unavailable(format!("redis: {} ({:?})", err.category(), err.kind()))
}

fn sessions_key() -> String {
    format!("{PREFIX}sessions")
}

/// A session's keys, in the order the scripts take them.
fn session_keys(session: &str) -> [String; 5] {
    let key = |part: &str| format!("{PREFIX}s:{session}:{part}");
    [
        key("log"),
        key("meta"),
        key("blobs"),
        key("once"),
        sessions_key(),
    ]
}

impl RedisStore {
    /// Connect to `redis://host:port/db` (or `rediss://`); fails when the server cannot be
    /// reached.
    pub async fn connect(url: &str, options: &StoreOptions) -> StoreResult<RedisStore> {
        let store = Self::lazy(url, options)?;
        store.connection().await?;
        Ok(store)
    }

    /// A store that connects on first use (and again after every error), for a server
    /// that is down when cachet starts: requests meet `Unavailable` until it is up.
    pub fn lazy(url: &str, options: &StoreOptions) -> StoreResult<RedisStore> {
        let invalid = |reason: String| StoreError::InvalidSpec {
            spec: super::spec::redact(url),
            reason,
        };
        let client = match &options.redis_ca_file {
            Some(path) => {
                let pem = std::fs::read(path).map_err(|e| {
                    invalid(format!("cannot read redis_ca_file {}: {e}", path.display()))
                })?;
                let certs = redis::TlsCertificates {
                    client_tls: None,
                    root_cert: Some(pem),
                };
                Client::build_with_tls(url, certs)
            }
            None => Client::open(url),
        }
        .map_err(|e| invalid(e.to_string()))?;
        Ok(RedisStore {
            client,
            conn: Mutex::new(None),
            ttl_secs: options.retention.ttl_secs().unwrap_or(0),
        })
    }

    async fn connection(&self) -> StoreResult<MultiplexedConnection> {
        let mut slot = self.conn.lock().await;
        if let Some(conn) = slot.as_ref() {
            return Ok(conn.clone());
        }
        let conn = self
            .client
            .get_multiplexed_async_connection_with_config(
                &AsyncConnectionConfig::new()
                    .set_connection_timeout(CONNECT_TIMEOUT)
                    .set_response_timeout(RESPONSE_TIMEOUT),
            )
            .await
            .map_err(unavailable)?;
        *slot = Some(conn.clone());
        Ok(conn)
    }

    /// Run one operation; on failure forget the connection so the next call reconnects.
    async fn run<T, F, Fut>(&self, op: F) -> StoreResult<T>
    where
        F: FnOnce(MultiplexedConnection) -> Fut,
        Fut: std::future::Future<Output = redis::RedisResult<T>>,
    {
        let conn = self.connection().await?;
        match op(conn).await {
            Ok(value) => Ok(value),
            Err(err) => {
                if err.is_io_error() || err.is_timeout() || err.is_connection_dropped() {
                    *self.conn.lock().await = None;
                }
                Err(unavailable(err))
            }
        }
    }

    /// Run a write script for a session with `ARGV = [session, now, ttl, extra…]`.
    async fn invoke<T: redis::FromRedisValue>(
        &self,
        script: &Script,
        session: &str,
        extra: Vec<&[u8]>,
    ) -> StoreResult<T> {
        let now = now_ms().to_string();
        let ttl = self.ttl_secs.to_string();
        self.run(|mut conn| async move {
            let mut invocation = script.prepare_invoke();
            for key in session_keys(session) {
                invocation.key(key);
            }
            invocation.arg(session).arg(&now).arg(&ttl);
            for arg in extra {
                invocation.arg(arg);
            }
            invocation.invoke_async(&mut conn).await
        })
        .await
    }

    /// Sizes of sessions (log + content bytes), by id.
    async fn sizes(&self, ids: &[String]) -> StoreResult<Vec<u64>> {
        let mut out = Vec::with_capacity(ids.len());
        for chunk in ids.chunks(SCAN_CHUNK) {
            let sizes: Vec<(Option<u64>, Option<u64>)> = self
                .run(|mut conn| async move {
                    let mut pipe = redis::pipe();
                    for id in chunk {
                        pipe.hget(&session_keys(id)[1], &["entry_bytes", "blob_bytes"]);
                    }
                    pipe.query_async(&mut conn).await
                })
                .await?;
            out.extend(
                sizes
                    .into_iter()
                    .map(|(e, b)| e.unwrap_or(0) + b.unwrap_or(0)),
            );
        }
        Ok(out)
    }

    /// Delete sessions' keys and ids.
    async fn delete(&self, ids: &[String]) -> StoreResult<()> {
        for chunk in ids.chunks(SCAN_CHUNK) {
            self.run(|mut conn| async move {
                let mut pipe = redis::pipe();
                pipe.atomic();
                for id in chunk {
                    let [log, meta, blobs, once, sessions] = session_keys(id);
                    pipe.del(&[log, meta, blobs, once]).ignore();
                    pipe.zrem(sessions, id).ignore();
                }
                pipe.query_async::<()>(&mut conn).await
            })
            .await?;
        }
        Ok(())
    }
}

impl SessionStore for RedisStore {
    fn append<'a>(
        &'a self,
        session: &'a str,
        entries: &'a [Entry],
    ) -> BoxFuture<'a, StoreResult<Option<u64>>> {
        Box::pin(async move {
            if entries.is_empty() {
                return Ok(None);
            }
            let bodies: Vec<String> = entries.iter().map(Entry::encode).collect();
            let args = bodies.iter().map(|b| b.as_bytes()).collect();
            let length = self.invoke::<i64>(&scripts::APPEND, session, args).await?;
            Ok(Some((length - bodies.len() as i64).max(0) as u64))
        })
    }

    fn append_once<'a>(
        &'a self,
        session: &'a str,
        key: &'a str,
        entries: &'a [Entry],
    ) -> BoxFuture<'a, StoreResult<Appended>> {
        Box::pin(async move {
            let bodies: Vec<String> = entries.iter().map(Entry::encode).collect();
            let mut args: Vec<&[u8]> = vec![key.as_bytes()];
            args.extend(bodies.iter().map(|b| b.as_bytes()));
            // The first entry's position when appended, else the entries appended earlier.
            let answer: redis::Value = self.invoke(&scripts::APPEND_ONCE, session, args).await?;
            if let redis::Value::Int(at) = answer {
                return Ok(Appended::Written {
                    at: at.max(0) as u64,
                });
            }
            let earlier: Vec<String> = redis::from_redis_value(&answer).map_err(unavailable)?;
            Ok(Appended::Existing(
                earlier.iter().map(|b| Entry::decode(b)).collect(),
            ))
        })
    }

    fn record<'a>(
        &'a self,
        session: &'a str,
        entry: &'a Entry,
        blobs: Vec<Blob>,
    ) -> BoxFuture<'a, StoreResult<u64>> {
        Box::pin(async move {
            let body = entry.encode();
            // One script call takes every blob at once, so all are made canonical here.
            let stored: Vec<(String, std::borrow::Cow<'_, [u8]>)> = blobs
                .iter()
                .filter_map(|b| Some((hex::encode(b.key), b.stored_bytes()?)))
                .collect();
            let mut args: Vec<&[u8]> = vec![body.as_bytes()];
            for (key, bytes) in &stored {
                args.push(key.as_bytes());
                args.push(bytes);
            }
            let at = self.invoke::<i64>(&scripts::RECORD, session, args).await?;
            Ok(at.max(0) as u64)
        })
    }

    fn entry_count<'a>(&'a self, session: &'a str) -> BoxFuture<'a, StoreResult<usize>> {
        Box::pin(
            self.run(move |mut conn| async move { conn.llen(&session_keys(session)[0]).await }),
        )
    }

    fn load_from<'a>(
        &'a self,
        session: &'a str,
        start: usize,
    ) -> BoxFuture<'a, StoreResult<Vec<Entry>>> {
        Box::pin(async move {
            let bodies: Vec<String> = self
                .run(|mut conn| async move {
                    conn.lrange(&session_keys(session)[0], start as isize, -1)
                        .await
                })
                .await?;
            Ok(bodies.iter().map(|b| Entry::decode(b)).collect())
        })
    }

    fn get_blobs<'a>(
        &'a self,
        session: &'a str,
        keys: &'a [MessageKey],
    ) -> BoxFuture<'a, StoreResult<Vec<Option<Vec<u8>>>>> {
        Box::pin(async move {
            if keys.is_empty() {
                return Ok(Vec::new());
            }
            let fields: Vec<String> = keys.iter().map(hex::encode).collect();
            let hash = &session_keys(session)[2];
            self.run(|mut conn| async move {
                // HMGET with one field answers a bare value; a pipeline of HGET keeps
                // the shape the same for any number of keys.
                let mut pipe = redis::pipe();
                for field in &fields {
                    pipe.hget(hash, field);
                }
                pipe.query_async(&mut conn).await
            })
            .await
        })
    }

    fn next_request_index<'a>(&'a self, session: &'a str) -> BoxFuture<'a, StoreResult<u64>> {
        Box::pin(async move {
            let index: i64 = self
                .invoke(&scripts::NEXT_INDEX, session, Vec::new())
                .await?;
            Ok(index.max(0) as u64)
        })
    }

    fn list_sessions(&self, limit: usize) -> BoxFuture<'_, StoreResult<Vec<SessionSummary>>> {
        Box::pin(async move {
            if limit == 0 {
                return Ok(Vec::new());
            }
            let recent: Vec<(String, u64)> = self
                .run(|mut conn| async move {
                    conn.zrevrange_withscores(sessions_key(), 0, limit as isize - 1)
                        .await
                })
                .await?;
            if recent.is_empty() {
                return Ok(Vec::new());
            }
            /// Entries, then `created` and `requests` from the meta hash.
            type Details = (u64, (Option<u64>, Option<u64>));
            let details: Vec<Details> = self
                .run(|mut conn| {
                    let mut pipe = redis::pipe();
                    for (id, _) in &recent {
                        let [log, meta, ..] = session_keys(id);
                        pipe.llen(log).hget(meta, &["created", "requests"]);
                    }
                    async move {
                        let flat: Vec<redis::Value> = pipe.query_async(&mut conn).await?;
                        flat.chunks(2)
                            .map(|chunk| match chunk {
                                [len, meta] => Ok((
                                    redis::from_redis_value(len)?,
                                    redis::from_redis_value(meta)?,
                                )),
                                _ => Err(RedisError::from((
                                    redis::ErrorKind::TypeError,
                                    "short pipeline reply",
                                ))),
                            })
                            .collect()
                    }
                })
                .await?;
            Ok(recent
                .into_iter()
                .zip(details)
                .map(
                    |((id, updated), (entries, (created, requests)))| SessionSummary {
                        id,
                        created: created.unwrap_or(updated),
                        updated,
                        entries,
                        requests: requests.unwrap_or(0),
                    },
                )
                .collect())
        })
    }

    fn stats(&self) -> BoxFuture<'_, StoreResult<StoreStats>> {
        Box::pin(async move {
            let ids: Vec<String> = self
                .run(|mut conn| async move { conn.zrange(sessions_key(), 0, -1).await })
                .await?;
            let mut stats = StoreStats::default();
            for chunk in ids.chunks(SCAN_CHUNK) {
                type Row = (bool, u64, u64, (Option<u64>, Option<u64>));
                let rows: Vec<Row> = self
                    .run(|mut conn| async move {
                        let mut pipe = redis::pipe();
                        for id in chunk {
                            let [log, meta, blobs, ..] = session_keys(id);
                            pipe.exists(&meta)
                                .llen(log)
                                .hlen(blobs)
                                .hget(meta, &["entry_bytes", "blob_bytes"]);
                        }
                        let flat: Vec<redis::Value> = pipe.query_async(&mut conn).await?;
                        flat.chunks(4)
                            .map(|c| match c {
                                [a, b, d, e] => Ok((
                                    redis::from_redis_value(a)?,
                                    redis::from_redis_value(b)?,
                                    redis::from_redis_value(d)?,
                                    redis::from_redis_value(e)?,
                                )),
                                _ => Err(RedisError::from((
                                    redis::ErrorKind::TypeError,
                                    "short pipeline reply",
                                ))),
                            })
                            .collect()
                    })
                    .await?;
                for (exists, entries, blobs, (entry_bytes, blob_bytes)) in rows {
                    stats.sessions += u64::from(exists);
                    stats.entries += entries;
                    stats.blobs += blobs;
                    stats.entry_bytes += entry_bytes.unwrap_or(0);
                    stats.blob_bytes += blob_bytes.unwrap_or(0);
                }
            }
            Ok(stats)
        })
    }

    fn sweep<'a>(
        &'a self,
        retention: &'a Retention,
        now_ms: u64,
    ) -> BoxFuture<'a, StoreResult<SweepReport>> {
        Box::pin(async move {
            let mut report = SweepReport::default();
            if let Some(cutoff) = retention.age_cutoff(now_ms) {
                // Their keys expire by TTL; this also takes sessions written before the
                // age limit was set, which have none.
                let old: Vec<String> = self
                    .run(|mut conn| async move {
                        conn.zrangebyscore(sessions_key(), "-inf", format!("({cutoff}"))
                            .await
                    })
                    .await?;
                report.bytes_freed += self.sizes(&old).await?.iter().sum::<u64>();
                self.delete(&old).await?;
                report.expired = old.len() as u64;
            }
            let Some(max) = retention.max_bytes else {
                return Ok(report);
            };
            // Oldest first.
            let ranked: Vec<(String, u64)> = self
                .run(|mut conn| async move {
                    conn.zrangebyscore_withscores(sessions_key(), "-inf", "+inf")
                        .await
                })
                .await?;
            let ids: Vec<String> = ranked.iter().map(|(id, _)| id.clone()).collect();
            let sizes = self.sizes(&ids).await?;
            let mut total: u64 = sizes.iter().sum();
            let keep_after = retention.size_cutoff(now_ms);
            let mut evict = Vec::new();
            for ((id, updated), size) in ranked.into_iter().zip(sizes) {
                if total <= max || updated >= keep_after {
                    break;
                }
                total -= size;
                report.bytes_freed += size;
                evict.push(id);
            }
            self.delete(&evict).await?;
            report.evicted = evict.len() as u64;
            Ok(report)
        })
    }

    fn health(&self) -> BoxFuture<'_, StoreHealth> {
        Box::pin(async move {
            let pinged =
                self.run(|mut conn| async move {
                    redis::cmd("PING").query_async::<String>(&mut conn).await
                })
                .await;
            match pinged {
                Ok(_) => StoreHealth::ok("redis"),
                Err(e) => StoreHealth::failing("redis", e.to_string()),
            }
        })
    }

    fn close(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            *self.conn.lock().await = None;
        })
    }
}
