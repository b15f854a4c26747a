//! The closed set of patch operations, in their JSON wire form (DESIGN §3). This is what
//! hook servers return, what policies declare and what sessions persist.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Whether an op changes cached content (and so must carry an invalidate reason).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    Cached,
    Uncached,
}

/// A named system part as given in `system_parts_replace`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PartSpec {
    pub name: String,
    pub text: String,
}

/// Where `messages_insert` puts its messages. Written `before_last_user_prompt` (the start
/// of the current turn), `index:N` or `end`; parsed here and nowhere else.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum Selector {
    BeforeLastUserPrompt,
    Index(usize),
    End,
}

impl std::str::FromStr for Selector {
    type Err = String;

    fn from_str(at: &str) -> Result<Self, String> {
        match at.trim() {
            "before_last_user_prompt" => Ok(Selector::BeforeLastUserPrompt),
            "end" => Ok(Selector::End),
            other => other
                .strip_prefix("index:")
                .and_then(|n| n.trim().parse().ok())
                .map(Selector::Index)
                .ok_or_else(|| format!("`{at}` is not before_last_user_prompt, index:N or end")),
        }
    }
}

impl TryFrom<String> for Selector {
    type Error = String;

    fn try_from(at: String) -> Result<Self, String> {
        at.parse()
    }
}

impl From<Selector> for String {
    fn from(at: Selector) -> String {
        match at {
            Selector::BeforeLastUserPrompt => "before_last_user_prompt".into(),
            Selector::Index(n) => format!("index:{n}"),
            Selector::End => "end".into(),
        }
    }
}

impl Selector {
    /// The history position it resolves to, given the history's length and where the
    /// current turn's prompt starts. `None` when it points nowhere.
    pub fn position(self, history_len: usize, last_user_prompt: Option<usize>) -> Option<usize> {
        match self {
            Selector::End => Some(history_len),
            Selector::BeforeLastUserPrompt => last_user_prompt,
            Selector::Index(n) => (n <= history_len).then_some(n),
        }
    }
}

/// One patch operation. Messages are either the neutral `{role, content}` form (role `user`,
/// `assistant` or `custom`) or the provider's own message shape; adapters convert them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(
    tag = "op",
    rename_all = "snake_case",
    rename_all_fields = "camelCase",
    deny_unknown_fields
)]
pub enum Op {
    SystemPartSet {
        part_name: String,
        text: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        before: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        after: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        invalidate_cache_reason: Option<String>,
    },
    SystemPartRemove {
        part_name: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        invalidate_cache_reason: Option<String>,
    },
    SystemPartsReplace {
        parts: Vec<PartSpec>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        invalidate_cache_reason: Option<String>,
    },
    ToolsReplace {
        tools: Vec<Value>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        invalidate_cache_reason: Option<String>,
    },
    ToolsRemove {
        names: Vec<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        invalidate_cache_reason: Option<String>,
    },
    MessagesCachedReplace {
        messages: Vec<Value>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        invalidate_cache_reason: Option<String>,
    },
    MessagesInsert {
        at: Selector,
        messages: Vec<Value>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        invalidate_cache_reason: Option<String>,
    },
    MessagesUncachedAppend {
        messages: Vec<Value>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        invalidate_cache_reason: Option<String>,
    },
    OptionsSet {
        options: Map<String, Value>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        invalidate_cache_reason: Option<String>,
    },
}

/// The section of the cached prefix an op (by its name, as a session log keeps it) changes:
/// `None` for the request-only tail and for options.
pub fn op_section(name: &str) -> Option<crate::route::Section> {
    use crate::route::Section;
    match name {
        "system_part_set" | "system_part_remove" | "system_parts_replace" => Some(Section::System),
        "tools_replace" | "tools_remove" => Some(Section::Tools),
        "messages_cached_replace" | "messages_insert" => Some(Section::Messages),
        _ => None,
    }
}

