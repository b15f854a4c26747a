use clap::Parser;

use cachet::cli::{Cli, Command};

/// jemalloc rather than glibc's allocator: glibc gave each request's body buffer back to the
/// kernel when it was freed, and the next request paid page faults to get it again (12% of
/// cachet's CPU on 100 KB bodies). jemalloc keeps freed pages for reuse and returns them
/// over seconds. Figures in BENCHMARKS.md ("Against a hyper-client hop").
#[cfg(not(target_env = "msvc"))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
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
            Command::Emulate(args) => cachet::emulator::run_emulate(args).await,
            Command::Demo(args) => cachet::commands::demo::run_demo(args).await,
            Command::Check(args) => cachet::policy::run_check(args).await,
            Command::Replay(args) => cachet::replay::run_replay(args).await,
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
