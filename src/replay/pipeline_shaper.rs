//! Replay arms with policy files run the live request pipeline itself — the same policies,
//! injections, replay of persisted patches and marker placement as `cachet serve` — with a
//! session store of their own in a temporary folder. External hooks are called as they
//! would be live.
//!
//! The pipeline is async and `Shaper` is not: it runs on a thread of its own with its own
//! runtime, so replay works from any context. Each request's session-log entry is
//! written with the usage the cache model gave it and its recorded time, so that later
//! requests see the log (gaps, turns, lanes) as they would have live.

use std::path::PathBuf;
use std::sync::mpsc;
use std::sync::Arc;

use anyhow::{anyhow, Context};
use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue};
use serde_json::Value;

use super::shaper::{Shaped, Shaper};
use crate::config::Config;
use crate::metrics::Metrics;
use crate::pipeline::Pipeline;
use crate::route::Route;
use crate::trace::Record;
use crate::usage::Usage;

/// A shaped request and its patches.
type ShapedWith = (Shaped, Vec<crate::session::PatchEvent>);

enum Job {
    Shape(Box<Record>, mpsc::Sender<anyhow::Result<ShapedWith>>),
    /// The usage of the request shaped last, at its recorded time; answered once its log
    /// entry is written.
    Answered(u64, Usage, mpsc::Sender<()>),
}

/// An arm shaped by the live pipeline with the arm's policy files.
pub struct PipelineShaper {
    jobs: mpsc::Sender<Job>,
    /// The patches of the request shaped last.
    patches: Vec<crate::session::PatchEvent>,
}

impl PipelineShaper {
    /// Load the policies (refusing invalid ones, as `cachet serve` does) and start.
    pub fn start(policies: &[PathBuf]) -> anyhow::Result<PipelineShaper> {
        let set = crate::policy::load_policies(policies, &[])
            .map_err(|errors| anyhow!("{}", crate::policy::render_errors(&errors)))?;
        Self::start_with(set, Config::default())
    }

    /// Start with policies already loaded, on a configuration whose session store is
    /// replaced by a temporary one (its other `[sessions]` settings, such as the cache's
    /// budget, are kept).
    pub fn start_with(
        set: crate::policy::PolicySet,
        mut config: Config,
    ) -> anyhow::Result<PipelineShaper> {
        let store = tempfile::tempdir().context("temporary session store")?;
        config.sessions.store = store.path().to_string_lossy().into_owned();
        // The pipeline's clock stands at each request's recorded time.
        let clock = crate::session::SessionClock::stopped(0);
        let (jobs, inbox) = mpsc::channel::<Job>();
        let (ready_tx, ready) = mpsc::channel::<anyhow::Result<()>>();
        std::thread::spawn(move || {
            let _store = store; // removed when the arm is done
            let runtime = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => return drop(ready_tx.send(Err(e.into()))),
            };
            if set.is_empty() {
                return drop(ready_tx.send(Err(anyhow!("the arm's policy files hold no policy"))));
            }
            let pipeline = match runtime.block_on(Pipeline::new(
                config,
                set,
                Arc::new(Metrics::new()),
                None,
                clock.clone(),
            )) {
                Ok(p) => p,
                Err(e) => return drop(ready_tx.send(Err(e))),
            };
            let _ = ready_tx.send(Ok(()));
            let pipeline = Arc::new(pipeline);
            // The request shaped last, waiting for its usage to be written to the log.
            let mut pending: Option<crate::pipeline::Exchange> = None;
            for job in inbox {
                match job {
                    Job::Shape(record, reply) => {
                        clock.set(record.time_ms);
                        let shaped = runtime.block_on(shape(&pipeline, &record)).map(|(s, p)| {
                            pending = Some(p);
                            s
                        });
                        let _ = reply.send(shaped);
                    }
                    Job::Answered(at_ms, usage, done) => {
                        if let Some(ex) = pending.take() {
                            clock.set(at_ms);
                            runtime.block_on(pipeline.clone().record_replayed(ex, Some(usage)));
                        }
                        let _ = done.send(());
                    }
                }
            }
        });
        ready
            .recv()
            .map_err(|_| anyhow!("replay pipeline did not start"))??;
        Ok(PipelineShaper {
            jobs,
            patches: Vec::new(),
        })
    }
}

async fn shape(
    pipeline: &Pipeline,
    record: &Record,
) -> anyhow::Result<(ShapedWith, crate::pipeline::Exchange)> {
    let route = Route {
        provider: record.provider(),
        endpoint: record.endpoint(),
    };
    let mut headers = HeaderMap::new();
    for (name, value) in &record.headers {
        if let (Ok(n), Some(Ok(v))) = (
            HeaderName::from_bytes(name.as_bytes()),
            value.as_str().map(HeaderValue::from_str),
        ) {
            headers.insert(n, v);
        }
    }
    headers.insert("x-cachet-session", HeaderValue::from_str(&record.session)?);
    let model = record
        .body
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or("unknown")
        .to_string();
    let body = Bytes::from(serde_json::to_vec(&record.body)?);
    let prepared = pipeline
        .shape_request(route, headers, body, &model)
        .await
        .map_err(|e| anyhow!("{}", e.message))?;
    let shaped = Shaped {
        system: (prepared.shaping())
            .map(|s| s.system.clone())
            .unwrap_or_default(),
        body: serde_json::from_slice(&prepared.payload.to_bytes())?,
        uncached_tail: prepared.uncached_tail(),
        variant: prepared.variant.clone(),
        keep_warm_after_ms: prepared
            .ttl_decision()
            .and_then(|d| d.keep_warm_after_secs)
            .map(|s| s * 1000),
    };
    let patches = prepared
        .shaping()
        .map(|s| s.patches.clone())
        .unwrap_or_default();
    Ok(((shaped, patches), prepared))
}

impl Shaper for PipelineShaper {
    fn shape(&mut self, record: &Record) -> anyhow::Result<Shaped> {
        let (tx, rx) = mpsc::channel();
        self.jobs
            .send(Job::Shape(Box::new(record.clone()), tx))
            .map_err(|_| anyhow!("replay pipeline stopped"))?;
        let (shaped, patches) = rx
            .recv()
            .map_err(|_| anyhow!("replay pipeline stopped"))??;
        self.patches = patches;
        Ok(shaped)
    }

    fn patches(&mut self) -> Vec<crate::session::PatchEvent> {
        std::mem::take(&mut self.patches)
    }

    fn answered(&mut self, record: &Record, usage: &Usage) {
        let (tx, rx) = mpsc::channel();
        if self
            .jobs
            .send(Job::Answered(record.time_ms, *usage, tx))
            .is_ok()
        {
            let _ = rx.recv();
        }
    }
}
