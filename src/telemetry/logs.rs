//! Structured logs to stderr: text or JSON, one span per request (`request`), colours only
//! on a terminal.
//!
//! Lines below `warn` (the per-request `request done` line) wait in memory for at most
//! [`FLUSH_EVERY`] and leave together in one write, as nginx's and Envoy's buffered access
//! logs do: a `write` to stderr per request was a measurable part of a 2 KB request's CPU
//! (BENCHMARKS.md, "The request line, written in batches"). A `warn` or
//! `error` line is written at once, after the lines before it. What is waiting is written
//! when the [`LogGuard`] is dropped (cachet stopping); a process killed outright loses at
//! most the last [`FLUSH_EVERY`] of lines below `warn`.

use std::io::{IsTerminal, Write};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use tracing::{Level, Metadata};
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::EnvFilter;

use super::{LogConfig, LogFormat};

/// Longest a line below `warn` waits before it is written.
pub const FLUSH_EVERY: Duration = Duration::from_millis(50);
/// Lines waiting beyond this many bytes are written at once, by the thread that logs.
const FLUSH_AT: usize = 64 * 1024;

/// Set up logs once, `RUST_LOG` overriding the configured level. Keep the guard while
/// cachet runs: dropping it writes what is waiting.
pub fn init_logging(config: &LogConfig) -> LogGuard {
    let spec = std::env::var("RUST_LOG").unwrap_or_else(|_| config.level.clone());
    let batch = Batch::start(Box::new(write_to_stderr));
    // Escape codes in a log file or a journal are noise: colour only when a person watches.
    let builder = tracing_subscriber::fmt()
        .with_writer(BatchedStderr(batch.clone()))
        .with_ansi(std::io::stderr().is_terminal());
    // A plain level is checked once per call site; a full filter (`cachet=debug,...`) is
    // evaluated per event, which costs measurably on the request path.
    let installed = match (spec.trim().parse::<LevelFilter>(), config.format) {
        (Ok(level), LogFormat::Json) => builder.with_max_level(level).json().try_init(),
        (Ok(level), LogFormat::Text) => builder.with_max_level(level).try_init(),
        (Err(_), format) => {
            let builder = builder.with_env_filter(EnvFilter::new(spec));
            match format {
                LogFormat::Json => builder.json().try_init(),
                LogFormat::Text => builder.try_init(),
            }
        }
    };
    match installed {
        Ok(()) => LogGuard(Some(batch)),
        // Logging was set up before (a second `serve` in one process): its guard flushes.
        Err(_) => {
            batch.stop();
            LogGuard(None)
        }
    }
}

/// Writes the lines still waiting when dropped.
#[must_use = "dropping the guard stops batching and writes what is waiting"]
pub struct LogGuard(Option<Arc<Batch>>);

impl Drop for LogGuard {
    fn drop(&mut self) {
        if let Some(batch) = self.0.take() {
            batch.stop();
        }
    }
}

/// Where written lines go: stderr, or a test's buffer.
type Out = Box<dyn Fn(&[u8]) + Send + Sync>;

/// Lines waiting to be written, and the thread that writes them.
struct Batch {
    state: Mutex<State>,
    /// Wakes the writing thread: the first line of a batch, or the stop.
    wake: Condvar,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    out: Out,
}

#[derive(Default)]
struct State {
    waiting: Vec<u8>,
    stopped: bool,
}

impl Batch {
    fn new(out: Out) -> Arc<Batch> {
        Arc::new(Batch {
            state: Mutex::default(),
            wake: Condvar::new(),
            thread: Mutex::default(),
            out,
        })
    }

