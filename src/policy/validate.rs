//! Raw policy → validated `Policy`. Every problem is collected with its field path;
//! `load` places them in the file.

use std::path::Path;

use globset::GlobBuilder;
use http::header::HeaderName;
use regex::Regex;
use serde_json::Value;

use super::error::{check_name, FieldError, FieldPath};
use super::matcher::{parse_endpoint, parse_provider, ClientKind, Matcher};
use super::model::{
    BreakpointMode, Breakpoints, CacheTtl, ContextAction, ContextHandler, ContextReason,
    PayloadEdit, Policy, PromptCacheKey,
};
use super::raw::{RawContext, RawMatch, RawPayload, RawPolicy, RawTransform};
use super::template::{check_template, check_value};
use super::transform::MoveLines;
use super::validate_ext::{validate_hook, validate_inject};
use crate::patch::{Display, Op};
use crate::providers::auth::Credential;

/// The op names of DESIGN §3, for a precise "unknown op" message.
pub const OP_NAMES: [&str; 9] = [
    "system_part_set",
    "system_part_remove",
    "system_parts_replace",
    "tools_replace",
    "tools_remove",
    "messages_cached_replace",
    "messages_insert",
    "messages_uncached_append",
    "options_set",
];

/// Validate a whole policy; `file` is the policy's path (relative paths inside resolve
/// against its folder).
pub fn validate(raw: RawPolicy, file: &Path) -> Result<Policy, Vec<FieldError>> {
    let root = FieldPath::root();
    let mut errors = Vec::new();
    if let Err(e) = check_name(&raw.name, "name") {
        errors.push(root.key("name").error(e));
    }
    let matcher = collect(
        validate_match(&raw.matcher, &root.key("match")),
        &mut errors,
    );
    let breakpoints = raw.breakpoints.as_ref().and_then(|b| {
        let at = root.key("breakpoints");
        let mode = match b.mode.as_str() {
            "preserve" => Some(BreakpointMode::Preserve),
            "auto" => Some(BreakpointMode::Auto),
            "strip" => Some(BreakpointMode::Strip),
            other => {
                errors.push(at.key("mode").error(format!(
                    "unknown mode `{other}`; expected preserve | auto | strip"
                )));
                None
            }
        };
        let ttl = match b.ttl.as_deref() {
            None | Some("5m") => Some(CacheTtl::FiveMinutes),
            Some("1h") => Some(CacheTtl::OneHour),
            Some("auto") => Some(CacheTtl::Auto),
            Some(other) => {
                errors.push(
                    at.key("ttl")
                        .error(format!("unknown ttl `{other}`; expected 5m | 1h | auto")),
                );
                None
            }
        };
        let keep_warm = b.keep_warm.unwrap_or(false);
        if keep_warm && (ttl != Some(CacheTtl::Auto) || mode != Some(BreakpointMode::Auto)) {
            errors.push(at.key("keep_warm").error(
                "keep_warm needs mode = \"auto\" and ttl = \"auto\" (it acts on the learned gaps between turns)",
            ));
        }
        let keep_warm_after_secs = match b.keep_warm_after_secs {
            None => Some(super::model::KEEP_WARM_AFTER_SECS),
            Some(s @ 1..=299) => Some(s as u64),
            Some(other) => {
                errors.push(at.key("keep_warm_after_secs").error(format!(
                    "{other} is not between 1 and 299: the keep-warm must read the prefix before its 5-minute entry expires"
                )));
                None
            }
        };
        Some(Breakpoints {
            mode: mode?,
            ttl: ttl?,
            keep_warm,
            keep_warm_after_secs: keep_warm_after_secs?,
        })
    });
    let prompt_cache_key = raw.prompt_cache_key.as_ref().and_then(|k| {
        if k.from == "session" {
            Some(PromptCacheKey::Session)
        } else {
            errors.push(
                root.key("prompt_cache_key")
                    .key("from")
                    .error(format!("unknown source `{}`; expected session", k.from)),
            );
            None
        }
    });
    let mut context = Vec::new();
    for (i, c) in raw.context.iter().enumerate() {
        let at = root.key("context").index(i);
        if let Some(h) = collect(validate_context(c, &raw.name, &at), &mut errors) {
            context.push(h);
        }
    }
    if let Err(e) = link_holds(&mut context) {
        errors.push(root.key("context").error(e));
    }
    let mut payload = Vec::new();
    for (i, p) in raw.payload.iter().enumerate() {
        let at = root.key("payload").index(i);
        if let Some(edit) = collect(validate_payload(p, &at), &mut errors) {
            payload.push(edit);
        }
    }
    let base = file.parent().unwrap_or(Path::new("."));
    let mut inject = Vec::new();
    for (i, spec) in raw.inject.iter().enumerate() {
        let at = root.key("inject").index(i);
        if let Some(s) = collect(validate_inject(spec, base, &at), &mut errors) {
            inject.push(s);
        }
    }
    let mut hooks = Vec::new();
    for (i, h) in raw.hook.iter().enumerate() {
        let at = root.key("hook").index(i);
        if let Some(h) = collect(validate_hook(h, &raw.name, i, &at), &mut errors) {
            hooks.push(h);
        }
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    Ok(Policy {
        name: raw.name,
        description: raw.description,
        order: raw.order,
        matcher: matcher.unwrap_or_default(),
        breakpoints,
        prompt_cache_key,
        provider_diagnostics: raw.diagnostics.as_ref().is_some_and(|d| d.provider),
        context,
        payload,
        inject,
        hooks,
        source_file: file.to_path_buf(),
    })
}

/// Keep the value, or move its errors into `errors`.
fn collect<T>(result: Result<T, Vec<FieldError>>, errors: &mut Vec<FieldError>) -> Option<T> {
    match result {
        Ok(v) => Some(v),
        Err(mut e) => {
            errors.append(&mut e);
            None
        }
    }
}

fn validate_match(raw: &RawMatch, at: &FieldPath) -> Result<Matcher, Vec<FieldError>> {
    let mut errors = Vec::new();
    let mut providers = Vec::new();
    for (i, p) in raw.provider.iter().enumerate() {
        match parse_provider(p) {
            Ok(p) => providers.push(p),
            Err(e) => errors.push(at.key("provider").index(i).error(e)),
        }
    }
    let mut endpoints = Vec::new();
    for (i, e) in raw.endpoint.iter().enumerate() {
        match parse_endpoint(e) {
            Ok(e) => endpoints.push(e),
            Err(e) => errors.push(at.key("endpoint").index(i).error(e)),
        }
    }
    let mut models = Vec::new();
    for (i, m) in raw.model.iter().enumerate() {
        match GlobBuilder::new(m).literal_separator(false).build() {
            Ok(g) => models.push((m.clone(), g)),
            Err(e) => errors.push(
                at.key("model")
                    .index(i)
                    .error(format!("bad glob `{m}`: {}", e.kind())),
            ),
        }
    }
    let mut clients = Vec::new();
    for (i, c) in raw.client.iter().enumerate() {
        match ClientKind::parse(c) {
            Some(c) => clients.push(c),
            None => errors.push(at.key("client").index(i).error(format!(
                "unknown client `{c}`; expected pi | claude-code | codex | sdk | unknown"
            ))),
        }
    }
    let mut headers = Vec::new();
    for (name, value) in &raw.headers {
        match HeaderName::from_bytes(name.to_ascii_lowercase().as_bytes()) {
            Ok(h) => headers.push((h, value.clone())),
            Err(_) => errors.push(
                at.key("headers")
                    .key(name)
                    .error(format!("`{name}` is not a valid header name")),
            ),
        }
    }
    let mut auth = Vec::new();
    for (i, a) in raw.auth.iter().enumerate() {
        match Credential::parse(a) {
            Some(c) => auth.push(c),
            None => errors.push(at.key("auth").index(i).error(format!(
                "unknown credential kind `{a}`; expected api-key | oauth"
            ))),
        }
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    Matcher::new(providers, endpoints, models, clients, headers)
        .map(|m| m.with_auth(auth))
        .map_err(|e| vec![at.key("model").error(format!("bad glob: {e}"))])
}

/// Each holding `move_lines` of a policy learns the patterns of the others: their lines
/// may differ from what is held without the rest of a part having changed. What a handler
/// holds is recorded under its transformer name, so two of them may not share one.
fn link_holds(context: &mut [ContextHandler]) -> Result<(), String> {
    let holding: Vec<(String, Regex)> = context
        .iter()
        .filter_map(|h| match &h.action {
            ContextAction::MoveLines(m) if m.hold => {
                Some((h.transformer.clone(), m.pattern.clone()))
            }
            _ => None,
        })
        .collect();
    for (i, (name, _)) in holding.iter().enumerate() {
        if holding[..i].iter().any(|(n, _)| n == name) {
            return Err(format!(
                "two move_lines with when = \"changed\" share the transformer name `{name}`; give each its own"
            ));
        }
    }
    for h in context.iter_mut() {
        let name = h.transformer.clone();
        if let ContextAction::MoveLines(m) = &mut h.action {
            if m.hold {
                m.others = holding
                    .iter()
                    .filter(|(n, _)| *n != name)
                    .map(|(_, p)| p.clone())
                    .collect();
            }
        }
    }
    Ok(())
}

fn validate_context(
    raw: &RawContext,
    policy: &str,
    at: &FieldPath,
) -> Result<ContextHandler, Vec<FieldError>> {
    let mut errors = Vec::new();
    let reason = ContextReason::parse(&raw.reason);
    if reason.is_none() {
        errors.push(at.key("reason").error(format!(
            "unknown reason `{}`; expected before_request | ephemeral | turn_end",
            raw.reason
        )));
    }
    let transformer = raw
        .transformer
        .clone()
        .unwrap_or_else(|| policy.to_string());
    if let Err(e) = check_name(&transformer, "transformer") {
        errors.push(at.key("transformer").error(e));
    }
    let action = match (&raw.patch, &raw.transform) {
        (Some(patch), None) => {
            let mut ops = Vec::new();
            for (i, entry) in patch.iter().enumerate() {
                match validate_op(entry, &at.key("patch").index(i)) {
                    Ok(op) => ops.push(op),
                    Err(e) => errors.push(e),
                }
            }
            Some(ContextAction::Patch(ops))
        }
        (None, Some(transform)) => match validate_transform(transform, &at.key("transform")) {
            Ok(t) => Some(t),
            Err(mut e) => {
                errors.append(&mut e);
                None
            }
        },
        _ => {
            errors.push(at.error("give exactly one of `patch` or `transform`"));
            None
        }
    };
    let display = raw.display.as_ref().map(|d| Display {
        title: d.title.clone(),
        summary: d.summary.clone(),
        markdown: d.markdown.clone(),
    });
    if let Some(d) = &display {
        let texts = [Some(&d.title), d.summary.as_ref(), d.markdown.as_ref()];
        if let Some(e) = texts
            .into_iter()
            .flatten()
            .find_map(|t| check_template(t).err())
        {
            errors.push(at.key("display").error(e));
        }
    }
    let holds = matches!(&action, Some(ContextAction::MoveLines(m)) if m.hold);
    if holds && reason.is_some_and(|r| r != ContextReason::BeforeRequest) {
        errors.push(at.key("transform").key("move_lines").key("when").error(
            "`changed` keeps what the session's cached prefix holds, which is persisted: the handler's reason must be before_request",
        ));
    }
    match (reason, action) {
        (Some(reason), Some(action)) if errors.is_empty() => Ok(ContextHandler {
            reason,
            transformer,
            action,
            display,
        }),
        _ => Err(errors),
    }
}

/// One declared patch entry: a known op, with its fields, a reason when it touches the
/// cached prefix, and only known template variables.
pub fn validate_op(entry: &toml::Value, at: &FieldPath) -> Result<Op, FieldError> {
    let json = toml_to_json(entry);
    let Some(name) = json.get("op") else {
        return Err(at.error(
            "a patch entry must be a table with an `op`, e.g. { op = \"system_part_set\", ... }",
        ));
    };
    let Some(name) = name.as_str().filter(|n| OP_NAMES.contains(n)) else {
        return Err(at.error(format!(
            "unknown op `{}`; expected one of {}",
            name.as_str().unwrap_or(&name.to_string()),
            OP_NAMES.join(", ")
        )));
    };
    let op: Op =
        serde_json::from_value(json.clone()).map_err(|e| at.error(format!("op `{name}`: {e}")))?;
    op.check_reason().map_err(|e| at.error(e))?;
    check_value(&json).map_err(|e| at.error(e))?;
    Ok(op)
}

fn validate_transform(
    raw: &RawTransform,
    at: &FieldPath,
) -> Result<ContextAction, Vec<FieldError>> {
    let Some(m) = &raw.move_lines else {
        return Err(vec![
            at.error("names no built-in transform; known: move_lines")
        ]);
    };
    let mut errors = Vec::new();
    let here = at.key("move_lines");
    if m.from != "system" {
        errors.push(
            here.key("from")
                .error(format!("unknown source `{}`; expected system", m.from)),
        );
    }
    if m.to != "uncached_tail" {
        errors.push(
            here.key("to")
                .error(format!("unknown target `{}`; expected uncached_tail", m.to)),
        );
    }
    let hold = match m.when.as_deref() {
        None | Some("always") => false,
        Some("changed") => true,
        Some(other) => {
            errors.push(here.key("when").error(format!(
                "unknown value `{other}`; expected always | changed"
            )));
            false
        }
    };
    let pattern =
        match Regex::new(&m.pattern) {
            Ok(re) if re.is_match("") => {
                errors.push(here.key("pattern").error(
                    "pattern matches the empty string; it must match the volatile text itself",
                ));
                None
            }
            Ok(re) => Some(re),
            Err(e) => {
                errors.push(
                    here.key("pattern")
                        .error(format!("bad regex: {}", regex_error(&e))),
                );
                None
            }
        };
    let reason = raw
        .invalidate_cache_reason
        .clone()
        .filter(|r| !r.trim().is_empty());
    if reason.is_none() {
        errors.push(
            at.error(
                "move_lines changes the cached system prompt but has no invalidateCacheReason",
            ),
        );
    }
    match (pattern, reason) {
        (Some(pattern), Some(reason)) if errors.is_empty() => {
            Ok(ContextAction::MoveLines(MoveLines {
                pattern,
                invalidate_cache_reason: reason,
                hold,
                others: Vec::new(),
            }))
        }
        _ => Err(errors),
    }
}

fn validate_payload(raw: &RawPayload, at: &FieldPath) -> Result<PayloadEdit, Vec<FieldError>> {
    match (&raw.json_patch, &raw.merge_patch) {
        (Some(ops), None) => {
            let mut errors = Vec::new();
            let mut json_ops = Vec::new();
            for (i, entry) in ops.iter().enumerate() {
                let here = at.key("json_patch").index(i);
                let json = toml_to_json(entry);
                if let Err(e) = check_pointers(&json) {
                    errors.push(here.error(e));
                } else if let Err(e) =
                    serde_json::from_value::<json_patch::PatchOperation>(json.clone())
                {
                    errors.push(here.error(format!("bad JSON Patch operation: {e}")));
                } else if let Err(e) = check_value(&json) {
                    errors.push(here.error(e));
                }
                json_ops.push(json);
            }
            if errors.is_empty() {
                Ok(PayloadEdit::JsonPatch(Value::Array(json_ops)))
            } else {
                Err(errors)
            }
        }
        (None, Some(merge)) => {
            let json = toml_to_json(&toml::Value::Table(merge.clone()));
            check_value(&json).map_err(|e| vec![at.key("merge_patch").error(e)])?;
            Ok(PayloadEdit::MergePatch(json))
        }
        _ => Err(vec![
            at.error("give exactly one of `json_patch` or `merge_patch`")
        ]),
    }
}

/// `path` and `from` must be RFC 6901 pointers: empty, or `/`-separated tokens where
/// `~` only appears as `~0` or `~1`.
fn check_pointers(op: &Value) -> Result<(), String> {
    for field in ["path", "from"] {
        let Some(Value::String(p)) = op.get(field) else {
            continue;
        };
        if !p.is_empty() && !p.starts_with('/') {
            return Err(format!(
                "{field} `{p}` is not a JSON Pointer: it must be empty or start with `/`"
            ));
        }
        let bad_escape = p
            .match_indices('~')
            .any(|(i, _)| !matches!(p.as_bytes().get(i + 1), Some(b'0' | b'1')));
        if bad_escape {
            return Err(format!(
                "{field} `{p}` is not a JSON Pointer: `~` must be written `~0` and `/` inside a key `~1`"
            ));
        }
    }
    Ok(())
}

/// TOML values as JSON (datetimes become their RFC 3339 text).
pub fn toml_to_json(value: &toml::Value) -> Value {
    match value {
        toml::Value::String(s) => Value::String(s.clone()),
        toml::Value::Integer(i) => Value::from(*i),
        toml::Value::Float(f) => Value::from(*f),
        toml::Value::Boolean(b) => Value::Bool(*b),
        toml::Value::Datetime(d) => Value::String(d.to_string()),
        toml::Value::Array(items) => Value::Array(items.iter().map(toml_to_json).collect()),
        toml::Value::Table(t) => Value::Object(
            t.iter()
                .map(|(k, v)| (k.clone(), toml_to_json(v)))
                .collect(),
        ),
    }
}

/// The regex crate's message spans lines (pattern, caret, error); keep the error itself.
fn regex_error(e: &regex::Error) -> String {
    let text = e.to_string();
    match text.rfind("error: ") {
        Some(i) => text[i + "error: ".len()..].trim().to_string(),
        None => text.split_whitespace().collect::<Vec<_>>().join(" "),
    }
}
