//! Declarative policies (DESIGN §5.1) and `cachet check`.
//!
//! A policy file is read into strict raw structs (`raw`), then validated into immutable
//! types (`model`); errors name file, line, field and what is wrong (`error`, `locate`).
//! `load` orders the active set; `matcher` chooses policies per request; `template`,
//! `transform` and `payload` are the pure functions the pipeline calls.

mod error;
mod load;
mod locate;
mod matcher;
mod model;
mod payload;
mod raw;
mod template;
mod transform;
mod validate;
mod validate_ext;

pub use error::{render_errors, PolicyError};
pub use load::{load_policies, parse_policy, PolicySet};
pub use locate::line_col;
pub use matcher::{ClientKind, Matcher, RequestFacts};
pub use model::{
    BreakpointMode, Breakpoints, CacheTtl, ContextAction, ContextHandler, ContextReason, HookEvent,
    HookSpec, InjectMode, InjectSource, InjectSpec, OnError, PayloadEdit, Policy, PromptCacheKey,
};
pub use payload::apply_payload_edit;
pub use raw::{DEFAULT_HOOK_TIMEOUT_MS, DEFAULT_ORDER};
pub use template::{render, render_value, utc_date, TemplateVars, TEMPLATE_VARIABLES};
pub use transform::{Held, HoldOps, MoveLines};
pub use validate::OP_NAMES;

#[cfg(test)]
mod tests;