    fn start(out: Out) -> Arc<Batch> {
        let batch = Batch::new(out);
        let writer = batch.clone();
        // Without the thread (none could be started), every line is written at once.
        match std::thread::Builder::new()
            .name("cachet-log".into())
            .spawn(move || writer.run())
        {
            Ok(handle) => *batch.thread.lock().unwrap_or_else(|p| p.into_inner()) = Some(handle),
            Err(_) => batch.lock().stopped = true,
        }
        batch
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The writing thread: once a line waits, give others [`FLUSH_EVERY`] to join it,
    /// then write them all.
    fn run(&self) {
        let mut state = self.lock();
        loop {
            while state.waiting.is_empty() && !state.stopped {
                state = self.wake.wait(state).unwrap_or_else(|p| p.into_inner());
            }
            if !state.stopped {
                state = match self.wake.wait_timeout(state, FLUSH_EVERY) {
                    Ok((state, _)) => state,
                    Err(p) => p.into_inner().0,
                };
            }
            self.write_out(&mut state.waiting);
            if state.stopped {
                return;
            }
        }
    }

    /// Write what waits, and every later line at once.
    fn stop(&self) {
        self.lock().stopped = true;
        self.wake.notify_all();
        let thread = self.thread.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(thread) = thread {
            let _ = thread.join();
        }
        self.write_out(&mut self.lock().waiting);
    }

    /// One formatted line (the formatter writes each whole).
    fn line(&self, line: &[u8], at_once: bool) {
        let mut state = self.lock();
        if at_once || state.stopped {
            // After the lines before it, under the lock: lines leave in the order logged.
            state.waiting.extend_from_slice(line);
            self.write_out(&mut state.waiting);
            return;
        }
        let first = state.waiting.is_empty();
        state.waiting.extend_from_slice(line);
        if state.waiting.len() >= FLUSH_AT {
            self.write_out(&mut state.waiting);
        } else if first {
            self.wake.notify_one();
        }
    }

    /// Write the waiting lines and empty the buffer (keeping a bounded capacity).
    fn write_out(&self, waiting: &mut Vec<u8>) {
        if waiting.is_empty() {
            return;
        }
        (self.out)(waiting);
        waiting.clear();
        if waiting.capacity() > 4 * FLUSH_AT {
            waiting.shrink_to(FLUSH_AT);
        }
    }
}

/// One write of every waiting line. A line that cannot be written is dropped: logging
/// never stops a request.
fn write_to_stderr(lines: &[u8]) {
    let mut stderr = std::io::stderr().lock();
    let _ = stderr.write_all(lines);
    let _ = stderr.flush();
}

/// Whether a line of this level is written at once: `warn` and `error` (less verbose
/// levels compare smaller).
fn at_once(level: &Level) -> bool {
    *level <= Level::WARN
}

/// The formatter's writer: lines below `warn` join the batch, the others go at once.
#[derive(Clone)]
struct BatchedStderr(Arc<Batch>);

struct LineWriter<'a> {
    batch: &'a Batch,
    at_once: bool,
}

impl<'a> MakeWriter<'a> for BatchedStderr {
    type Writer = LineWriter<'a>;

    fn make_writer(&'a self) -> Self::Writer {
        LineWriter {
            batch: &self.0,
            at_once: true,
        }
    }

    fn make_writer_for(&'a self, meta: &Metadata<'_>) -> Self::Writer {
        LineWriter {
            batch: &self.0,
            at_once: at_once(meta.level()),
        }
    }
}

impl Write for LineWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.batch.line(buf, self.at_once);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A batch whose writes land in the returned buffer, one entry per write.
    fn recorded() -> (Out, Arc<Mutex<Vec<Vec<u8>>>>) {
        let writes = Arc::new(Mutex::new(Vec::new()));
        let sink = writes.clone();
        let out: Out = Box::new(move |lines: &[u8]| sink.lock().unwrap().push(lines.to_vec()));
        (out, writes)
    }

    /// Lines below `warn` wait; a `warn` line takes them out with it, in one write and in
    /// order; the stop writes what waits; after it, lines go at once.
    #[test]
    fn lines_wait_until_a_warning_or_the_stop_and_keep_their_order() {
        let (out, writes) = recorded();
        let batch = Batch::new(out); // no thread: nothing leaves but by these rules
        batch.line(b"info 1\n", false);
        batch.line(b"info 2\n", false);
        assert!(writes.lock().unwrap().is_empty(), "info lines wait");
        batch.line(b"warn 3\n", true);
        batch.line(b"info 4\n", false);
        batch.stop();
        batch.line(b"info 5\n", false);
        assert_eq!(
            *writes.lock().unwrap(),
            [&b"info 1\ninfo 2\nwarn 3\n"[..], b"info 4\n", b"info 5\n"]
        );
    }

    /// The thread writes waiting lines together, unprompted, within about FLUSH_EVERY.
    #[test]
    fn waiting_lines_are_written_together_by_the_thread() {
        let (out, writes) = recorded();
        let batch = Batch::start(out);
        batch.line(b"a\n", false);
        batch.line(b"b\n", false);
        let deadline = std::time::Instant::now() + 100 * FLUSH_EVERY;
        while writes.lock().unwrap().is_empty() {
            assert!(std::time::Instant::now() < deadline, "never written");
            std::thread::sleep(FLUSH_EVERY / 5);
        }
        batch.stop();
        assert_eq!(writes.lock().unwrap().concat(), b"a\nb\n");
    }

    /// A burst past FLUSH_AT is written by the thread that logs, not held.
    #[test]
    fn a_burst_is_written_without_waiting() {
        let (out, writes) = recorded();
        let batch = Batch::new(out);
        let line = vec![b'x'; 1024];
        for _ in 0..FLUSH_AT / line.len() {
            batch.line(&line, false);
        }
        assert_eq!(writes.lock().unwrap().len(), 1);
        assert!(batch.lock().waiting.capacity() <= 4 * FLUSH_AT);
    }

    #[test]
    fn only_warnings_and_errors_go_at_once() {
        assert!(at_once(&Level::ERROR) && at_once(&Level::WARN));
        assert!(!at_once(&Level::INFO) && !at_once(&Level::DEBUG) && !at_once(&Level::TRACE));
    }
}
