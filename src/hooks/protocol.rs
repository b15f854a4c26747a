//! The hook protocol's JSON, both ways. Pure functions, so the wire form is testable
//! without a server.

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

use super::outcome::HookOutcome;
use crate::json_edit::write_json;
use crate::patch::HandlerResult;
use crate::policy::ContextReason;
use crate::route::{Endpoint, Provider};

/// `{"type":"context","reason":…,"state":{"envelope":E}}`, plus `assistant` and `usage`
/// for `turn_end`; `envelope` is the envelope's JSON text
/// ([`crate::envelope::Envelope::to_json_bytes`]).
pub fn context_event(
    reason: ContextReason,
    envelope: &[u8],
    assistant: Option<&Value>,
    usage: Option<&Value>,
) -> Vec<u8> {
    let mut event = Vec::with_capacity(envelope.len() + 128);
    event.extend_from_slice(br#"{"type":"context","reason":"#);
    write_json(&mut event, reason.label());
    event.extend_from_slice(br#","state":{"envelope":"#);
    event.extend_from_slice(envelope);
    event.push(b'}');
    for (name, value) in [("assistant", assistant), ("usage", usage)] {
        if let Some(value) = value {
            event.push(b',');
            write_json(&mut event, name);
            event.push(b':');
            write_json(&mut event, value);
        }
    }
    event.push(b'}');
    event
}

/// `{"type":"before_provider_request","provider":…,"endpoint":…,"payload":P}`, `payload`
/// the compiled body's JSON text as it would go upstream.
pub fn provider_event(provider: Provider, endpoint: Endpoint, payload: &[u8]) -> Vec<u8> {
    let mut event = Vec::with_capacity(payload.len() + 128);
    event.extend_from_slice(br#"{"type":"before_provider_request","provider":"#);
    write_json(&mut event, provider.label());
    event.extend_from_slice(br#","endpoint":"#);
    write_json(&mut event, endpoint.label());
    event.extend_from_slice(br#","payload":"#);
    event.extend_from_slice(payload);
    event.push(b'}');
    event
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
struct PayloadAnswer<'a> {
    #[serde(borrow)]
    payload: Option<&'a RawValue>,
    json_patch: Option<json_patch::Patch>,
}

/// A `before_provider_request` hook's 200 answer: `{"payload":P2}` (replacement, kept as
/// its JSON text) or `{"json_patch":[…]}`; `{}` is no change.
pub fn parse_payload_answer(body: &[u8]) -> Result<HookOutcome, String> {
    let first = body.iter().find(|c| !c.is_ascii_whitespace());
    if first != Some(&b'{') {
        // Read whole for serde_json's own message when it is not JSON at all.
        serde_json::from_slice::<serde::de::IgnoredAny>(body).map_err(|e| e.to_string())?;
        return Err(
            "expected a JSON object like {\"payload\": {...}} or {\"json_patch\": [...]}".into(),
        );
    }
    let answer: PayloadAnswer<'_> = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    match (answer.payload, answer.json_patch) {
        (Some(_), Some(_)) => Err("answer has both `payload` and `json_patch`; give one".into()),
        (Some(p), None) if p.get().starts_with('{') => Ok(HookOutcome::Payload(
            bytes::Bytes::copy_from_slice(p.get().as_bytes()),
        )),
        (Some(_), None) => Err("`payload` must be a JSON object".into()),
        (None, Some(p)) if p.0.is_empty() => Ok(HookOutcome::NoChange),
        (None, Some(p)) => Ok(HookOutcome::JsonPatch(p)),
        (None, None) => Ok(HookOutcome::NoChange),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn events_have_the_contract_shape() {
        let read = |event: Vec<u8>| serde_json::from_slice::<Value>(&event).unwrap();
        let env = json!({"system": {"parts": [], "compiled": ""}});
        let env_bytes = serde_json::to_vec(&env).unwrap();
        assert_eq!(
            read(context_event(
                ContextReason::Ephemeral,
                &env_bytes,
                None,
                None
            )),
            json!({"type": "context", "reason": "ephemeral", "state": {"envelope": env}})
        );
        let e = read(context_event(
            ContextReason::TurnEnd,
            &env_bytes,
            Some(&json!({"role": "assistant", "content": "hi"})),
            Some(&json!({"input_tokens": 3})),
        ));
        assert_eq!(e["assistant"]["content"], "hi");
        assert_eq!(e["usage"]["input_tokens"], 3);
        // The payload goes out as its bytes, white space and all.
        let event = provider_event(Provider::OpenAi, Endpoint::Chat, br#"{"model" : "m"}"#);
        assert!(event.ends_with(br#""payload":{"model" : "m"}}"#));
        assert_eq!(
            read(event),
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
            HookOutcome::Payload(bytes::Bytes::from_static(br#"{"model":"x"}"#))
        );
        assert!(matches!(
            parse_payload_answer(br#"{"json_patch":[{"op":"remove","path":"/a"}]}"#).unwrap(),
            HookOutcome::JsonPatch(_)
        ));
        assert_eq!(parse_payload_answer(b"{}").unwrap(), HookOutcome::NoChange);
        assert!(parse_payload_answer(br#"{"payload":{},"json_patch":[]}"#).is_err());
        assert!(parse_payload_answer(br#"{"payload":3}"#).is_err());
        assert!(parse_payload_answer(b"[1]")
            .unwrap_err()
            .starts_with("expected a JSON object"));
        assert!(parse_payload_answer(b"nope").is_err());
        assert_eq!(
            parse_payload_answer(br#"{"payload":null}"#).unwrap(),
            HookOutcome::NoChange
        );
    }
}
