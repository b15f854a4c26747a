//! The shared store: Redis, so several cachet instances serve one session interchangeably.
//!
//! Keys (all under `cachet:`): `s:{id}:log` a list of entry JSON, `s:{id}:requests` the
//! request counter (INCR), `s:{id}:created` the first activity, `sessions` a sorted set of
//! ids by latest activity, `blobs` a hash of content address → bytes, and `stats:*`
//! counters. Durability is Redis's own (`appendonly yes` with `appendfsync always` for
//! the same guarantee as the embedded store).

use std::time::Duration;

use futures_util::future::BoxFuture;
use redis::aio::MultiplexedConnection;
use redis::{AsyncCommands, AsyncConnectionConfig, Client, RedisError};
use tokio::sync::Mutex;

use super::{Blob, SessionStore, SessionSummary, StoreError, StoreResult, StoreStats};
use crate::session::entry::{now_ms, Entry};
use crate::session::normalize::MessageKey;

const PREFIX: &str = "cachet:";
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(2);

pub struct RedisStore {
    client: Client,
    /// The shared connection; dropped after an error so the next call reconnects.
    conn: Mutex<Option<MultiplexedConnection>>,
}

fn unavailable(err: RedisError) -> StoreError {
    // Redis errors can carry the URL; say only what kind of failure it was.
    StoreError::Unavailable(format!("redis: {} ({:?})", err.category(), err.kind()))
}

fn key(parts: &[&str]) -> String {
    let mut out = String::from(PREFIX);
    out.push_str(&parts.join(":"));
    out
}

fn log_key(session: &str) -> String {
    key(&["s", session, "log"])
}

fn requests_key(session: &str) -> String {
    key(&["s", session, "requests"])
}

fn created_key(session: &str) -> String {
    key(&["s", session, "created"])
}

impl RedisStore {
    /// Connect to `redis://host:port/db`; fails when the server cannot be reached.
    pub async fn connect(url: &str) -> StoreResult<RedisStore> {
        let store = Self::lazy(url)?;
        store.connection().await?;
        Ok(store)
    }

