//! The Redis store's writes, each one Lua script so it is atomic across cachet instances.
//!
//! Every script takes the session's keys `KEYS = [log, meta, blobs, once, sessions]` and
//! `ARGV = [session, now_ms, ttl_secs, …]`, records the session's activity in `sessions`
//! (a sorted set by latest activity) and, when retention sets an age limit, refreshes the
//! TTL of the session's keys, so a session idle past it expires as a whole.

use std::sync::LazyLock;

use redis::Script;

const COMMON: &str = r"
local session, now, ttl = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local function append(from, to)
  local bytes = 0
  for i = from, to do bytes = bytes + string.len(ARGV[i]) end
  local len = 0
  for i = from, to do len = redis.call('RPUSH', KEYS[1], ARGV[i]) end
  redis.call('HINCRBY', KEYS[2], 'entry_bytes', bytes)
  return len - (to - from + 1)
end
local function touch()
  redis.call('HSETNX', KEYS[2], 'created', now)
  redis.call('ZADD', KEYS[5], now, session)
  if ttl > 0 then
    for i = 1, 4 do redis.call('EXPIRE', KEYS[i], ttl) end
  end
end
";

fn script(body: &str) -> Script {
    Script::new(&format!("{COMMON}\n{body}"))
}

/// `ARGV[4..]`: entries. Returns the new length.
pub static APPEND: LazyLock<Script> = LazyLock::new(|| {
    script(
        r"
local first = append(4, #ARGV)
touch()
return first + #ARGV - 3
",
    )
});

/// `ARGV[4]`: the key, `ARGV[5..]`: entries. Returns the first entry's position when
/// appended, else the entries appended earlier under the key.
pub static APPEND_ONCE: LazyLock<Script> = LazyLock::new(|| {
    script(
        r"
local seen = redis.call('HGET', KEYS[4], ARGV[4])
if seen then
  local first, count = string.match(seen, '(%d+):(%d+)')
  first, count = tonumber(first), tonumber(count)
  if count == 0 then return {} end
  return redis.call('LRANGE', KEYS[1], first, first + count - 1)
end
local first = append(5, #ARGV)
redis.call('HSET', KEYS[4], ARGV[4], first .. ':' .. (#ARGV - 4))
touch()
return first
",
    )
});

/// `ARGV[4]`: the request entry, `ARGV[5..]`: content key, bytes, key, bytes, … Returns
/// the entry's position in the log.
pub static RECORD: LazyLock<Script> = LazyLock::new(|| {
    script(
        r"
local added = 0
for i = 5, #ARGV, 2 do
  if redis.call('HSETNX', KEYS[3], ARGV[i], ARGV[i + 1]) == 1 then
    added = added + string.len(ARGV[i + 1])
  end
end
if added > 0 then redis.call('HINCRBY', KEYS[2], 'blob_bytes', added) end
local at = append(4, 4)
touch()
return at
",
    )
});

/// Returns the request index (0 for the session's first request).
pub static NEXT_INDEX: LazyLock<Script> = LazyLock::new(|| {
    script(
        r"
local n = redis.call('HINCRBY', KEYS[2], 'requests', 1)
touch()
return n - 1
",
    )
});
