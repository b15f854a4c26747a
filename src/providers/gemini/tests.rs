use super::*;

use crate::envelope::CompileOptions;
use crate::providers::parse_envelope;

/// What Gemini CLI 0.61.0 sends on its first turn (captured against the emulator,
/// shortened): the session context as a first user part, the tools as one `Tool` of
/// function declarations with `parametersJsonSchema`, a one-part system instruction.
pub(crate) const CLI_FIRST_TURN: &str = r#"{"contents":[{"parts":[{"text":"<session_context>\nToday's date is Monday, December 7, 2026.\n</session_context>"},{"text":"say hi"}],"role":"user"}],"systemInstruction":{"parts":[{"text":"You are Gemini CLI, an interactive CLI agent."}],"role":"user"},"tools":[{"functionDeclarations":[{"name":"list_directory","description":"Lists a directory","parametersJsonSchema":{"type":"object","properties":{"dir_path":{"type":"string"}},"required":["dir_path"]}},{"name":"read_file","description":"Reads a file","parametersJsonSchema":{"type":"object","properties":{"file_path":{"type":"string"}},"required":["file_path"]}}]}],"generationConfig":{"temperature":1,"topP":0.95,"topK":64,"thinkingConfig":{"includeThoughts":true,"thinkingLevel":"HIGH"}}}"#;

/// Its second request: the model's call and the tool's result appended.
pub(crate) const CLI_TOOL_RESULT: &str = r#"{"contents":[{"parts":[{"text":"<session_context>\nToday's date is Monday, December 7, 2026.\n</session_context>"},{"text":"say hi"}],"role":"user"},{"role":"model","parts":[{"functionCall":{"name":"read_file","args":{"file_path":"example file_path"}},"thoughtSignature":"c2ln"}]},{"role":"user","parts":[{"functionResponse":{"id":"read_file-1","name":"read_file","response":{"output":"ok"}}}]}],"systemInstruction":{"parts":[{"text":"You are Gemini CLI, an interactive CLI agent."}],"role":"user"},"tools":[{"functionDeclarations":[{"name":"list_directory","description":"Lists a directory","parametersJsonSchema":{"type":"object","properties":{"dir_path":{"type":"string"}},"required":["dir_path"]}},{"name":"read_file","description":"Reads a file","parametersJsonSchema":{"type":"object","properties":{"file_path":{"type":"string"}},"required":["file_path"]}}]}],"generationConfig":{"temperature":1}}"#;

#[test]
fn routes_name_the_endpoint_and_the_model_is_read_from_the_path() {
    let post = Method::POST;
    for (path, endpoint) in [
        (
            "/v1beta/models/gemini-2.5-flash:generateContent",
            Endpoint::GenerateContent,
        ),
        (
            "/v1beta/models/gemini-3.8-flash:streamGenerateContent",
            Endpoint::GenerateContent,
        ),
        (
            "/v1beta/models/gemini-2.5-pro:countTokens",
            Endpoint::GeminiCountTokens,
        ),
        ("/v1beta/cachedContents", Endpoint::CachedContents),
        ("/v1beta/cachedContents/abc", Endpoint::CachedContents),
        (
            "/v1beta/models/gemini-2.5-pro:embedContent",
            Endpoint::Other,
        ),
        ("/v1beta/files", Endpoint::Other),
    ] {
        assert_eq!(classify(&post, path), Some(endpoint), "{path}");
    }
    assert_eq!(
        classify(&Method::GET, "/v1beta/models"),
        Some(Endpoint::Models)
    );
    assert_eq!(classify(&post, "/v1/messages"), None);
    assert_eq!(classify(&post, "/v1betax/models"), None);
    assert_eq!(
        model_in_path("/v1beta/models/gemini-2.5-flash:streamGenerateContent"),
        Some("gemini-2.5-flash")
    );
    assert!(streams("/v1beta/models/m:streamGenerateContent"));
    assert!(!streams("/v1beta/models/m:generateContent"));
    assert_eq!(model_in_path("/v1beta/models/a/b:generateContent"), None);
}