    /// A store that connects on first use (and again after every error), for a server
    /// that is down when cachet starts: requests meet `Unavailable` until it is up.
    pub fn lazy(url: &str) -> StoreResult<RedisStore> {
        let client = Client::open(url).map_err(|e| StoreError::InvalidSpec {
            spec: "redis://…".into(),
            reason: e.to_string(),
        })?;
        Ok(RedisStore {
            client,
            conn: Mutex::new(None),
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
}

impl SessionStore for RedisStore {
    fn append<'a>(
        &'a self,
        session: &'a str,
        entries: &'a [Entry],
    ) -> BoxFuture<'a, StoreResult<()>> {
        Box::pin(async move {
            if entries.is_empty() {
                return Ok(());
            }
            let bodies: Vec<String> = entries.iter().map(Entry::encode).collect();
            let bytes: usize = bodies.iter().map(String::len).sum();
            let now = now_ms();
            self.run(|mut conn| async move {
                redis::pipe()
                    .atomic()
                    .rpush(log_key(session), &bodies)
                    .ignore()
                    .zadd(key(&["sessions"]), session, now)
                    .ignore()
                    .set_nx(created_key(session), now)
                    .ignore()
                    .incr(key(&["stats", "entries"]), bodies.len())
                    .ignore()
                    .incr(key(&["stats", "entry_bytes"]), bytes)
                    .ignore()
                    .query_async::<()>(&mut conn)
                    .await
            })
            .await
        })
    }

    fn entry_count<'a>(&'a self, session: &'a str) -> BoxFuture<'a, StoreResult<usize>> {
        Box::pin(self.run(move |mut conn| async move { conn.llen(log_key(session)).await }))
    }

    fn load_from<'a>(
        &'a self,
        session: &'a str,
        start: usize,
    ) -> BoxFuture<'a, StoreResult<Vec<Entry>>> {
        Box::pin(async move {
            let bodies: Vec<String> =
                self.run(|mut conn| async move {
                    conn.lrange(log_key(session), start as isize, -1).await
                })
                .await?;
            Ok(bodies.iter().map(|b| Entry::decode(b)).collect())
        })
    }

    fn put_blobs<'a>(&'a self, blobs: &'a [Blob]) -> BoxFuture<'a, StoreResult<()>> {
        Box::pin(async move {
            if blobs.is_empty() {
                return Ok(());
            }
            let added: Vec<bool> = self
                .run(|mut conn| async move {
                    let mut pipe = redis::pipe();
                    for blob in blobs {
                        pipe.hset_nx(key(&["blobs"]), hex::encode(blob.key), &blob.bytes);
                    }
                    pipe.query_async(&mut conn).await
                })
                .await?;
            let (count, bytes) = blobs
                .iter()
                .zip(&added)
                .filter(|(_, new)| **new)
                .fold((0usize, 0usize), |(c, b), (blob, _)| {
                    (c + 1, b + blob.bytes.len())
                });
            if count == 0 {
                return Ok(());
            }
            self.run(|mut conn| async move {
                redis::pipe()
                    .incr(key(&["stats", "blobs"]), count)
                    .ignore()
                    .incr(key(&["stats", "blob_bytes"]), bytes)
                    .ignore()
                    .query_async::<()>(&mut conn)
                    .await
            })
            .await
        })
    }

    fn get_blobs<'a>(
        &'a self,
        keys: &'a [MessageKey],
    ) -> BoxFuture<'a, StoreResult<Vec<Option<Vec<u8>>>>> {
        Box::pin(async move {
            if keys.is_empty() {
                return Ok(Vec::new());
            }
            let fields: Vec<String> = keys.iter().map(hex::encode).collect();
            self.run(|mut conn| async move {
                // HMGET with one field answers a bare value; a pipeline of HGET keeps
                // the shape the same for any number of keys.
                let mut pipe = redis::pipe();
                for field in &fields {
                    pipe.hget(key(&["blobs"]), field);
                }
                pipe.query_async(&mut conn).await
            })
            .await
        })
    }

    fn next_request_index<'a>(&'a self, session: &'a str) -> BoxFuture<'a, StoreResult<u64>> {
        Box::pin(async move {
            let now = now_ms();
            let (count,): (u64,) = self
                .run(|mut conn| async move {
                    redis::pipe()
                        .atomic()
                        .incr(requests_key(session), 1u64)
                        .zadd(key(&["sessions"]), session, now)
                        .ignore()
                        .set_nx(created_key(session), now)
                        .ignore()
                        .query_async(&mut conn)
                        .await
                })
                .await?;
            Ok(count.saturating_sub(1))
        })
    }

    fn list_sessions(&self, limit: usize) -> BoxFuture<'_, StoreResult<Vec<SessionSummary>>> {
        Box::pin(async move {
            if limit == 0 {
                return Ok(Vec::new());
            }
            let recent: Vec<(String, u64)> = self
                .run(|mut conn| async move {
                    conn.zrevrange_withscores(key(&["sessions"]), 0, limit as isize - 1)
                        .await
                })
                .await?;
            if recent.is_empty() {
                return Ok(Vec::new());
            }
            let details: Vec<(u64, Option<u64>, Option<u64>)> = self
                .run(|mut conn| {
                    let mut pipe = redis::pipe();
                    for (id, _) in &recent {
                        pipe.llen(log_key(id))
                            .get(requests_key(id))
                            .get(created_key(id));
                    }
                    async move {
                        let flat: Vec<redis::Value> = pipe.query_async(&mut conn).await?;
                        flat.chunks(3)
                            .map(|chunk| match chunk {
                                [len, requests, created] => Ok((
                                    redis::from_redis_value(len)?,
                                    redis::from_redis_value(requests)?,
                                    redis::from_redis_value(created)?,
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
                    |((id, updated), (entries, requests, created))| SessionSummary {
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
            let (sessions, entries, entry_bytes, blobs, blob_bytes): (
                u64,
                Option<u64>,
                Option<u64>,
                Option<u64>,
                Option<u64>,
            ) = self
                .run(|mut conn| async move {
                    redis::pipe()
                        .zcard(key(&["sessions"]))
                        .get(key(&["stats", "entries"]))
                        .get(key(&["stats", "entry_bytes"]))
                        .get(key(&["stats", "blobs"]))
                        .get(key(&["stats", "blob_bytes"]))
                        .query_async(&mut conn)
                        .await
                })
                .await?;
            Ok(StoreStats {
                sessions,
                entries: entries.unwrap_or(0),
                entry_bytes: entry_bytes.unwrap_or(0),
                blobs: blobs.unwrap_or(0),
                blob_bytes: blob_bytes.unwrap_or(0),
            })
        })
    }
}
