//! What the driver reads about a process from /proc: CPU time, page faults, memory.
//! Shared by the benchmarks; each uses a part.
#![allow(dead_code)]

/// Fields of `/proc/{pid}/stat` after the command name (field 3 of proc(5) is index 0).
fn proc_stat(pid: u32) -> Vec<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    stat.rsplit(')')
        .next()
        .unwrap_or("")
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

/// Minor page faults so far (each one a page the kernel had to map, usually zeroed).
pub fn minor_faults(pid: u32) -> f64 {
    proc_stat(pid)
        .get(7)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

/// CPU seconds (user + system) used so far by a process, in clock ticks (10 ms).
fn cpu_ticks_seconds(pid: u32) -> f64 {
    let fields = proc_stat(pid);
    let ticks: f64 = fields.get(11).and_then(|v| v.parse().ok()).unwrap_or(0.0)
        + fields
            .get(12)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0);
    ticks / 100.0 // USER_HZ is 100 on Linux
}

/// Nanoseconds on CPU per live thread (`/proc/{pid}/task/*/schedstat`).
fn thread_ns(pid: u32) -> Vec<(u32, u64)> {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    dir.filter_map(|e| {
        let e = e.ok()?;
        let tid: u32 = e.file_name().to_str()?.parse().ok()?;
        let s = std::fs::read_to_string(e.path().join("schedstat")).ok()?;
        Some((tid, s.split_whitespace().next()?.parse().ok()?))
    })
    .collect()
}

/// CPU time of every live thread of `pid` so far, in nanoseconds.
pub fn cpu_ns(pid: u32) -> u64 {
    thread_ns(pid).iter().map(|(_, ns)| ns).sum()
}

/// A CPU-time reading of one process: per-thread nanoseconds (precise) and the process's
/// tick count (which also keeps the time of threads that have exited).
#[derive(Clone)]
pub struct CpuReading {
    threads: Vec<(u32, u64)>,
    ticks: f64,
}

pub fn cpu_reading(pid: u32) -> CpuReading {
    CpuReading {
        threads: thread_ns(pid),
        ticks: cpu_ticks_seconds(pid),
    }
}

/// CPU seconds between two readings: the per-thread sum, unless threads that exited in
/// between took more than a tick with them (then the tick count).
pub fn cpu_between(a: &CpuReading, b: &CpuReading) -> f64 {
    let precise: u64 = b
        .threads
        .iter()
        .map(|(tid, ns)| {
            let before = a
                .threads
                .iter()
                .find(|(t, _)| t == tid)
                .map_or(0, |(_, n)| *n);
            ns.saturating_sub(before)
        })
        .sum();
    let precise = precise as f64 / 1e9;
    let coarse = b.ticks - a.ticks;
    if coarse > precise + 0.02 {
        coarse
    } else {
        precise
    }
}

fn status_kib(pid: u32, field: &str) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<f64>().ok())
        .unwrap_or(0.0)
}

/// Peak resident memory so far (`VmHWM`), MiB.
pub fn peak_rss_mib(pid: u32) -> f64 {
    status_kib(pid, "VmHWM:") / 1024.0
}

/// Resident memory now (`VmRSS`), MiB.
pub fn rss_mib(pid: u32) -> f64 {
    status_kib(pid, "VmRSS:") / 1024.0
}
