//! Splicing an edited JSON document back into the bytes it was parsed from: every object
//! member and array element the edit left equal keeps its original bytes (key order,
//! whitespace inside it, number formatting); only what changed is serialised. Payload
//! edits (`before_provider_request`) go through here, so that a JSON Patch adding one
//! field does not re-serialise the whole history the provider's cache keys on.

use serde_json::Value;

use super::scan::{self, Span};

/// The bytes of `after`, reusing the bytes of `raw` (whose parse is `before`) wherever
/// the two agree.
pub fn splice(raw: &[u8], before: &Value, after: &Value) -> Vec<u8> {
    let start = scan::skip_ws(raw, 0);
    let end = scan::value_end(raw, start).unwrap_or(raw.len());
    let mut out = Vec::with_capacity(raw.len() + 64);
    out.extend_from_slice(&raw[..start]);
    value(raw, start..end, before, after, &mut out);
    out.extend_from_slice(&raw[end..]);
    out
}

fn value(raw: &[u8], span: Span, before: &Value, after: &Value, out: &mut Vec<u8>) {
    if before == after {
        out.extend_from_slice(&raw[span]);
        return;
    }
    match (before, after) {
        (Value::Object(b), Value::Object(a)) => {
            let Ok(entries) = scan::entries(raw, span.start) else {
                return write(after, out);
            };
            // A repeated key leaves the parse ambiguous; serialise such an object whole.
            if entries.len() != b.len() {
                return write(after, out);
            }
            out.push(b'{');
            for (i, (key, new)) in a.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                match (
                    entries.iter().find(|e| scan::key_is(raw, &e.key, key)),
                    b.get(key),
                ) {
                    (Some(e), Some(old)) => {
                        out.extend_from_slice(&raw[e.key.start..e.value.start]);
                        value(raw, e.value.clone(), old, new, out);
                    }
                    _ => {
                        write(&Value::String(key.clone()), out);
                        out.push(b':');
                        write(new, out);
                    }
                }
            }
            out.push(b'}');
        }
        (Value::Array(b), Value::Array(a)) => {
            let Ok(elems) = scan::elements(raw, span.start) else {
                return write(after, out);
            };
            // Keep the elements both sides share at the start and at the end, in place;
            // what lies between is new.
            let head = b.iter().zip(a).take_while(|(x, y)| x == y).count();
            let tail = b[head..]
                .iter()
                .rev()
                .zip(a[head..].iter().rev())
                .take_while(|(x, y)| x == y)
                .count();
            out.push(b'[');
            for (i, new) in a.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                let old = if i < head {
                    Some(i)
                } else if i >= a.len() - tail {
                    Some(b.len() - (a.len() - i))
                } else if a.len() == b.len() {
                    // Same length: an element edited in place keeps what it can inside.
                    Some(i)
                } else {
                    None
                };
                match old {
                    Some(j) => value(raw, elems[j].clone(), &b[j], new, out),
                    None => write(new, out),
                }
            }
            out.push(b']');
        }
        _ => write(after, out),
    }
}

fn write(v: &Value, out: &mut Vec<u8>) {
    // Serialising a `Value` into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, v);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn check(raw: &str, edit: impl FnOnce(&mut Value)) -> String {
        let before: Value = serde_json::from_str(raw).unwrap();
        let mut after = before.clone();
        edit(&mut after);
        let out = String::from_utf8(splice(raw.as_bytes(), &before, &after)).unwrap();
        assert_eq!(serde_json::from_str::<Value>(&out).unwrap(), after, "{out}");
        out
    }

    #[test]
    fn an_added_field_leaves_every_other_byte() {
        let raw = r#"{ "model" : "m",  "messages":[{"role":"user","content":"a  b","n":1.50}], "max_tokens":10 }"#;
        let out = check(raw, |v| {
            v["metadata"] = json!({"user_id": "s-1"});
        });
        assert!(
            out.contains(r#""messages":[{"role":"user","content":"a  b","n":1.50}]"#),
            "{out}"
        );
        assert!(out.starts_with(r#"{"model" : "m","#), "{out}");
        assert!(out.ends_with(r#","metadata":{"user_id":"s-1"}}"#), "{out}");
    }

    #[test]
    fn an_edited_element_is_serialised_alone() {
        let raw = r#"{"messages":[{"b":2, "a":1},{"x": 1.0}],"t":1}"#;
        let out = check(raw, |v| {
            v["messages"][1]["x"] = json!(2);
            v.as_object_mut().unwrap().remove("t");
        });
        assert_eq!(out, r#"{"messages":[{"b":2, "a":1},{"x": 2}]}"#);
        let out = check(raw, |v| {
            v["messages"]
                .as_array_mut()
                .unwrap()
                .insert(1, json!("new"));
        });
        assert_eq!(
            out,
            r#"{"messages":[{"b":2, "a":1},"new",{"x": 1.0}],"t":1}"#
        );
    }

    #[test]
    fn an_unchanged_document_is_the_same_bytes() {
        let raw = " {\"a\" : [1, 2.0e3] }\n";
        let v: Value = serde_json::from_str(raw).unwrap();
        assert_eq!(splice(raw.as_bytes(), &v, &v), raw.as_bytes());
    }
}
