//! `[[payload]]` edits for `before_provider_request`: RFC 6902 JSON Patch and RFC 7396
//! merge patch on the compiled provider payload.

use serde_json::Value;

use super::model::{PayloadEdit, PromptCacheKey};
use super::template::{render_value, TemplateVars};

/// Apply the edits in order; each sees the previous one's result. A JSON Patch that fails
/// (e.g. `test` or `remove` on a missing path) leaves the payload as it was before that
/// edit and stops with the reason.
pub fn apply_payload_edits(
    payload: &mut Value,
    edits: &[PayloadEdit],
    vars: &TemplateVars,
) -> Result<(), String> {
    for (i, edit) in edits.iter().enumerate() {
        match edit {
            PayloadEdit::JsonPatch(ops) => {
                let patch: json_patch::Patch = serde_json::from_value(render_value(ops, vars))
                    .map_err(|e| format!("payload[{i}].json_patch: {e}"))?;
                json_patch::patch(payload, &patch)
                    .map_err(|e| format!("payload[{i}].json_patch: {e}"))?;
            }
            PayloadEdit::MergePatch(merge) => {
                json_patch::merge(payload, &render_value(merge, vars));
            }
        }
    }
    Ok(())
}

/// Set OpenAI's `prompt_cache_key` from the session, unless the client already sent one
/// (its own grouping wins). Returns whether the payload changed.
pub fn apply_prompt_cache_key(
    payload: &mut Value,
    key: PromptCacheKey,
    vars: &TemplateVars,
) -> bool {
    let PromptCacheKey::Session = key;
    match payload.as_object_mut() {
        Some(map) if !map.contains_key("prompt_cache_key") && !vars.session.is_empty() => {
            map.insert(
                "prompt_cache_key".into(),
                Value::String(vars.session.clone()),
            );
            true
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn prompt_cache_key_from_session_keeps_the_clients_own() {
        let vars = TemplateVars {
            session: "s-4".into(),
            ..TemplateVars::default()
        };
        let mut payload = json!({"model": "gpt-5"});
        assert!(apply_prompt_cache_key(
            &mut payload,
            PromptCacheKey::Session,
            &vars
        ));
        assert_eq!(
            payload,
            json!({"model": "gpt-5", "prompt_cache_key": "s-4"})
        );
        let mut payload = json!({"model": "gpt-5", "prompt_cache_key": "mine"});
        assert!(!apply_prompt_cache_key(
            &mut payload,
            PromptCacheKey::Session,
            &vars
        ));
        assert_eq!(payload["prompt_cache_key"], "mine");
    }

    #[test]
    fn json_patch_then_merge_patch_with_templates() {
        let mut payload = json!({"model": "m", "temperature": 1, "messages": []});
        let edits = vec![
            PayloadEdit::JsonPatch(json!([
                {"op": "add", "path": "/metadata", "value": {"user_id": "{{session}}"}},
                {"op": "remove", "path": "/temperature"}
            ])),
            PayloadEdit::MergePatch(json!({"metadata": {"team": "infra"}, "top_k": 5})),
        ];
        let vars = TemplateVars {
            session: "s-9".into(),
            ..TemplateVars::default()
        };
        apply_payload_edits(&mut payload, &edits, &vars).unwrap();
        assert_eq!(
            payload,
            json!({"model": "m", "messages": [],
                "metadata": {"user_id": "s-9", "team": "infra"}, "top_k": 5})
        );
    }

    #[test]
    fn failing_json_patch_leaves_payload_unchanged() {
        let mut payload = json!({"model": "m"});
        let edits = vec![PayloadEdit::JsonPatch(json!([
            {"op": "add", "path": "/x", "value": 1},
            {"op": "remove", "path": "/missing"}
        ]))];
        let err = apply_payload_edits(&mut payload, &edits, &TemplateVars::default()).unwrap_err();
        assert!(err.starts_with("payload[0].json_patch: "), "{err}");
        assert_eq!(payload, json!({"model": "m"}));
    }
}
