//! Memory injection in the live pipeline: each matched policy's `[[inject]]` tables, placed
//! once per call after `context(before_request)`. Content is fetched once per user prompt;
//! `pinned` placements are persisted once per session and turn, whatever the concurrency
//! (the store's append-once), and replayed afterwards.

use std::collections::HashMap;

use super::handlers::Patching;
use super::Pipeline;
use crate::error::ApiError;
use crate::inject::{self, Injection, Mode, ModeChoice, SourceSpec};
use crate::patch::Op;
use crate::policy::{ContextReason, InjectMode, InjectSource, Policy};
use crate::session::{ContextTransform, PatchOutcome, PersistedOnce, PrefixHashes, SessionContext};

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
    /// A context-hook placement wants a marker before its insertion point.
    pub marker_before_insertion: bool,
}

impl Pipeline {
    pub(super) async fn inject(
        &self,
        policies: &[&Policy],
        ctx: &SessionContext,
        prompt: Option<(usize, String)>,
        shaping: &mut Patching<'_>,
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
                let before = placement
                    .persisted
                    .then(|| (shaping.env.clone(), shaping.map.clone()));
                match shaping.apply(&placement.ops, &injection.id, false) {
                    Ok(ops) => match before {
                        Some(before) => {
                            let pin = Pin {
                                injection: &injection.id,
                                placed: &placement.ops,
                                ops,
                                prompt_index,
                            };
                            self.pin_once(ctx, shaping, pin, before).await?;
                        }
                        None => self.note_applied(
                            shaping,
                            &injection.id,
                            "inject",
                            PatchOutcome::Ephemeral,
                            &placement.ops,
                        ),
                    },
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

/// A pinned placement just applied, to persist.
struct Pin<'a> {
    injection: &'a str,
    /// The ops as placed (for metrics and the session log).
    placed: &'a [Op],
    /// The same with client positions, as persisted.
    ops: Vec<Op>,
    prompt_index: usize,
}

impl Pipeline {
    /// Persist this turn's pinned placement once per session and turn. When a concurrent
    /// request (here or on another instance) persisted it first, its placement replaces
    /// ours in this request, so every request of the turn carries the same bytes and the
    /// log holds one copy.
    async fn pin_once(
        &self,
        ctx: &SessionContext,
        shaping: &mut Patching<'_>,
        pin: Pin<'_>,
        before: (crate::envelope::Envelope, super::history::HistoryMap),
    ) -> Result<(), ApiError> {
        let reason = ContextReason::BeforeRequest.label();
        let unpersisted = |shaping: &mut Patching<'_>| {
            self.note_applied(
                shaping,
                pin.injection,
                "inject",
                PatchOutcome::Ephemeral,
                pin.placed,
            )
        };
        let (Some(store), Some(transform)) = (
            &self.store,
            ctx.transform(pin.injection, reason, pin.ops, None),
        ) else {
            unpersisted(shaping);
            return Ok(());
        };
        let key = pin_key(pin.injection, &ctx.history, pin.prompt_index);
        let theirs = match ctx.persist_once(store.as_ref(), &key, transform).await {
            Ok(PersistedOnce::Ours) => {
                self.note_applied(
                    shaping,
                    pin.injection,
                    "inject",
                    PatchOutcome::Persisted,
                    pin.placed,
                );
                return Ok(());
            }
            Ok(PersistedOnce::Theirs(theirs)) => theirs,
            Err(e) => {
                // Fail-open: this request keeps its placement, unpersisted.
                self.store_failed("append", &e)?;
                Vec::new()
            }
        };
        // An earlier placement made against a history this request does not extend (the
        // turn's prompt matched, a later message did not) cannot be replayed here: this
        // request keeps its own, which is not persisted.
        let usable: Vec<&ContextTransform> = theirs
            .iter()
            .filter(|t| ctx.history.matches(&t.anchor))
            .collect();
        if usable.is_empty() {
            unpersisted(shaping);
            return Ok(());
        }
        (*shaping.env, *shaping.map) = before;
        self.replay_transforms(shaping, &usable);
        Ok(())
    }
}

/// The append-once key of a pinned placement: the injection and the history up to and
/// including the turn's user prompt, so every request of one turn shares it and a fork
/// with another prompt does not.
fn pin_key(injection: &str, history: &PrefixHashes, prompt_index: usize) -> String {
    let turn = history
        .anchor_at(prompt_index + 1)
        .unwrap_or_else(|| history.full());
    format!("pinned/{injection}/{}/{}", turn.count, turn.hash)
}

/// Whether this turn's pinned memory is already in the session: a stored placement of the
/// same injection made against a history that already held this turn's prompt. Checked in
/// the log rather than a local cache, so restarts and other instances agree.
fn pinned_this_turn(replayed: &[&ContextTransform], injection: &str, prompt_index: usize) -> bool {
    replayed
        .iter()
        .any(|t| t.transformer == injection && t.anchor.count > prompt_index)
}
