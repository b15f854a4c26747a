//! Memory injection in the live pipeline: each matched policy's `[[inject]]` tables, placed
//! once per call after `context(before_request)`. Content is fetched once per user prompt;
//! `pinned` placements are persisted on the turn's first call and replayed afterwards.

use std::collections::HashMap;

use super::handlers::{Persisted, Shaping};
use super::Pipeline;
use crate::error::ApiError;
use crate::inject::{self, Injection, Mode, ModeChoice, SourceSpec};
use crate::policy::{InjectMode, InjectSource, Policy};
use crate::session::{ContextTransform, PatchOutcome, SessionContext};

/// Every policy's injections, ready to run, by policy name.
pub struct Injections {
    by_policy: HashMap<String, Vec<Injection>>,
    cache: inject::TurnCache,
    client: reqwest::Client,
}

/// How many turns' contents are kept (one entry per session, injection and prompt).
const TURN_CACHE_ENTRIES: u64 = 10_000;

fn mode_of(mode: InjectMode) -> Option<Mode> {
    Some(match mode {
        InjectMode::SystemPrompt => Mode::SystemPrompt,
        InjectMode::ContextHook => Mode::ContextHook,
        InjectMode::Pinned => Mode::Pinned,
        InjectMode::Tail => Mode::Tail,
        InjectMode::Ab => return None,
    })
}

impl Injections {
    pub fn new<'a>(policies: impl Iterator<Item = &'a Policy>) -> anyhow::Result<Self> {
        let mut by_policy = HashMap::new();
        for policy in policies {
            let list: Vec<Injection> = policy
                .inject
                .iter()
                .enumerate()
                .map(|(i, spec)| Injection {
                    id: format!("{}#{i}", policy.name),
                    source: inject::Source::new(match &spec.source {
                        InjectSource::File(path) => SourceSpec::File(path.clone()),
                        InjectSource::Notes { dir, top_k } => SourceSpec::Notes {
                            dir: dir.clone(),
                            top_k: *top_k,
                        },
                        InjectSource::Url(url) => SourceSpec::Url {
                            url: url.clone(),
                            timeout_ms: inject::source::DEFAULT_URL_TIMEOUT_MS,
                        },
                    }),
                    choice: match mode_of(spec.mode) {
                        Some(mode) => ModeChoice::One(mode),
                        None => ModeChoice::Ab(
                            spec.ab
                                .iter()
                                .filter_map(|(m, w)| Some((mode_of(*m)?, *w)))
                                .collect(),
                        ),
                    },
                    part: spec.part.clone(),
                })
                .collect();
            if !list.is_empty() {
                by_policy.insert(policy.name.clone(), list);
            }
        }
        Ok(Injections {
            by_policy,
            cache: inject::TurnCache::new(TURN_CACHE_ENTRIES),
            client: reqwest::Client::builder().no_proxy().build()?,
        })
    }

    pub fn is_empty(&self) -> bool {
        self.by_policy.is_empty()
    }
}

/// What the injections did to one request.
#[derive(Default)]
pub struct Injected {
    /// The A/B arm or mode, for the `variant` label; `none` without injection.
    pub variant: Option<&'static str>,
    /// Pinned placements to persist now.
    pub persist: Vec<Persisted>,
    /// A context-hook placement wants a marker before its insertion point.
    pub marker_before_insertion: bool,
}

impl Pipeline {
    pub(super) async fn inject(
        &self,
        policies: &[&Policy],
        ctx: &SessionContext,
        prompt: Option<(usize, String)>,
        shaping: &mut Shaping<'_>,
    ) -> Result<Injected, ApiError> {
        let mut out = Injected::default();
        let Some(injections) = &self.injections else {
            return Ok(out);
        };
        let Some((prompt_index, prompt)) = prompt else {
            return Ok(out);
        };
        let plan = ctx.plan();
        for policy in policies {
            for injection in injections.by_policy.get(&policy.name).into_iter().flatten() {
                let turn = inject::inject_for_turn(
                    injection,
                    &ctx.id.id,
                    &prompt,
                    &injections.cache,
                    &injections.client,
                )
                .await;
                if let Some(error) = &turn.new_error {
                    tracing::warn!(injection = %injection.id, "memory source failed; this turn goes without: {error}");
                    self.metrics
                        .hook_failures
                        .with_label_values(&[&injection.id])
                        .inc();
                }
                out.variant = Some(inject::variant_label(turn.mode));
                let placement = turn.placement;
                if placement.ops.is_empty() {
                    continue;
                }
                out.marker_before_insertion |= placement.marker_before_insertion;
                if placement.persisted && pinned_this_turn(&plan.apply, &injection.id, prompt_index)
                {
                    continue; // replayed from the session already
                }
                match shaping.apply(&placement.ops, &injection.id, false) {
                    Ok(ops) => {
                        let outcome = if placement.persisted {
                            PatchOutcome::Persisted
                        } else {
                            PatchOutcome::Ephemeral
                        };
                        self.note_applied(
                            shaping,
                            &injection.id,
                            "inject",
                            outcome,
                            &placement.ops,
                        );
                        if placement.persisted {
                            out.persist.push(Persisted {
                                transformer: injection.id.clone(),
                                ops,
                                display: None,
                            });
                        }
                    }
                    Err(refusal) => {
                        self.note_refused(shaping, &refusal, "inject", &placement.ops);
                        if self.config.policies.strict {
                            return Err(refusal.to_api_error());
                        }
                    }
                }
            }
        }
        Ok(out)
    }
}

/// Whether this turn's pinned memory is already in the session: a stored placement of the
/// same injection made against a history that already held this turn's prompt. Checked in
/// the log rather than a local cache, so restarts and other instances agree.
fn pinned_this_turn(replayed: &[&ContextTransform], injection: &str, prompt_index: usize) -> bool {
    replayed
        .iter()
        .any(|t| t.transformer == injection && t.anchor.count > prompt_index)
}
