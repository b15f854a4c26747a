//! Gemini explicit caches (`/v1beta/cachedContents`) in the emulator and through cachet.
//!
//! Facts, as the API answers them (responses of generativelanguage.googleapis.com observed
//! 2026-09 and quoted in clients' issues): a create below the model's minimum is a 400
//! "Cached content is too small. total_token_count=N, min_total_token_count=M"
//! (BerriAI/litellm#17696); a create answers the resource without the cached members
//! (`name`, `model`, `createTime`, `updateTime`, `expireTime`, `displayName`,
//! `usageMetadata.totalTokenCount`), one hour when no `ttl` is given; a `generateContent`
//! naming the cache that also sets `systemInstruction`, `tools` or `toolConfig` is a 400
//! "CachedContent can not be used with GenerateContent request setting system_instruction,
//! tools or tool_config" (vercel/ai#3333, langchain-ai/langchain-google#978); its usage
//! reports the cache as `cachedContentTokenCount` inside `promptTokenCount`; a missing,
//! deleted or expired cache is a 403 "CachedContent not found (or permission denied)";
//! only the expiration is updatable (ai.google.dev/api/caching, `cachedContents.patch`);
//! "Cached content can be only used with model it was created for" (the `CachedContent`
//! reference).

use std::time::Duration;

use serde_json::{json, Value};

use crate::gemini_api::{cli_body, emulator_with_key, post, KEY, MODEL};
use crate::support::*;

