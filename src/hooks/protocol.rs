//! The hook protocol's JSON, both ways. Pure functions, so the wire form is testable
//! without a server.

use serde::Deserialize;
use serde_json::{json, Value};

use super::outcome::HookOutcome;
use crate::patch::HandlerResult;
use crate::policy::ContextReason;
use crate::providers::{Endpoint, Provider};

/// `{"type":"context","reason":…,"state":{"envelope":E}}`, plus `assistant` and `usage`
/// for `turn_end`.
pub fn context_event(
    reason: ContextReason,
    envelope: &Value,
    assistant: Option<&Value>,
    usage: Option<&Value>,
) -> Value {
    let mut event = json!({
        "type": "context",
        "reason": reason.label(),
        "state": { "envelope": envelope },
    });
    if let Some(map) = event.as_object_mut() {
        if let Some(a) = assistant {
            map.insert("assistant".into(), a.clone());
        }
        if let Some(u) = usage {
            map.insert("usage".into(), u.clone());
        }
    }
    event
}

/// `{"type":"before_provider_request","provider":…,"endpoint":…,"payload":P}`.
pub fn provider_event(provider: Provider, endpoint: Endpoint, payload: &Value) -> Value {
    json!({
        "type": "before_provider_request",
        "provider": provider.label(),
        "endpoint": endpoint.label(),
        "payload": payload,
    })
}

/// A context hook's 200 answer: `{"patch":[…],"transformerName":…,"display":…}`.
/// An empty patch is no change.
pub fn parse_context_answer(body: &[u8]) -> Result<HookOutcome, String> {
    let value: Value = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    if !value.is_object() {
        return Err("expected a JSON object like {\"patch\": [...]}".into());
    }
    let result: HandlerResult = serde_json::from_value(value).map_err(|e| e.to_string())?;
    if result.patch.is_empty() {
        Ok(HookOutcome::NoChange)
    } else {
        Ok(HookOutcome::Patch(result))
    }
}

#[derive(Deserialize)]
struct PayloadAnswer {
    payload: Option<Value>,
    json_patch: Option<json_patch::Patch>,
}

/// A `before_provider_request` hook's 200 answer: `{"payload":P2}` (replacement) or
/// `{"json_patch":[…]}`; `{}` is no change.
pub fn parse_payload_answer(body: &[u8]) -> Result<HookOutcome, String> {
    let value: Value = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    if !value.is_object() {
        return Err(
            "expected a JSON object like {\"payload\": {...}} or {\"json_patch\": [...]}".into(),
        );
    }
    let answer: PayloadAnswer = serde_json::from_value(value).map_err(|e| e.to_string())?;
    match (answer.payload, answer.json_patch) {
        (Some(_), Some(_)) => Err("answer has both `payload` and `json_patch`; give one".into()),
        (Some(p), None) if p.is_object() => Ok(HookOutcome::Payload(p)),
        (Some(_), None) => Err("`payload` must be a JSON object".into()),
        (None, Some(p)) if p.0.is_empty() => Ok(HookOutcome::NoChange),
        (None, Some(p)) => Ok(HookOutcome::JsonPatch(p)),
        (None, None) => Ok(HookOutcome::NoChange),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_have_the_contract_shape() {
        let env = json!({"system": {"parts": [], "compiled": ""}});
        assert_eq!(
            context_event(ContextReason::Ephemeral, &env, None, None),
            json!({"type": "context", "reason": "ephemeral", "state": {"envelope": env}})
        );
        let e = context_event(
            ContextReason::TurnEnd,
            &env,
            Some(&json!({"role": "assistant", "content": "hi"})),
            Some(&json!({"input_tokens": 3})),
        );
        assert_eq!(e["assistant"]["content"], "hi");
        assert_eq!(e["usage"]["input_tokens"], 3);
        assert_eq!(
            provider_event(Provider::OpenAi, Endpoint::Chat, &json!({"model": "m"})),
            json!({"type": "before_provider_request", "provider": "openai",
                "endpoint": "chat", "payload": {"model": "m"}})
        );
    }

    #[test]
    fn answers_parse_into_outcomes() {
        assert_eq!(parse_context_answer(b"{}").unwrap(), HookOutcome::NoChange);
        let HookOutcome::Patch(r) = parse_context_answer(
            br#"{"patch":[{"op":"tools_remove","names":["bash"],"invalidateCacheReason":"no shell"}],"transformerName":"t"}"#,
        )
        .unwrap() else {
            panic!("expected a patch")
        };
        assert_eq!(r.transformer_name.as_deref(), Some("t"));
        let e = parse_context_answer(br#"{"patch":[{"op":"nuke"}]}"#).unwrap_err();
        assert!(e.contains("unknown variant `nuke`"), "{e}");
        assert!(parse_context_answer(b"[1]").is_err());

        assert_eq!(
            parse_payload_answer(br#"{"payload":{"model":"x"}}"#).unwrap(),
            HookOutcome::Payload(json!({"model": "x"}))
        );
        assert!(matches!(
            parse_payload_answer(br#"{"json_patch":[{"op":"remove","path":"/a"}]}"#).unwrap(),
            HookOutcome::JsonPatch(_)
        ));
        assert_eq!(parse_payload_answer(b"{}").unwrap(), HookOutcome::NoChange);
        assert!(parse_payload_answer(br#"{"payload":{},"json_patch":[]}"#).is_err());
        assert!(parse_payload_answer(br#"{"payload":3}"#).is_err());
    }
}
