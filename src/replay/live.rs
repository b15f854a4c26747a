//! The live what-if of `cachet serve`: with monitoring on and `sessions.whatif`, every
//! answered request goes, once the after-response queue knows its session, through a
//! bounded queue to one worker thread, which makes its trace record (the one `--record`
//! writes), reads it back as a trace is read and feeds it to a [`WhatIf`] of the
//! candidates (the shipped ones unless `sessions.whatif_candidates` names others), each
//! run as `cachet replay --arm` runs it, within the budget of `sessions.whatif_max_*`.
//! Nothing before forwarding does any of it, and nothing waits for it: a full queue drops
//! the request and counts it.

use std::sync::{mpsc, Arc, RwLock};
use std::time::{Duration, Instant};

use anyhow::Context;

use super::shaper::{AsRecorded, Shaper};
use super::whatif::{Budget, Skipped, WhatIf};
use super::PipelineShaper;
use crate::config::Config;
use crate::metrics::Metrics;
use crate::policy::PolicySet;
use crate::session::whatif::{
    snapshot_file, Answered, SharedBoard, WhatIfBoard, WhatIfFeed, CLIENT,
};
use crate::trace::Record;

/// Records waiting for the worker before new ones are dropped.
pub const QUEUE: usize = 256;

/// The running what-if: its feed for the pipeline, its board for the admin pages.
pub struct Live {
    pub feed: WhatIfFeed,
    pub board: SharedBoard,
}

/// Start the what-if when `config` asks for it (monitoring and `sessions.whatif` on): the
/// candidates' policies are loaded now (an invalid one refuses to start, as `cachet
/// serve` does for its own), their pipelines on the first request.
pub fn start(config: &Config, metrics: &Arc<Metrics>) -> anyhow::Result<Option<Live>> {
    let sessions = &config.sessions;
    if !sessions.monitor || !sessions.whatif {
        return Ok(None);
    }
    let dir = tempfile::tempdir().context("temporary policy folder")?;
    let mut candidates = Vec::new();
    for arm in super::advise::candidates(&sessions.whatif_candidates, dir.path())? {
        if arm.name == CLIENT {
            anyhow::bail!("sessions.whatif_candidates: `{CLIENT}` names the requests as sent");
        }
        let set = crate::policy::load_policies(&arm.policies, &[]).map_err(|errors| {
            anyhow::anyhow!(
                "what-if candidate `{}`:\n{}",
                arm.name,
                crate::policy::render_errors(&errors)
            )
        })?;
        candidates.push((arm.name, set));
    }
    let names = std::iter::once(CLIENT.to_owned())
        .chain(candidates.iter().map(|(n, _)| n.clone()))
        .collect();
    let board: SharedBoard = Arc::new(RwLock::new(WhatIfBoard {
        candidates: names,
        ..Default::default()
    }));
    let (tx, rx) = mpsc::sync_channel(QUEUE);
    let dropped = metrics.whatif_skipped.with_label_values(&["queue_full"]);
    let worker = Worker {
        board: board.clone(),
        metrics: metrics.clone(),
        budget: Budget {
            max_requests: sessions.whatif_max_requests,
            max_sessions: sessions.whatif_max_sessions,
            max_age_ms: sessions.whatif_max_age_secs.saturating_mul(1000),
        },
        // Beside the embedded store's database, for `cachet advise --store`.
        snapshot: match crate::session::store::StoreSpec::parse(&sessions.store) {
            Ok(crate::session::store::StoreSpec::Sqlite(db)) => Some(snapshot_file(&db)),
            _ => None,
        },
    };
    std::thread::Builder::new()
        .name("cachet-whatif".into())
        .spawn(move || worker.run(rx, candidates))
        .context("starting the what-if")?;
    Ok(Some(Live {
        feed: WhatIfFeed::new(tx, dropped, sessions.whatif_max_request_bytes),
        board,
    }))
}

struct Worker {
    board: SharedBoard,
    metrics: Arc<Metrics>,
    budget: Budget,
    /// Where the figures are kept (the embedded store's folder), at most once a second.
    snapshot: Option<std::path::PathBuf>,
}

/// How often at most the figures are written beside the store.
const SNAPSHOT_EVERY: Duration = Duration::from_secs(1);

