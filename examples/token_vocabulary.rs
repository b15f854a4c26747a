//! What the token vocabulary holds and costs, in a fresh process: the heap it keeps (bytes
//! live after the first count, less before), the heap's peak while it loads, RSS, the load's
//! time and the time to count this repository's README, BENCHMARKS and sources.
//!
//! Run: `cargo run --release --example token_vocabulary` (cachet's counting) and
//! `cargo run --release --example token_vocabulary -- tiktoken` (tiktoken-rs's `CoreBPE`
//! kept, as cachet did before); BENCHMARKS.md, "What the policies add to 1,000 streams".

use std::alloc::{GlobalAlloc, Layout};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

/// jemalloc, as cachet runs, counting the bytes live and their peak.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let live = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
        PEAK.fetch_max(live, Ordering::Relaxed);
        unsafe { tikv_jemallocator::Jemalloc.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        unsafe { tikv_jemallocator::Jemalloc.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn status_kb(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn main() {
    let tiktoken = std::env::args().nth(1).as_deref() == Some("tiktoken");
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut text = String::new();
    for name in ["README.md", "BENCHMARKS.md"] {
        text.push_str(&std::fs::read_to_string(root.join(name)).unwrap());
    }
    for entry in std::fs::read_dir(root.join("src")).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            text.push_str(&std::fs::read_to_string(path).unwrap());
        }
    }
    let before = status_kb("VmRSS");
    let heap_before = LIVE.load(Ordering::Relaxed);
    PEAK.store(heap_before, Ordering::Relaxed);
    let started = Instant::now();
    let (load, count, tokens) = if tiktoken {
        let core = tiktoken_rs::o200k_base().unwrap();
        let load = started.elapsed();
        let started = Instant::now();
        let tokens = core.encode_ordinary(&text).len() as u64;
        let count = started.elapsed();
        // Kept, as a process that counts keeps it.
        std::mem::forget(core);
        (load, count, tokens)
    } else {
        cachet::tokens::count("x");
        let load = started.elapsed();
        let started = Instant::now();
        let tokens = cachet::tokens::count(&text);
        (load, started.elapsed(), tokens)
    };
    let mb = |bytes: usize| bytes as f64 / 1e6;
    println!(
        "{}: {} bytes, {tokens} tokens; load {:.0} ms, count {:.0} ms; heap kept +{:.1} MB, \
         heap peak +{:.1} MB; RSS +{:.1} MB",
        if tiktoken {
            "tiktoken-rs CoreBPE"
        } else {
            "cachet::tokens"
        },
        text.len(),
        load.as_secs_f64() * 1e3,
        count.as_secs_f64() * 1e3,
        mb(LIVE.load(Ordering::Relaxed) - heap_before),
        mb(PEAK.load(Ordering::Relaxed) - heap_before),
        status_kb("VmRSS").saturating_sub(before) as f64 / 1024.0,
    );
}
