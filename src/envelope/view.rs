//! The envelope as JSON for hook servers (DESIGN §5.2), written from the body's bytes:
//! tools, messages and options go out as the client sent them (or as a patch left them),
//! with no `Value` of the body built on the way.

use serde_json::{Map, Value};

use super::Envelope;
use crate::json::scan;
use crate::json_edit::write_json;

impl Envelope {
    /// `{system: {parts, compiled}, tools, messages: {cached, uncached}, options, meta}`,
    /// messages in the provider's own shape, as JSON text.
    pub fn to_json_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.body.len() + 1024);
        out.extend_from_slice(br#"{"system":{"parts":["#);
        for (i, part) in self.system.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            out.extend_from_slice(br#"{"name":"#);
            write_json(&mut out, &part.name);
            out.extend_from_slice(br#","text":"#);
            write_json(&mut out, &part.text);
            out.push(b'}');
        }
        out.extend_from_slice(br#"],"compiled":"#);
        write_json(&mut out, &self.system_compiled());
        out.extend_from_slice(br#"},"tools":"#);
        write_list(&mut out, self.tools_raw());
        out.extend_from_slice(br#","messages":{"cached":"#);
        write_list(&mut out, self.history_raw());
        out.extend_from_slice(br#","uncached":"#);
        write_list(&mut out, self.uncached_raw());
        out.extend_from_slice(br#"},"options":{"#);
        for (i, (key, value)) in self.options_raw().iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            write_json(&mut out, key);
            out.push(b':');
            out.extend_from_slice(value);
        }
        out.extend_from_slice(br#"},"meta":"#);
        write_json(&mut out, &self.meta.to_json());
        out.push(b'}');
        out
    }

    /// [`Self::to_json_bytes`] read into a `Value` (for tests and tools, not the request
    /// path).
    pub fn to_json(&self) -> Value {
        serde_json::from_slice(&self.to_json_bytes()).unwrap_or(Value::Null)
    }

    /// The top-level fields that are not envelope sections, after option edits.
    pub fn options(&self) -> Map<String, Value> {
        self.options_raw()
            .into_iter()
            .map(|(key, value)| (key, serde_json::from_slice(value).unwrap_or(Value::Null)))
            .collect()
    }

    /// The options' names and JSON texts, in the body's order: a name the body gives twice
    /// once, with its last value; an edited option with its new value, a new one last.
    fn options_raw(&self) -> Vec<(String, &[u8])> {
        let b: &[u8] = &self.body;
        let owned = self.wire.owned_keys();
        let mut out: Vec<(String, &[u8])> = Vec::new();
        for e in &self.top {
            let key = scan::decode_str(b, &e.key).unwrap_or_default();
            if !owned.contains(&key.as_str()) {
                set_option(&mut out, key, Some(&b[e.value.clone()]));
            }
        }
        for (key, value) in &self.option_edits {
            set_option(&mut out, key.clone(), value.as_deref());
        }
        out
    }
}

/// Set (or, with no value, remove) option `key`, as a map of them would.
fn set_option<'a>(out: &mut Vec<(String, &'a [u8])>, key: String, value: Option<&'a [u8]>) {
    let at = out.iter().position(|(k, _)| *k == key);
    match (at, value) {
        (Some(i), Some(v)) => out[i].1 = v,
        (None, Some(v)) => out.push((key, v)),
        (Some(i), None) => {
            out.remove(i);
        }
        (None, None) => {}
    }
}

fn write_list<'a>(out: &mut Vec<u8>, items: impl Iterator<Item = &'a [u8]>) {
    out.push(b'[');
    for (i, item) in items.enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(item);
    }
    out.push(b']');
}