impl Op {
    /// The op's name as written in JSON, for metric labels and errors.
    pub fn name(&self) -> &'static str {
        match self {
            Op::SystemPartSet { .. } => "system_part_set",
            Op::SystemPartRemove { .. } => "system_part_remove",
            Op::SystemPartsReplace { .. } => "system_parts_replace",
            Op::ToolsReplace { .. } => "tools_replace",
            Op::ToolsRemove { .. } => "tools_remove",
            Op::MessagesCachedReplace { .. } => "messages_cached_replace",
            Op::MessagesInsert { .. } => "messages_insert",
            Op::MessagesUncachedAppend { .. } => "messages_uncached_append",
            Op::OptionsSet { .. } => "options_set",
        }
    }

    /// The system parts the op sets or removes, by name (every part, for a replacement).
    pub fn system_parts(&self) -> Vec<String> {
        match self {
            Op::SystemPartSet { part_name, .. } | Op::SystemPartRemove { part_name, .. } => {
                vec![part_name.clone()]
            }
            Op::SystemPartsReplace { parts, .. } => parts.iter().map(|p| p.name.clone()).collect(),
            _ => Vec::new(),
        }
    }

    pub fn scope(&self) -> Scope {
        match self {
            Op::MessagesUncachedAppend { .. } => Scope::Uncached,
            Op::OptionsSet { options, .. } => {
                if options
                    .keys()
                    .any(|k| crate::providers::CACHE_KEYED_OPTIONS.contains(&k.as_str()))
                {
                    Scope::Cached
                } else {
                    Scope::Uncached
                }
            }
            _ => Scope::Cached,
        }
    }

    pub fn invalidate_cache_reason(&self) -> Option<&str> {
        let reason = match self {
            Op::SystemPartSet {
                invalidate_cache_reason,
                ..
            }
            | Op::SystemPartRemove {
                invalidate_cache_reason,
                ..
            }
            | Op::SystemPartsReplace {
                invalidate_cache_reason,
                ..
            }
            | Op::ToolsReplace {
                invalidate_cache_reason,
                ..
            }
            | Op::ToolsRemove {
                invalidate_cache_reason,
                ..
            }
            | Op::MessagesCachedReplace {
                invalidate_cache_reason,
                ..
            }
            | Op::MessagesInsert {
                invalidate_cache_reason,
                ..
            }
            | Op::MessagesUncachedAppend {
                invalidate_cache_reason,
                ..
            }
            | Op::OptionsSet {
                invalidate_cache_reason,
                ..
            } => invalidate_cache_reason,
        };
        reason.as_deref().filter(|r| !r.trim().is_empty())
    }

    /// The rule of DESIGN §3: a cached-scope op must say why it invalidates the cache.
    pub fn check_reason(&self) -> Result<(), String> {
        if self.scope() == Scope::Cached && self.invalidate_cache_reason().is_none() {
            return Err(format!(
                "op `{}` changes cached content but has no invalidateCacheReason",
                self.name()
            ));
        }
        Ok(())
    }
}

/// Optional human-facing description of what a handler did.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Display {
    #[serde(default)]
    pub title: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub markdown: Option<String>,
}

/// What a context handler (policy or hook server) returns.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HandlerResult {
    #[serde(default)]
    pub patch: Vec<Op>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transformer_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display: Option<Display>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn wire_form_round_trips_and_scopes() {
        let v = json!({"op": "system_part_set", "partName": "policy", "text": "x",
            "invalidateCacheReason": "add policy"});
        let op: Op = serde_json::from_value(v.clone()).unwrap();
        assert_eq!(op.scope(), Scope::Cached);
        assert!(op.check_reason().is_ok());
        assert_eq!(serde_json::to_value(&op).unwrap(), v);

        let op: Op = serde_json::from_value(json!({"op": "messages_uncached_append",
            "messages": [{"role": "user", "content": "now"}]}))
        .unwrap();
        assert!(op.check_reason().is_ok());

        let op: Op =
            serde_json::from_value(json!({"op": "tools_remove", "names": ["bash"]})).unwrap();
        assert!(op.check_reason().unwrap_err().contains("tools_remove"));

        let op: Op =
            serde_json::from_value(json!({"op": "options_set", "options": {"temperature": 0}}))
                .unwrap();
        assert_eq!(op.scope(), Scope::Uncached);
        let op: Op = serde_json::from_value(
            json!({"op": "options_set", "options": {"thinking": {"type": "disabled"}}}),
        )
        .unwrap();
        assert_eq!(op.scope(), Scope::Cached);
    }

    #[test]
    fn unknown_op_and_field_are_refused() {
        let e = serde_json::from_value::<Op>(json!({"op": "system_nuke"})).unwrap_err();
        assert!(
            e.to_string().contains("unknown variant `system_nuke`"),
            "{e}"
        );
        let e = serde_json::from_value::<Op>(json!({"op": "tools_remove", "names": [], "nmes": 1}))
            .unwrap_err();
        assert!(e.to_string().contains("unknown field `nmes`"), "{e}");
    }
}
