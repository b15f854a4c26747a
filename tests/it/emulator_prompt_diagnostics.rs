//! The emulator answers OpenAI's prompt cache diagnostics from its cache model. The field
//! names and values are the guide's (developers.openai.com/api/docs/guides/prompt-caching/
//! diagnostics): "Set `prompt_cache_options.comparison_response_id` to the baseline
//! response's `id`", then "check `prompt_cache_diagnostics` on the current response";
//! available "in the Responses API for GPT-5.6 and later supported models". Its guide's own
//! example is the one here: the same model, instructions and input, a function tool renamed
//! from `get_time` to `get_date`.

use serde_json::{json, Value};

use crate::support::*;

fn request(model: &str, tool: &str, question: &str) -> Value {
    json!({"model": model, "instructions": "Our support policy: refunds within 30 days. ".repeat(150),
           "input": question,
           "tools": [{"type": "function", "name": tool, "description": "Read the clock",
                      "parameters": {"type": "object", "properties": {}}}]})
}

fn compared_with(mut body: Value, id: &str) -> Value {
    body["prompt_cache_options"] = json!({"comparison_response_id": id});
    body
}

async fn respond(emu: &cachet::emulator::EmulatorHandle, body: &Value) -> Value {
    answer_of(
        client()
            .post(format!("{}/v1/responses", emu.url()))
            .header("authorization", "Bearer sk-test")
            .json(body),
    )
    .await
}

#[tokio::test]
async fn a_comparison_response_explains_a_miss_as_openai_does() {
    let emu = start_emulator().await;
    let first = respond(&emu, &request("gpt-5.6", "get_time", "What time is it?")).await;
    let id = first["id"].as_str().unwrap().to_string();
    assert!(
        first["prompt_cache_diagnostics"].is_null(),
        "not asked: {first}"
    );

    // The guide's example: the tool renamed, compared with the first response.
    let renamed = respond(
        &emu,
        &compared_with(request("gpt-5.6", "get_date", "What time is it?"), &id),
    )
    .await;
    let diagnosis = &renamed["prompt_cache_diagnostics"];
    assert_eq!(diagnosis["type"], "cache_miss", "{renamed}");
    assert_eq!(diagnosis["reason"], "tools_changed");
    let usage = &first["usage"];
    let reusable = usage["input_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap()
        + usage["input_tokens_details"]["cache_write_tokens"]
            .as_u64()
            .unwrap_or(0);
    assert_eq!(
        diagnosis["comparison_reusable_tokens"].as_u64(),
        Some(reusable)
    );
    assert!(diagnosis["cache_missed_tokens"].as_u64().unwrap() > 0);
    assert_eq!(
        renamed["usage"]["input_tokens_details"]["cached_tokens"], 0,
        "the miss is real: {renamed}"
    );

    // The same prompt again, compared with the first: no miss detected.
    let again = respond(
        &emu,
        &compared_with(request("gpt-5.6", "get_time", "What time is it?"), &id),
    )
    .await;
    assert_eq!(
        again["prompt_cache_diagnostics"]["type"], "cache_hit",
        "{again}"
    );
    assert!(
        again["usage"]["input_tokens_details"]["cached_tokens"]
            .as_u64()
            .unwrap()
            > 0
    );

    // An id the provider never answered, and a model without diagnostics.
    let unknown = respond(
        &emu,
        &compared_with(request("gpt-5.6", "get_time", "Hi"), "resp_unknown"),
    )
    .await;
    assert_eq!(
        unknown["prompt_cache_diagnostics"]["type"],
        "comparison_response_not_found"
    );
    let older = respond(
        &emu,
        &compared_with(request("gpt-5.1-codex", "get_time", "Hi"), &id),
    )
    .await;
    assert_eq!(
        older["prompt_cache_diagnostics"]["type"], "unavailable",
        "{older}"
    );
}
