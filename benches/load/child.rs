//! `cachet` (or a benchmark's own role) as a child process of a benchmark driver: started
//! with its arguments, its address read from the first line it prints, killed when dropped.
//! Each benchmark uses a part of it.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

pub struct Proc {
    pub child: Child,
    pub addr: String,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The binary benchmarked: `env_var` when set (another build, e.g. from before a change),
/// else this build's `cachet`.
pub fn cachet_binary(env_var: &str) -> String {
    std::env::var(env_var).unwrap_or_else(|_| env!("CARGO_BIN_EXE_cachet").into())
}

/// Start `binary ARGS` at `RUST_LOG=warn` in `dir` and read the first `http://ADDR` it
/// prints.
pub fn spawn_cachet(binary: &str, args: &[String], dir: &std::path::Path, stderr: Stdio) -> Proc {
    spawn(
        Command::new(binary)
            .args(args)
            .current_dir(dir)
            .env("RUST_LOG", "warn")
            .stderr(stderr),
    )
}

/// Start `cmd` and read the address it prints first: after `http://` (cachet), or the whole
/// line (the load benchmark's roles print only `ADDR`).
pub fn spawn(cmd: &mut Command) -> Proc {
    let mut child = cmd
        .stdout(Stdio::piped())
        .spawn()
        .expect("the process starts");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = match line.split("http://").nth(1) {
        Some(rest) => rest.split_whitespace().next().unwrap_or_default(),
        None => line.trim(),
    }
    .trim_end_matches('/')
    .to_string();
    Proc { child, addr }
}
