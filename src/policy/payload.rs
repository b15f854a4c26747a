//! `[[payload]]` edits for `before_provider_request`: RFC 6902 JSON Patch and RFC 7396
//! merge patch on the compiled provider payload's bytes (what an edit does not touch keeps
//! its bytes; no `Value` of the body is built).

use super::model::PayloadEdit;
use super::template::{render_value, TemplateVars};

/// Apply the edits in order; each sees the previous one's result. A JSON Patch that fails
/// (e.g. `test` or `remove` on a missing path) leaves the payload as it was before that
/// edit and stops with the reason.
pub fn apply_payload_edits(
    payload: &mut Vec<u8>,
    edits: &[PayloadEdit],
    vars: &TemplateVars,
) -> Result<(), String> {
    for (i, edit) in edits.iter().enumerate() {
        match edit {
            PayloadEdit::JsonPatch(ops) => {
                let patch: json_patch::Patch = serde_json::from_value(render_value(ops, vars))
                    .map_err(|e| format!("payload[{i}].json_patch: {e}"))?;
                crate::json_edit::patch(payload, &patch)
                    .map_err(|e| format!("payload[{i}].json_patch: {e}"))?;
            }
            PayloadEdit::MergePatch(merge) => {
                crate::json_edit::merge(payload, &render_value(merge, vars));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn apply(
        payload: Value,
        edits: &[PayloadEdit],
        vars: &TemplateVars,
    ) -> (Value, Result<(), String>) {
        let mut bytes = serde_json::to_vec(&payload).unwrap();
        let result = apply_payload_edits(&mut bytes, edits, vars);
        (serde_json::from_slice(&bytes).unwrap(), result)
    }

    #[test]
    fn json_patch_then_merge_patch_with_templates() {
        let payload = json!({"model": "m", "temperature": 1, "messages": []});
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
        let (payload, result) = apply(payload, &edits, &vars);
        result.unwrap();
        assert_eq!(
            payload,
            json!({"model": "m", "messages": [],
                "metadata": {"user_id": "s-9", "team": "infra"}, "top_k": 5})
        );
    }

    #[test]
    fn failing_json_patch_leaves_payload_unchanged() {
        let edits = vec![PayloadEdit::JsonPatch(json!([
            {"op": "add", "path": "/x", "value": 1},
            {"op": "remove", "path": "/missing"}
        ]))];
        let (payload, result) = apply(json!({"model": "m"}), &edits, &TemplateVars::default());
        let err = result.unwrap_err();
        assert!(err.starts_with("payload[0].json_patch: "), "{err}");
        assert_eq!(payload, json!({"model": "m"}));
    }
}
