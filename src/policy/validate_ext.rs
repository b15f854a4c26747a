//! Validation of `[[hook]]` and `[[inject]]` entries.

use std::path::Path;
use std::time::Duration;

use super::error::{check_name, FieldError, FieldPath};
use super::model::{HookEvent, HookSpec, InjectMode, InjectSource, InjectSpec, OnError};
use super::raw::{RawHook, RawInject};

/// A hook waits on the request path; anything longer than this is a mistake.
const MAX_HOOK_TIMEOUT_MS: i64 = 60_000;

pub fn validate_hook(
    raw: &RawHook,
    policy: &str,
    index: usize,
    at: &FieldPath,
) -> Result<HookSpec, Vec<FieldError>> {
    let mut errors = Vec::new();
    let name = raw
        .name
        .clone()
        .unwrap_or_else(|| format!("{policy}#{index}"));
    if let Err(e) = check_name(&name, "hook name") {
        errors.push(at.key("name").error(e));
    }
    let url = match raw.url.as_deref() {
        None => {
            errors.push(at.error("missing `url`: a hook needs the http(s) URL of its server"));
            None
        }
        Some(u) => match http_url(u) {
            Ok(u) => Some(u),
            Err(e) => {
                errors.push(at.key("url").error(e));
                None
            }
        },
    };
    let mut events = Vec::new();
    if raw.events.is_empty() {
        errors.push(at.key("events").error(format!(
            "a hook needs at least one event; known: {}",
            event_list()
        )));
    }
    for (i, e) in raw.events.iter().enumerate() {
        match HookEvent::parse(e) {
            Some(ev) if events.contains(&ev) => errors.push(
                at.key("events")
                    .index(i)
                    .error(format!("event `{e}` is listed twice")),
            ),
            Some(ev) => events.push(ev),
            None => errors.push(
                at.key("events")
                    .index(i)
                    .error(format!("unknown event `{e}`; expected {}", event_list())),
            ),
        }
    }
    if !(1..=MAX_HOOK_TIMEOUT_MS).contains(&raw.timeout_ms) {
        errors.push(at.key("timeout_ms").error(format!(
            "{} is out of range; expected 1 to {MAX_HOOK_TIMEOUT_MS} milliseconds",
            raw.timeout_ms
        )));
    }
    let on_error = match raw.on_error.as_str() {
        "continue" => Some(OnError::Continue),
        "fail" => Some(OnError::Fail),
        other => {
            errors.push(
                at.key("on_error")
                    .error(format!("unknown value `{other}`; expected continue | fail")),
            );
            None
        }
    };
    match (url, on_error) {
        (Some(url), Some(on_error)) if errors.is_empty() => Ok(HookSpec {
            name,
            url,
            events,
            timeout: Duration::from_millis(raw.timeout_ms.unsigned_abs()),
            on_error,
        }),
        _ => Err(errors),
    }
}

fn event_list() -> String {
    HookEvent::ALL
        .iter()
        .map(|e| e.label())
        .collect::<Vec<_>>()
        .join(" | ")
}

fn http_url(text: &str) -> Result<reqwest::Url, String> {
    match reqwest::Url::parse(text) {
        Ok(u) if matches!(u.scheme(), "http" | "https") && u.host().is_some() => Ok(u),
        Ok(_) => Err(format!("`{text}` is not an http(s) URL")),
        Err(e) => Err(format!("`{text}` is not a URL: {e}")),
    }
}

pub fn validate_inject(
    raw: &RawInject,
    base: &Path,
    at: &FieldPath,
) -> Result<InjectSpec, Vec<FieldError>> {
    let mut errors = Vec::new();
    let src = &raw.source;
    let here = at.key("source");
    let given = [src.file.is_some(), src.notes.is_some(), src.url.is_some()];
    let source = if given.iter().filter(|g| **g).count() != 1 {
        errors.push(here.error("give exactly one of `file`, `notes` or `url`"));
        None
    } else if let Some(file) = &src.file {
        let path = base.join(file);
        if !path.is_file() {
            errors.push(
                here.key("file")
                    .error(format!("`{}` is not a readable file", path.display())),
            );
        }
        Some(InjectSource::File(path))
    } else if let Some(notes) = &src.notes {
        let dir = base.join(notes);
        if !dir.is_dir() {
            errors.push(
                here.key("notes")
                    .error(format!("`{}` is not a folder", dir.display())),
            );
        }
        let top_k = src.top_k.unwrap_or(3);
        if !(1..=100).contains(&top_k) {
            errors.push(
                here.key("top_k")
                    .error(format!("{top_k} is out of range; expected 1 to 100")),
            );
        }
        Some(InjectSource::Notes {
            dir,
            top_k: top_k.clamp(1, 100) as usize,
        })
    } else {
        let url = src.url.as_deref().unwrap_or_default();
        match http_url(url) {
            Ok(_) => Some(InjectSource::Url(url.to_string())),
            Err(e) => {
                errors.push(here.key("url").error(e));
                None
            }
        }
    };
    if src.top_k.is_some() && src.notes.is_none() {
        errors.push(
            here.key("top_k")
                .error("`top_k` only applies to a `notes` source"),
        );
    }
    let mode = InjectMode::parse(&raw.mode);
    if mode.is_none() {
        errors.push(at.key("mode").error(format!(
            "unknown mode `{}`; expected system-prompt | context-hook | pinned | tail | ab",
            raw.mode
        )));
    }
    let part = raw.part.clone().unwrap_or_else(|| "memory".to_string());
    if let Err(e) = check_name(&part, "part") {
        errors.push(at.key("part").error(e));
    }
    let ab = validate_ab(raw, mode, at, &mut errors);
    match (source, mode) {
        (Some(source), Some(mode)) if errors.is_empty() => Ok(InjectSpec {
            source,
            mode,
            part,
            ab,
        }),
        _ => Err(errors),
    }
}

fn validate_ab(
    raw: &RawInject,
    mode: Option<InjectMode>,
    at: &FieldPath,
    errors: &mut Vec<FieldError>,
) -> Vec<(InjectMode, u32)> {
    let here = at.key("ab");
    let Some(weights) = &raw.ab else {
        if mode == Some(InjectMode::Ab) {
            errors.push(at.error(
                "mode `ab` needs `ab` weights, e.g. ab = { \"system-prompt\" = 50, \"context-hook\" = 50 }",
            ));
        }
        return Vec::new();
    };
    if mode.is_some() && mode != Some(InjectMode::Ab) {
        errors.push(here.error("`ab` weights only apply with mode = \"ab\""));
    }
    let mut out = Vec::new();
    for (name, weight) in weights {
        match InjectMode::parse(name) {
            Some(m) if m != InjectMode::Ab => {
                if !(0..=1_000_000).contains(weight) {
                    errors.push(here.key(name).error(format!(
                        "weight {weight} is out of range; expected 0 to 1000000"
                    )));
                } else {
                    out.push((m, *weight as u32));
                }
            }
            _ => errors.push(here.key(name).error(format!(
                "unknown variant `{name}`; expected system-prompt | context-hook | pinned | tail"
            ))),
        }
    }
    if out.iter().map(|(_, w)| u64::from(*w)).sum::<u64>() == 0 && !weights.is_empty() {
        errors.push(here.error("weights must not all be 0"));
    }
    if weights.is_empty() {
        errors.push(here.error("give at least one variant weight"));
    }
    out
}