#[test]
fn turns_roles_and_tool_steps_are_read_from_parts() {
    let env = parse_envelope(Endpoint::GenerateContent, Bytes::from(CLI_TOOL_RESULT)).unwrap();
    let kinds = env.history_kinds();
    assert!(kinds[0].is_user_content());
    assert!(kinds[1].from_model && kinds[1].calls_tool);
    assert!(kinds[2].tool_result && !kinds[2].other_content);
    assert_eq!(env.turn_index(), 0);
    assert_eq!(env.last_user_prompt_index(), Some(0));
    assert_eq!(
        env.system_compiled(),
        "You are Gemini CLI, an interactive CLI agent."
    );
    assert_eq!(env.tools_raw().count(), 1);
    assert_eq!(
        tool_names(env.tools_raw().next().unwrap()),
        ["list_directory", "read_file"]
    );
    let (_, prompt) = env.latest_user_prompt(1024).unwrap();
    assert!(prompt.ends_with("say hi"), "{prompt}");
    for pair in kinds.windows(2) {
        assert!(check_boundary(Some(&pair[0]), Some(&pair[1])).is_ok());
    }
    assert!(check_boundary(Some(&kinds[1]), None).is_err());
    assert!(check_boundary(None, Some(&kinds[2])).is_err());
}

#[test]
fn an_untouched_request_compiles_to_its_own_bytes_and_a_system_patch_keeps_the_rest() {
    let env = parse_envelope(Endpoint::GenerateContent, Bytes::from(CLI_FIRST_TURN)).unwrap();
    assert_eq!(
        env.compile(&CompileOptions::default()),
        CLI_FIRST_TURN.as_bytes()
    );
    let mut env = env;
    let ops = crate::patch::parse_ops(
        &json!([{"op": "system_part_set", "partName": "policy", "text": "\nBe brief.",
            "invalidateCacheReason": "test"}]),
        "t",
    )
    .unwrap();
    env.apply(&ops, "t").unwrap();
    let out: Value = serde_json::from_slice(&env.compile(&CompileOptions::default())).unwrap();
    let system = &out["systemInstruction"];
    assert_eq!(system["role"], "user");
    assert_eq!(
        system["parts"],
        json!([{"text": "You are Gemini CLI, an interactive CLI agent."}, {"text": "\nBe brief."}])
    );
    let before: Value = serde_json::from_str(CLI_FIRST_TURN).unwrap();
    assert_eq!(out["contents"], before["contents"]);
    assert_eq!(out["tools"], before["tools"]);
}

#[test]
fn a_stream_ends_at_the_finish_reason_and_fails_on_an_error_chunk() {
    let chunk =
        br#"{"candidates":[{"content":{"role":"model","parts":[{"text":"He"}]},"index":0}]}"#;
    assert_eq!(terminal(chunk), None);
    let last = br#"{"candidates":[{"content":{"role":"model","parts":[{"text":"llo"}]},"finishReason":"STOP","index":0}],"usageMetadata":{"promptTokenCount":3}}"#;
    assert_eq!(terminal(last), Some(Terminal::Done));
    let error =
        br#"{"error":{"code":503,"message":"The model is overloaded.","status":"UNAVAILABLE"}}"#;
    assert_eq!(terminal(error), Some(Terminal::Error));
    let events: Vec<(String, Bytes)> = [&chunk[..], &last[..]]
        .iter()
        .map(|d| (String::new(), Bytes::copy_from_slice(d)))
        .collect();
    assert_eq!(
        assistant_from_stream(&events).unwrap(),
        json!({"role": "model", "parts": [{"text": "Hello"}]})
    );
}

/// Google's error shape (cloud.google.com/apis/design/errors): the HTTP status as `code`,
/// the rpc code's name as `status`.
#[test]
fn errors_are_in_googles_shape() {
    let body: Value =
        serde_json::from_slice(&error_body(ErrorKind::RateLimit, "Resource exhausted")).unwrap();
    assert_eq!(
        body,
        json!({"error": {"code": 429, "message": "Resource exhausted", "status": "RESOURCE_EXHAUSTED"}})
    );
    let body: Value = serde_json::from_slice(&error_body(ErrorKind::InvalidRequest, "x")).unwrap();
    assert_eq!(body["error"]["status"], "INVALID_ARGUMENT");
}

/// Gemini CLI 0.61.0 resumes a session without the `thoughtSignature` its function calls
/// carried: the same message for the cache and the session (an assumption the emulator
/// shares, `cache_model::gemini`).
#[test]
fn a_dropped_thought_signature_keeps_the_message_key() {
    let signed = json!({"role": "model", "parts": [{"functionCall": {"name": "read_file",
        "args": {"file_path": "a"}}, "thoughtSignature": "c2ln"}]});
    let resumed = json!({"role": "model", "parts": [{"functionCall": {"name": "read_file",
        "args": {"file_path": "a"}}}]});
    let key = crate::providers::cache_key::message_key;
    assert_eq!(key(&signed), key(&resumed));
    let other = json!({"role": "model", "parts": [{"functionCall": {"name": "read_file",
        "args": {"file_path": "b"}}}]});
    assert_ne!(key(&signed), key(&other));
}
