//! Validated, immutable policy types. Built only by `validate`; everything here has
//! been checked, so the request path never re-validates.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;

use super::matcher::Matcher;
use super::template::{render, render_value, TemplateVars};
use super::transform::MoveLines;
use crate::patch::{Display, HandlerResult, Op};

/// One policy file, validated.
#[derive(Debug, Clone)]
pub struct Policy {
    pub name: String,
    pub description: String,
    pub order: i64,
    pub matcher: Matcher,
    pub breakpoints: Option<Breakpoints>,
    pub prompt_cache_key: Option<PromptCacheKey>,
    /// Ask the provider for its own cache-miss reason (`[diagnostics] provider = true`).
    pub provider_diagnostics: bool,
    pub context: Vec<ContextHandler>,
    pub payload: Vec<PayloadEdit>,
    pub inject: Vec<InjectSpec>,
    pub hooks: Vec<HookSpec>,
    pub source_file: PathBuf,
}

impl Policy {
    /// The context handlers that run for `reason`, in file order.
    pub fn context_for(&self, reason: ContextReason) -> impl Iterator<Item = &ContextHandler> {
        self.context.iter().filter(move |h| h.reason == reason)
    }

    /// The external hooks subscribed to `event`, in file order.
    pub fn hooks_for(&self, event: HookEvent) -> impl Iterator<Item = &HookSpec> {
        self.hooks.iter().filter(move |h| h.events.contains(&event))
    }
}

/// Anthropic cache-marker placement (DESIGN §7).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Breakpoints {
    pub mode: BreakpointMode,
    pub ttl: CacheTtl,
    /// After a turn's final answer, refresh its prefix under a 1h marker with a
    /// `max_tokens: 1` request when the next turn is late (`ttl = "auto"` only; off by
    /// default).
    pub keep_warm: bool,
    /// When the keep-warm goes out after the turn's final request was sent (below the
    /// 5-minute lifetime, so that the prefix is still there to read).
    pub keep_warm_after_secs: u64,
}

/// The default keep-warm delay: 30 seconds before a 5-minute entry expires.
pub const KEEP_WARM_AFTER_SECS: u64 = 270;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakpointMode {
    Preserve,
    Auto,
    Strip,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheTtl {
    FiveMinutes,
    OneHour,
    /// Per request: 1h only where a reuse after more than 5 minutes is expected and pays
    /// for the dearer write (see `crate::ttl`).
    Auto,
}

impl CacheTtl {
    /// The value written in the policy file.
    pub fn label(self) -> &'static str {
        match self {
            CacheTtl::FiveMinutes => "5m",
            CacheTtl::OneHour => "1h",
            CacheTtl::Auto => "auto",
        }
    }
}

/// Where an OpenAI `prompt_cache_key` comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PromptCacheKey {
    /// The cachet session id.
    Session,
}

/// The three context hook points of the pipeline (DESIGN §1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ContextReason {
    /// Patches are persisted in the session.
    BeforeRequest,
    /// Patches apply to this request only.
    Ephemeral,
    /// After the response; patches are persisted.
    TurnEnd,
}

impl ContextReason {
    pub const ALL: [ContextReason; 3] = [
        ContextReason::BeforeRequest,
        ContextReason::Ephemeral,
        ContextReason::TurnEnd,
    ];

    pub fn label(self) -> &'static str {
        match self {
            ContextReason::BeforeRequest => "before_request",
            ContextReason::Ephemeral => "ephemeral",
            ContextReason::TurnEnd => "turn_end",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|r| r.label() == s)
    }
}

/// One `[[context]]` handler.
#[derive(Debug, Clone)]
pub struct ContextHandler {
    pub reason: ContextReason,
    /// Transformer name for metrics and the session timeline (default: the policy name).
    pub transformer: String,
    pub action: ContextAction,
    pub display: Option<Display>,
}

impl ContextHandler {
    /// The handler's `move_lines` when it holds what the cached prefix holds
    /// (`when = "changed"`): the pipeline runs it with the session's held parts.
    pub fn holding(&self) -> Option<&MoveLines> {
        match &self.action {
            ContextAction::MoveLines(m) if m.hold => Some(m),
            _ => None,
        }
    }

    /// What this handler returns for a request: declared ops with their templates
    /// rendered, or the ops a built-in transform computes from the system parts
    /// `(name, text)`. The engine applies the result like a hook server's answer.
    pub fn result(&self, system_parts: &[(String, String)], vars: &TemplateVars) -> HandlerResult {
        let patch = match &self.action {
            ContextAction::Patch(ops) => ops.iter().map(|op| render_op(op, vars)).collect(),
            ContextAction::MoveLines(m) => m.ops(system_parts),
        };
        let display = self.display.as_ref().map(|d| Display {
            title: render(&d.title, vars),
            summary: d.summary.as_ref().map(|s| render(s, vars)),
            markdown: d.markdown.as_ref().map(|m| render(m, vars)),
        });
        HandlerResult {
            patch,
            transformer_name: Some(self.transformer.clone()),
            display,
        }
    }
}

