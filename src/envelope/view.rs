//! The envelope as JSON for hook servers (DESIGN §5.2).

use serde_json::{json, Map, Value};

use super::{owned_keys, scan, Envelope};

fn value_of(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes).unwrap_or(Value::Null)
}

impl Envelope {
    /// `{system: {parts, compiled}, tools, messages: {cached, uncached}, options, meta}`,
    /// messages in the provider's own shape.
    pub fn to_json(&self) -> Value {
        let parts: Vec<Value> = self
            .system
            .iter()
            .map(|p| json!({"name": p.name, "text": p.text}))
            .collect();
        json!({
            "system": {"parts": parts, "compiled": self.system_compiled()},
            "tools": self.tools_raw().map(value_of).collect::<Vec<_>>(),
            "messages": {
                "cached": self.history_raw().map(value_of).collect::<Vec<_>>(),
                "uncached": self.uncached_raw().map(value_of).collect::<Vec<_>>(),
            },
            "options": Value::Object(self.options()),
            "meta": self.meta.to_json(),
        })
    }

    /// The top-level fields that are not envelope sections, after option edits.
    pub fn options(&self) -> Map<String, Value> {
        let b: &[u8] = &self.body;
        let owned = owned_keys(self.endpoint);
        let mut out = Map::new();
        for e in &self.top {
            let key = scan::decode_str(b, &e.key).unwrap_or_default();
            if !owned.contains(&key.as_str()) {
                out.insert(key, value_of(&b[e.value.clone()]));
            }
        }
        for (key, value) in &self.option_edits {
            match value {
                Some(v) => out.insert(key.clone(), value_of(v)),
                None => out.remove(key),
            };
        }
        out
    }
}
