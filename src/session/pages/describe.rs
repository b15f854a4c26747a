//! The words for a patch, a gap, a break and the provider's own diagnosis, shared by the
//! chart's tooltips and the table (plain text here; the pages escape it).

use serde_json::Value;

use super::format;
use super::view::{ttl_label, Expiry, Gap};
use crate::measure::Diagnosis;
use crate::session::entry::PatchEvent;

/// `memory (before_request): system_part_set, messages_insert; invalidates: memory`.
pub fn patch(p: &PatchEvent) -> String {
    let mut text = format!("{} ({}): {}", p.transformer, p.reason, p.ops.join(", "));
    if p.count > 1 {
        text.push_str(&format!(" ({} patches)", p.count));
    }
    if !p.invalidate.is_empty() {
        text.push_str("; invalidates the cache: ");
        text.push_str(&p.invalidate.join(", "));
    }
    if let Some(error) = &p.error {
        text.push_str("; ");
        text.push_str(error);
    }
    text
}

/// What the gap did to the cache, when it did something.
pub fn expiry(gap: &Gap) -> Option<String> {
    match gap.expiry {
        Expiry::All(ttl) => Some(format!(
            "past the {} TTL of every marker of the lane's previous request: its cache entries expired",
            ttl_label(ttl)
        )),
        Expiry::Partly(ttl) => Some(format!(
            "past the {} TTL: entries at the previous request's {} markers expired, the longer-lived ones were kept",
            ttl_label(ttl),
            ttl_label(ttl)
        )),
        Expiry::Kept | Expiry::Unmarked => None,
    }
}

/// `4m 12s since the lane's previous request`, with the expiry when there is one.
pub fn gap(gap: &Gap) -> String {
    let mut text = format!(
        "{} since the lane's previous request",
        format::duration(gap.ms)
    );
    if let Some(expiry) = expiry(gap) {
        text.push_str(", ");
        text.push_str(&expiry);
    }
    text
}

/// The short name of a gap's expiry: `past 5m TTL`.
pub fn expiry_short(gap: &Gap) -> Option<String> {
    match gap.expiry {
        Expiry::All(ttl) | Expiry::Partly(ttl) => Some(format!("past {} TTL", ttl_label(ttl))),
        Expiry::Kept | Expiry::Unmarked => None,
    }
}

/// `system_changed (system): system part `env` changed`.
pub fn diagnosis(d: &Diagnosis) -> String {
    format!("{} ({}): {}", d.reason.label(), d.section.label(), d.detail)
}

/// The facts of a diagnosis beyond its one line, as label and value pairs.
pub fn diagnosis_facts(d: &Diagnosis) -> Vec<(&'static str, String)> {
    let mut facts = vec![
        ("section", d.section.label().to_owned()),
        ("reason", d.reason.label().to_owned()),
    ];
    if let Some(part) = &d.part {
        facts.push(("system part", part.clone()));
    }
    if let Some(tool) = &d.tool {
        facts.push(("tool", tool.clone()));
    }
    if let Some(i) = d.message_index {
        facts.push(("message", i.to_string()));
    }
    if let Some(expected) = d.expected_read {
        facts.push(("expected read", format::tokens(expected)));
    }
    facts.push(("read", format::tokens(d.read)));
    let blame = d.blame();
    facts.push(("blame", format!("{}: {}", blame.who.label(), blame.what)));
    if let Some(transformer) = blame.transformer {
        facts.push(("by", transformer));
    }
    if let Some(op) = blame.op {
        facts.push(("patch op", op));
    }
    if !d.detail.is_empty() {
        facts.push(("detail", d.detail.clone()));
    }
    facts
}

/// The provider's own cache-miss reason (Anthropic's `cache_miss_reason`), as a line:
/// `system_changed, 5,504 tokens missed`, or `no miss` when it answered `null`.
pub fn provider_reason(v: &Value) -> String {
    let reason = match v.get("cache_miss_reason") {
        Some(inner) => inner,
        None => v
            .get("diagnostics")
            .and_then(|d| d.get("cache_miss_reason"))
            .unwrap_or(v),
    };
    if reason.is_null() {
        return "no miss".into();
    }
    let kind = reason
        .get("type")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .unwrap_or_else(|| reason.to_string());
    match reason
        .get("cache_missed_input_tokens")
        .and_then(Value::as_u64)
    {
        Some(n) => format!("{kind}, {} tokens missed", format::tokens(n)),
        None => kind,
    }
}

/// How an answer that did not end whole ended, in words (the entry's `outcome`).
pub fn outcome(outcome: &str) -> String {
    match outcome {
        "client_gone" => "interrupted by the client".into(),
        "upstream_cut" => "cut off by the provider".into(),
        "upstream_error" => "ended by a provider error event".into(),
        "idle_timeout" => "provider went silent (idle time-out)".into(),
        other => format!("ended: {other}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_providers_reason_is_read_where_it_stands() {
        let missed = json!({"type": "system_changed", "cache_missed_input_tokens": 5504});
        assert_eq!(
            provider_reason(&json!({"cache_miss_reason": missed})),
            "system_changed, 5,504 tokens missed"
        );
        assert_eq!(
            provider_reason(&json!({"diagnostics": {"cache_miss_reason": null}})),
            "no miss"
        );
        assert_eq!(
            provider_reason(&json!({"type": "previous_message_not_found"})),
            "previous_message_not_found"
        );
    }
}