impl Worker {
    /// Until the pipeline lets go of the feed.
    fn run(self, rx: mpsc::Receiver<Answered>, candidates: Vec<(String, PolicySet)>) {
        let mut pending = Some(candidates);
        let mut whatif = None;
        let (mut written, mut dirty) = (Instant::now(), false);
        loop {
            let answered = match rx.recv_timeout(SNAPSHOT_EVERY) {
                Ok(answered) => answered,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    if std::mem::take(&mut dirty) {
                        self.write_snapshot();
                        written = Instant::now();
                    }
                    continue;
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            };
            let whatif = whatif.get_or_insert_with(|| {
                let started = start_candidates(pending.take(), self.budget);
                if let Ok(mut board) = self.board.write() {
                    board.candidates = started
                        .candidates()
                        .into_iter()
                        .map(str::to_owned)
                        .collect();
                }
                started
            });
            self.follow(whatif, answered);
            dirty = true;
            if written.elapsed() >= SNAPSHOT_EVERY {
                self.write_snapshot();
                (written, dirty) = (Instant::now(), false);
            }
        }
        if dirty {
            self.write_snapshot();
        }
    }

    /// Keep the figures beside the store (written whole, then renamed into place).
    fn write_snapshot(&self) {
        let Some(path) = &self.snapshot else { return };
        let Ok(snapshot) = self.board.read().map(|b| b.snapshot()) else {
            return;
        };
        let written = serde_json::to_vec(&snapshot)
            .map_err(std::io::Error::other)
            .and_then(|text| {
                let partial = path.with_extension("whatif.json.partial");
                std::fs::write(&partial, text)?;
                std::fs::rename(&partial, path)
            });
        if let Err(e) = written {
            tracing::warn!(path = %path.display(), error = %e, "the what-if's figures not kept");
        }
    }

    /// Follow one answered request: its trace record made here, as `--record` makes it.
    fn follow(&self, whatif: &mut WhatIf, answered: Answered) {
        let before = whatif.skipped();
        let costs = match &answered.body {
            None => {
                let cause = "request_too_large";
                whatif.stop_following(&answered.session, answered.time_ms, cause);
                None
            }
            Some(body) => record_of(&answered, body).and_then(|record| whatif.feed(&record)),
        };
        self.account(whatif, &answered.session, before, costs);
    }

    fn account(&self, whatif: &WhatIf, session: &str, before: Skipped, costs: Option<Vec<f64>>) {
        let after = whatif.skipped();
        let skipped = &self.metrics.whatif_skipped;
        for ((cause, n), (_, was)) in after.by_cause().into_iter().zip(before.by_cause()) {
            skipped.with_label_values(&[cause]).inc_by(n - was);
        }
        for (name, cost) in whatif.candidates().into_iter().zip(costs.iter().flatten()) {
            (self.metrics.whatif_cost_usd)
                .with_label_values(&[name])
                .inc_by(*cost);
        }
        // A request not taken may still have changed the session's figures (it is no
        // longer followed, and says why).
        let Ok(mut board) = self.board.write() else {
            return;
        };
        if after.evicted > before.evicted {
            board.sessions.retain(|id, _| whatif.session(id).is_some());
        }
        if let Some(figures) = whatif.session(session) {
            board.sessions.insert(session.to_owned(), figures.clone());
        }
    }
}

/// The trace record of an answered request with `body`, read back as `cachet replay`
/// reads the line `--record` writes; `None` when replay would not read it either.
fn record_of(answered: &Answered, body: &[u8]) -> Option<Record> {
    let (time, session, route) = (answered.time_ms, &answered.session, answered.route);
    let (path, headers) = (&answered.path, &answered.headers);
    let mut record = match crate::trace::recorder::readable(body) {
        true => crate::trace::recorder::capture_text(time, session, route, path, headers, body),
        false => crate::trace::recorder::capture_raw(time, session, route, path, headers, body),
    };
    record.status = Some(answered.status);
    record.usage = answered.usage;
    record.response_id = answered.response_id.clone();
    record.output = answered.output.clone();
    let line = record.to_line();
    let mut read = crate::trace::record::parse_jsonl(&line, "live").ok()?;
    (read.len() == 1).then(|| read.remove(0))
}

/// The client as sent, then each candidate on a pipeline of its own (one that cannot start
/// is left out, and logged).
fn start_candidates(candidates: Option<Vec<(String, PolicySet)>>, budget: Budget) -> WhatIf {
    let mut shapers: Vec<(String, Box<dyn Shaper + Send>)> =
        vec![(CLIENT.to_owned(), Box::new(AsRecorded))];
    let mut applies = Vec::new();
    for (name, set) in candidates.unwrap_or_default() {
        let matched = super::advise::applies_to(&set);
        match PipelineShaper::start_with(set, Config::default()) {
            Ok(shaper) => {
                applies.push((name.clone(), matched));
                shapers.push((name, Box::new(shaper)));
            }
            Err(e) => {
                tracing::warn!(candidate = %name, error = %e, "what-if candidate not started")
            }
        }
    }
    let mut whatif = WhatIf::new(budget, shapers);
    // A candidate is run on the sessions of the APIs its policies match, and only there.
    for (name, matched) in applies {
        whatif.only_for(&name, Box::new(matched));
    }
    whatif
}