/// Render templates in an op's strings; an op that will not round-trip stays as declared.
fn render_op(op: &Op, vars: &TemplateVars) -> Op {
    serde_json::to_value(op)
        .ok()
        .and_then(|v| serde_json::from_value(render_value(&v, vars)).ok())
        .unwrap_or_else(|| op.clone())
}

#[derive(Debug, Clone)]
pub enum ContextAction {
    /// Declared ops; string values may hold template variables, rendered per request.
    Patch(Vec<Op>),
    /// A built-in transform that computes its ops from the envelope.
    MoveLines(MoveLines),
}

/// One `[[payload]]` edit, applied to the compiled provider payload.
#[derive(Debug, Clone)]
pub enum PayloadEdit {
    /// RFC 6902 operations, as JSON (validated; string values are templates).
    JsonPatch(Value),
    /// RFC 7396 merge patch (string values are templates).
    MergePatch(Value),
}

impl PayloadEdit {
    /// The edit's key in a policy file, and its `op` label in `cachet_patches_total`.
    pub fn name(&self) -> &'static str {
        match self {
            PayloadEdit::JsonPatch(_) => "json_patch",
            PayloadEdit::MergePatch(_) => "merge_patch",
        }
    }
}

/// One `[[inject]]` entry (DESIGN §6). Parsed and validated here; run by the injector.
#[derive(Debug, Clone, PartialEq)]
pub struct InjectSpec {
    pub source: InjectSource,
    pub mode: InjectMode,
    /// System part name used in `system-prompt` mode.
    pub part: String,
    /// Variant weights, only for `ab` mode, sorted by mode name.
    pub ab: Vec<(InjectMode, u32)>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum InjectSource {
    /// A file, resolved against the policy file's folder.
    File(PathBuf),
    /// A folder of notes, the `top_k` best retrieved against the latest user prompt.
    Notes { dir: PathBuf, top_k: usize },
    /// An HTTP memory service.
    Url(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum InjectMode {
    SystemPrompt,
    ContextHook,
    Pinned,
    Tail,
    Ab,
}

impl InjectMode {
    pub const ALL: [InjectMode; 5] = [
        InjectMode::SystemPrompt,
        InjectMode::ContextHook,
        InjectMode::Pinned,
        InjectMode::Tail,
        InjectMode::Ab,
    ];

    pub fn label(self) -> &'static str {
        match self {
            InjectMode::SystemPrompt => "system-prompt",
            InjectMode::ContextHook => "context-hook",
            InjectMode::Pinned => "pinned",
            InjectMode::Tail => "tail",
            InjectMode::Ab => "ab",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|m| m.label() == s)
    }
}

/// The events an external hook can subscribe to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HookEvent {
    Context(ContextReason),
    BeforeProviderRequest,
}

impl HookEvent {
    pub const ALL: [HookEvent; 4] = [
        HookEvent::Context(ContextReason::BeforeRequest),
        HookEvent::Context(ContextReason::Ephemeral),
        HookEvent::Context(ContextReason::TurnEnd),
        HookEvent::BeforeProviderRequest,
    ];

    pub fn label(self) -> &'static str {
        match self {
            HookEvent::Context(ContextReason::BeforeRequest) => "context:before_request",
            HookEvent::Context(ContextReason::Ephemeral) => "context:ephemeral",
            HookEvent::Context(ContextReason::TurnEnd) => "context:turn_end",
            HookEvent::BeforeProviderRequest => "before_provider_request",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|e| e.label() == s)
    }
}

/// What a failed hook call does to the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnError {
    /// Fail open: the request goes on without the hook's change; the failure is counted.
    Continue,
    /// Fail closed: the client gets a provider-format error.
    Fail,
}

impl OnError {
    pub fn label(self) -> &'static str {
        match self {
            OnError::Continue => "continue",
            OnError::Fail => "fail",
        }
    }
}

/// One `[[hook]]` entry: an external hook server.
#[derive(Debug, Clone, PartialEq)]
pub struct HookSpec {
    /// Metric label and log name: the `name` field, or `<policy>#<index>`.
    pub name: String,
    pub url: reqwest::Url,
    pub events: Vec<HookEvent>,
    pub timeout: Duration,
    pub on_error: OnError,
}
