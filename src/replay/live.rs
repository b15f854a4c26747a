//! The live what-if of `cachet serve`: with monitoring on and `sessions.whatif`, every
//! finished request's trace record (the one `--record` writes) goes through a bounded
//! queue to one worker thread, which reads it back as a trace is read and feeds it to a
//! [`WhatIf`] of the candidates (the shipped ones unless `sessions.whatif_candidates`
//! names others), each run as `cachet replay --arm` runs it. Nothing on the request path
//! waits for it: a full queue drops the record and counts it.

use std::sync::{mpsc, Arc, RwLock};

use anyhow::Context;

use super::shaper::{AsRecorded, Shaper};
use super::whatif::{Budget, Skipped, WhatIf};
use super::PipelineShaper;
use crate::config::Config;
use crate::metrics::Metrics;
use crate::policy::PolicySet;
use crate::session::whatif::{SharedBoard, WhatIfBoard, WhatIfFeed, CLIENT};
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
    };
    std::thread::Builder::new()
        .name("cachet-whatif".into())
        .spawn(move || worker.run(rx, candidates))
        .context("starting the what-if")?;
    Ok(Some(Live {
        feed: WhatIfFeed::new(tx, dropped),
        board,
    }))
}

struct Worker {
    board: SharedBoard,
    metrics: Arc<Metrics>,
}

impl Worker {
    /// Until the pipeline lets go of the feed.
    fn run(self, rx: mpsc::Receiver<Record>, candidates: Vec<(String, PolicySet)>) {
        let mut pending = Some(candidates);
        let mut whatif = None;
        for record in rx {
            let whatif = whatif.get_or_insert_with(|| {
                let started = start_candidates(pending.take());
                if let Ok(mut board) = self.board.write() {
                    board.candidates = started
                        .candidates()
                        .into_iter()
                        .map(str::to_owned)
                        .collect();
                }
                started
            });
            // Read back as `cachet replay` reads the trace line `--record` writes.
            let line = record.to_line();
            let Ok(Some(record)) = crate::trace::record::parse_jsonl(&line, "live")
                .map(|mut r| (r.len() == 1).then(|| r.remove(0)))
            else {
                continue;
            };
            self.account(whatif, &record);
        }
    }

    fn account(&self, whatif: &mut WhatIf, record: &Record) {
        let before = whatif.skipped();
        let costs = whatif.feed(record);
        let after = whatif.skipped();
        let skipped = &self.metrics.whatif_skipped;
        let Skipped {
            too_large,
            too_old,
            evicted,
        } = before;
        for (cause, n) in [
            ("too_large", after.too_large - too_large),
            ("too_old", after.too_old - too_old),
            ("evicted", after.evicted - evicted),
        ] {
            skipped.with_label_values(&[cause]).inc_by(n);
        }
        let Some(costs) = costs else { return };
        for (name, cost) in whatif.candidates().into_iter().zip(&costs) {
            (self.metrics.whatif_cost_usd)
                .with_label_values(&[name])
                .inc_by(*cost);
        }
        let Ok(mut board) = self.board.write() else {
            return;
        };
        if after.evicted > evicted {
            board.sessions.retain(|id, _| whatif.session(id).is_some());
        }
        if let Some(figures) = whatif.session(&record.session) {
            board
                .sessions
                .insert(record.session.clone(), figures.clone());
        }
    }
}

/// The client as sent, then each candidate on a pipeline of its own (one that cannot start
/// is left out, and logged).
fn start_candidates(candidates: Option<Vec<(String, PolicySet)>>) -> WhatIf {
    let mut shapers: Vec<(String, Box<dyn Shaper + Send>)> =
        vec![(CLIENT.to_owned(), Box::new(AsRecorded))];
    for (name, set) in candidates.unwrap_or_default() {
        match PipelineShaper::start_with(set, Config::default()) {
            Ok(shaper) => shapers.push((name, Box::new(shaper))),
            Err(e) => {
                tracing::warn!(candidate = %name, error = %e, "what-if candidate not started")
            }
        }
    }
    WhatIf::new(Budget::default(), shapers)
}
