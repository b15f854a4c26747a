//! Explicit caches (`cachedContents`) on the wire: what a cache holds, and the prompt the
//! API reads for a request that names one.
//!
//! A `CachedContent` holds `systemInstruction`, `tools`, `toolConfig` and `contents`
//! (ai.google.dev/api/caching); a `generateContent` naming it in `cachedContent` carries
//! only what follows, its own `contents` after the cache's (it may not set the other
//! three: [`super::CACHED_FIELDS`]). The prompt the model reads is the cache's members,
//! then the request's contents: the layout of [`super::CACHE_KEY_ORDER`].

use serde_json::{Map, Value};

use super::CACHED_CONTENT;

/// The members a cache holds, by their JSON name and their proto name.
pub const MEMBERS: [(&str, &str); 4] = [
    ("systemInstruction", "system_instruction"),
    ("tools", "tools"),
    ("toolConfig", "tool_config"),
    ("contents", "contents"),
];

/// The members of a `CachedContent` body (a create's), in their JSON names: the start of
/// every prompt that names the cache.
pub fn prefix_of(cache: &Map<String, Value>) -> Value {
    let mut prefix = Map::new();
    for (camel, snake) in MEMBERS {
        if let Some(v) = cache.get(camel).or_else(|| cache.get(snake)) {
            prefix.insert(camel.into(), v.clone());
        }
    }
    Value::Object(prefix)
}

/// The cache a request names (`cachedContents/ID`), if it names one.
pub fn named_cache(request: &Value) -> Option<&str> {
    request
        .get(CACHED_CONTENT)
        .or_else(|| request.get("cached_content"))
        .and_then(Value::as_str)
}

/// The request as the model reads it against the cache holding `prefix`: the cache's
/// members, the request's contents after the cache's, its other fields (generation
/// settings) as they are, and no `cachedContent`.
pub fn expand(request: &Value, prefix: &Value) -> Value {
    let mut whole = match request {
        Value::Object(fields) => fields.clone(),
        _ => Map::new(),
    };
    whole.remove(CACHED_CONTENT);
    whole.remove("cached_content");
    let own = whole.remove("contents");
    if let Value::Object(members) = prefix {
        for (name, value) in members {
            whole.insert(name.clone(), value.clone());
        }
    }
    let mut contents = match whole.remove("contents") {
        Some(Value::Array(c)) => c,
        _ => Vec::new(),
    };
    if let Some(Value::Array(own)) = own {
        contents.extend(own);
    }
    whole.insert("contents".into(), Value::Array(contents));
    Value::Object(whole)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_request_against_a_cache_reads_the_cache_then_its_own_contents() {
        let create = json!({"model": "models/gemini-2.5-flash", "ttl": "60s",
            "system_instruction": {"parts": [{"text": "sys"}]},
            "tools": [{"functionDeclarations": []}],
            "contents": [{"role": "user", "parts": [{"text": "first"}]}]});
        let prefix = prefix_of(create.as_object().unwrap());
        assert!(prefix.get("ttl").is_none() && prefix.get("model").is_none());
        let request = json!({"cachedContent": "cachedContents/a",
            "contents": [{"role": "model", "parts": [{"text": "second"}]}],
            "generationConfig": {"temperature": 1}});
        assert_eq!(named_cache(&request), Some("cachedContents/a"));
        let whole = expand(&request, &prefix);
        assert_eq!(whole["systemInstruction"]["parts"][0]["text"], "sys");
        assert_eq!(whole["contents"].as_array().unwrap().len(), 2);
        assert_eq!(whole["contents"][1]["parts"][0]["text"], "second");
        assert_eq!(whole["generationConfig"]["temperature"], 1);
        assert!(named_cache(&whole).is_none());
    }
}
