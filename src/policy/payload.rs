//! `[[payload]]` edits for `before_provider_request`: RFC 6902 JSON Patch and RFC 7396
//! merge patch on the compiled provider payload's bytes (what an edit does not touch keeps
//! its bytes; no `Value` of the body is built).

use super::model::PayloadEdit;
use super::template::{render_value, TemplateVars};

/// Apply one edit. A JSON Patch that fails (e.g. `test` or `remove` on a missing path)
/// leaves the payload as it was and says why.
pub fn apply_payload_edit(
    payload: &mut Vec<u8>,
    edit: &PayloadEdit,
    vars: &TemplateVars,
) -> Result<(), String> {
    match edit {
        PayloadEdit::JsonPatch(ops) => {
            let patch: json_patch::Patch =
                serde_json::from_value(render_value(ops, vars)).map_err(|e| e.to_string())?;
            crate::json_edit::patch(payload, &patch).map_err(|e| e.to_string())
        }
        PayloadEdit::MergePatch(merge) => {
            crate::json_edit::merge(payload, &render_value(merge, vars));
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn apply(payload: Value, edits: &[PayloadEdit], vars: &TemplateVars) -> (Value, Vec<String>) {
        let mut bytes = serde_json::to_vec(&payload).unwrap();
        let errors = edits
            .iter()
            .filter_map(|edit| apply_payload_edit(&mut bytes, edit, vars).err())
            .collect();
        (serde_json::from_slice(&bytes).unwrap(), errors)
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
        let (payload, errors) = apply(payload, &edits, &vars);
        assert!(errors.is_empty(), "{errors:?}");
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
        let (payload, errors) = apply(json!({"model": "m"}), &edits, &TemplateVars::default());
        assert_eq!(
            errors,
            ["operation '/1' failed at path '/missing': path is invalid"]
        );
        assert_eq!(payload, json!({"model": "m"}));
    }
}