async fn call(method: reqwest::Method, url: &str, body: Option<&Value>) -> (u16, Value) {
    let mut req = client().request(method, url).header("x-goog-api-key", KEY);
    if let Some(body) = body {
        req = req.json(body);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

fn seconds(resource: &Value, field: &str) -> i64 {
    let at: jiff::Timestamp = resource[field].as_str().unwrap().parse().unwrap();
    at.as_second()
}

/// The cache Gemini CLI's session would make: its system instruction, its tools and the
/// first user turn.
fn cache_body(ttl: &str) -> Value {
    let body = cli_body(0);
    json!({
        "model": format!("models/{MODEL}"),
        "systemInstruction": body["systemInstruction"],
        "tools": body["tools"],
        "contents": body["contents"],
        "ttl": ttl,
    })
}

/// The next turn against the cache: the contents after the cached ones, nothing the cache
/// holds.
fn against(name: &str) -> Value {
    let body = cli_body(1);
    let contents = body["contents"].as_array().unwrap()[1..].to_vec();
    json!({"cachedContent": name, "contents": contents,
        "generationConfig": body["generationConfig"]})
}

#[tokio::test]
async fn the_emulator_keeps_explicit_caches_as_the_api_does() {
    let emu = emulator_with_key().await;
    let caches = format!("{}/v1beta/cachedContents", emu.url());
    let generate = format!("{}/v1beta/models/{MODEL}:generateContent", emu.url());

    let (status, err) = post(&caches, None, &cache_body("300s")).await;
    assert_eq!(
        (status, &err["error"]["status"]),
        (403, &json!("PERMISSION_DENIED"))
    );

    let small = json!({"model": format!("models/{MODEL}"),
        "contents": [{"role": "user", "parts": [{"text": "short"}]}]});
    let (status, err) = post(&caches, Some(KEY), &small).await;
    assert_eq!(status, 400, "{err}");
    let message = err["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("Cached content is too small. total_token_count=")
            && message.ends_with("min_total_token_count=2048"),
        "{message}"
    );
    let mut both = cache_body("300s");
    both["expireTime"] = json!("2030-01-01T00:00:00Z");
    let (status, _) = post(&caches, Some(KEY), &both).await;
    assert_eq!(status, 400, "ttl and expireTime are one of");
    let mut unknown = cache_body("300s");
    unknown["max_tokens"] = json!(5);
    let (status, err) = post(&caches, Some(KEY), &unknown).await;
    assert_eq!(status, 400, "{err}");

    let (status, cache) = post(&caches, Some(KEY), &cache_body("300s")).await;
    assert_eq!(status, 200, "{cache}");
    let name = cache["name"].as_str().unwrap().to_string();
    assert!(name.starts_with("cachedContents/"), "{cache}");
    assert_eq!(cache["model"], format!("models/{MODEL}"));
    assert_eq!(
        seconds(&cache, "expireTime") - seconds(&cache, "createTime"),
        300
    );
    for member in ["contents", "systemInstruction", "tools", "ttl"] {
        assert!(
            cache.get(member).is_none(),
            "{member} is input only: {cache}"
        );
    }
    let cached = cache["usageMetadata"]["totalTokenCount"].as_u64().unwrap();
    assert!(cached >= 2048, "{cache}");
    let (_, default_ttl) = post(&caches, Some(KEY), &{
        let mut b = cache_body("1s");
        b.as_object_mut().unwrap().remove("ttl");
        b
    })
    .await;
    assert_eq!(
        seconds(&default_ttl, "expireTime") - seconds(&default_ttl, "createTime"),
        3600,
        "one hour without a ttl: {default_ttl}"
    );
    let default_name = default_ttl["name"].as_str().unwrap();
    let gone = format!("{}/v1beta/{default_name}", emu.url());
    assert_eq!(call(reqwest::Method::DELETE, &gone, None).await.0, 200);

    let one = format!("{}/v1beta/{name}", emu.url());
    let (status, got) = call(reqwest::Method::GET, &one, None).await;
    assert_eq!((status, &got), (200, &cache));
    let (status, list) = call(reqwest::Method::GET, &caches, None).await;
    assert_eq!(status, 200);
    let listed = list["cachedContents"].as_array().unwrap();
    assert!(listed.iter().any(|c| c["name"] == name.as_str()), "{list}");

    // The cached members may not be sent again beside the cache, even unchanged.
    for member in ["systemInstruction", "tools", "toolConfig"] {
        let mut req = against(&name);
        req[member] = match member {
            "toolConfig" => json!({"functionCallingConfig": {"mode": "AUTO"}}),
            _ => cli_body(1)[member].clone(),
        };
        let (status, err) = post(&generate, Some(KEY), &req).await;
        assert_eq!(status, 400, "{member}: {err}");
        let message = err["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("can not be used with GenerateContent request setting system_instruction, tools or tool_config"),
            "{message}"
        );
    }
    let other_model = format!("{}/v1beta/models/gemini-2.5-pro:generateContent", emu.url());
    let (status, err) = post(&other_model, Some(KEY), &against(&name)).await;
    assert_eq!(status, 400, "another model: {err}");

    let (status, answer) = post(&generate, Some(KEY), &against(&name)).await;
    assert_eq!(status, 200, "{answer}");
    let usage = &answer["usageMetadata"];
    assert_eq!(
        usage["cachedContentTokenCount"].as_u64(),
        Some(cached),
        "{usage}"
    );
    assert!(
        usage["promptTokenCount"].as_u64().unwrap() > cached,
        "{usage}"
    );

    // Only the expiration is updatable.
    let (status, err) = call(
        reqwest::Method::PATCH,
        &format!("{one}?updateMask=displayName"),
        Some(&json!({"displayName": "renamed"})),
    )
    .await;
    assert_eq!(status, 400, "{err}");
    let (status, patched) = call(
        reqwest::Method::PATCH,
        &format!("{one}?updateMask=ttl"),
        Some(&json!({"ttl": "600s"})),
    )
    .await;
    assert_eq!(status, 200, "{patched}");
    assert_eq!(
        seconds(&patched, "expireTime") - seconds(&patched, "updateTime"),
        600
    );
    assert_eq!(patched["createTime"], cache["createTime"]);

    // Expiry: past its expireTime the cache is gone, as a deleted one is.
    emu.advance_clock(Duration::from_secs(601));
    let (status, err) = call(reqwest::Method::GET, &one, None).await;
    assert_eq!(status, 403, "{err}");
    assert_eq!(err["error"]["status"], "PERMISSION_DENIED");
    let (status, err) = post(&generate, Some(KEY), &against(&name)).await;
    assert_eq!(
        (status, err["error"]["message"].as_str()),
        (403, Some("CachedContent not found (or permission denied)"))
    );

    let (_, fresh) = post(&caches, Some(KEY), &cache_body("300s")).await;
    let fresh = format!("{}/v1beta/{}", emu.url(), fresh["name"].as_str().unwrap());
    let (status, deleted) = call(reqwest::Method::DELETE, &fresh, None).await;
    assert_eq!((status, &deleted), (200, &json!({})));
    let (status, _) = call(reqwest::Method::GET, &fresh, None).await;
    assert_eq!(status, 403);
    let (status, _) = call(reqwest::Method::DELETE, &fresh, None).await;
    assert_eq!(status, 403);
    let (status, list) = call(reqwest::Method::GET, &caches, None).await;
    assert_eq!((status, &list), (200, &json!({})), "nothing left alive");
}

/// Through cachet: the cache's routes go to the upstream with the client's key and back as
/// they are, counted under `provider="gemini"`; the request against the cache reads it, its
/// reads are counted as the emulator billed them, and moving the prefix into the cache is
/// no break.
#[tokio::test]
async fn a_cache_through_cachet_is_counted_and_read_without_a_break() {
    let emu = emulator_with_key().await;
    let proxy = start_proxy(test_config(&emu.url())).await;
    let base = format!("http://{}/v1beta", proxy.addr);
    let generate = format!("{base}/models/{MODEL}:generateContent");
    let (status, first) = post(&generate, Some(KEY), &cli_body(0)).await;
    assert_eq!(status, 200, "{first}");
    let (status, cache) = post(
        &format!("{base}/cachedContents"),
        Some(KEY),
        &cache_body("300s"),
    )
    .await;
    assert_eq!(status, 200, "{cache}");
    let name = cache["name"].as_str().unwrap();
    let (status, got) = call(reqwest::Method::GET, &format!("{base}/{name}"), None).await;
    assert_eq!((status, &got), (200, &cache));
    let (status, answer) = post(&generate, Some(KEY), &against(name)).await;
    assert_eq!(status, 200, "{answer}");
    let read = answer["usageMetadata"]["cachedContentTokenCount"]
        .as_u64()
        .unwrap();
    let cached = cache["usageMetadata"]["totalTokenCount"].as_u64().unwrap();
    assert_eq!(read, cached);

    let metrics = metrics_text(&proxy).await;
    let labels = [("provider", "gemini"), ("endpoint", "cached_contents")];
    assert_eq!(
        metric_sum(&metrics, "cachet_requests_total", &labels),
        2.0,
        "{metrics}"
    );
    let reads = [
        ("provider", "gemini"),
        ("model", MODEL),
        ("kind", "cache_read"),
    ];
    assert_eq!(
        metric_sum(&metrics, "cachet_input_tokens_total", &reads),
        read as f64,
        "{metrics}"
    );
    // The create is billed as the emulator bills it: its tokens once, as a write, and the
    // storage of its 300-second TTL (Gemini 2.5 Flash: $1.00 per million tokens an hour);
    // the GET is not billed.
    let writes = [
        ("provider", "gemini"),
        ("model", MODEL),
        ("kind", "cache_write"),
    ];
    assert_eq!(
        metric_sum(&metrics, "cachet_input_tokens_total", &writes),
        cached as f64,
        "{metrics}"
    );
    let billed: f64 = emu
        .accounted()
        .iter()
        .map(|a| {
            let info = cachet::models::lookup(&a.model).unwrap();
            info.cost_usd(&a.accounting.usage(a.output_tokens))
        })
        .sum();
    let storage = cached as f64 * 300.0 / 3600.0 / 1e6;
    let cost = metric_sum(&metrics, "cachet_cost_usd_total", &[("provider", "gemini")]);
    assert!(
        (cost - billed).abs() < 1e-12 && cost > storage,
        "cachet's cost {cost} is the emulator's {billed}, storage {storage} included"
    );
    assert!(
        metrics.contains("\ncachet_unknown_models_total 0\n"),
        "the cache's model is priced: {metrics}"
    );
    // The request against the cache continues the conversation of the first: one session
    // of two requests, neither diagnosed.
    let sessions = wait_for_sessions(&proxy, 1).await;
    assert_eq!(sessions.len(), 1, "{sessions:?}");
    let id = sessions[0]["id"].as_str().unwrap();
    let log = wait_for_requests(&proxy, id, 2).await;
    let entries = request_entries(&log);
    assert_eq!(entries.len(), 2, "{log}");
    assert!(entries.iter().all(|e| e["diagnosis"].is_null()), "{log}");
    assert_eq!(
        metric_sum(
            &metrics,
            "cachet_prefix_breaks_total",
            &[("provider", "gemini")]
        ),
        0.0
    );
}
