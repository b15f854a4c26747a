use clap::Parser;

use cachet::cli::{Cli, Command};

/// jemalloc rather than glibc's allocator: glibc gave each request's body buffer back to the
/// kernel when it was freed, and the next request paid page faults to get it again (12% of
/// cachet's CPU on 100 KB bodies). jemalloc keeps freed pages for reuse and returns them
/// over seconds. Figures in BENCHMARKS.md ("Against a hyper-client hop").
#[cfg(not(target_env = "msvc"))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Give every freed page of every arena back to the system (`arena.<i>.purge` with
/// `MALLCTL_ARENAS_ALL`, 4096). See [`cachet::memory`].
#[cfg(not(target_env = "msvc"))]
fn purge_freed_pages() {
    use std::ptr::null_mut;
    let start = std::time::Instant::now();
    // SAFETY: a purge reads and writes nothing: every pointer is null, the length 0.
    let failed = unsafe {
        tikv_jemalloc_sys::mallctl(
            c"arena.4096.purge".as_ptr(),
            null_mut(),
            null_mut(),
            null_mut(),
            0,
        )
    };
    let micros = start.elapsed().as_micros() as u64;
    if failed != 0 {
        tracing::debug!(
            error = failed,
            micros,
            "the allocator did not give freed pages back"
        );
    } else {
        tracing::debug!(micros, "freed pages given back to the system");
    }
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    #[cfg(not(target_env = "msvc"))]
    cachet::memory::set_release(purge_freed_pages);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cachet: cannot start the runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async move {
        match cli.command {
            Command::Serve(args) => cachet::commands::serve::run_serve(args).await,
            Command::Emulate(args) => cachet::emulator::run_emulate(args.into()).await,
            Command::Demo(args) => cachet::commands::demo::run_demo(args).await,
            Command::Check(args) => cachet::commands::check::run_check(args).await,
            Command::Replay(args) => cachet::replay::run_replay(args).await,
            Command::Advise(args) => cachet::replay::advise::run_advise(args).await,
        }
    });
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cachet: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
