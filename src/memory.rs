//! Giving freed memory back to the system after a very large body.
//!
//! The allocator keeps pages a thread freed for that thread's next allocations, and gives
//! them back over seconds. A shaped body of tens of MB is parsed on one thread and recorded
//! after its answer on another: the pages the first freed stay resident while the second
//! takes new ones, and the process holds both at once. After such a body, cachet asks the
//! allocator to give back every freed page at once. The binary says how (the allocator is
//! its choice, [`set_release`]); a library user or a test without one gives nothing back.

use std::sync::OnceLock;

/// Bodies from this size on give freed memory back once their client envelope is let go.
/// Far above what an agent sends on a usual turn (a few hundred KB to a few MB), so a busy
/// proxy does not hand pages back that its next requests would take again.
pub const RELEASE_FROM: usize = 8 << 20;

static RELEASE: OnceLock<fn()> = OnceLock::new();

/// How this process gives freed pages back (set once, by the binary).
pub fn set_release(release: fn()) {
    let _ = RELEASE.set(release);
}

/// Give freed pages back if a body of `body_len` bytes was just let go of.
pub fn release_after(body_len: usize) {
    if body_len >= RELEASE_FROM {
        if let Some(release) = RELEASE.get() {
            release();
        }
    }
}
