//! The compile side: splice the envelope back into the provider payload. Untouched
//! elements are copied from the client's body; only new or changed elements are
//! serialised, where and as the wire says ([`super::Wire::owned`]). With nothing changed,
//! the client's bytes are returned as they are.

use std::borrow::Cow;

use bytes::Bytes;

use super::payload::{Payload, Splicer};
use super::seq::{render, rendered, Container, Item, Seq, Sink};
use super::{BreakpointMode, Envelope, Owned, Plan, SystemForm};
use crate::json::scan;
use crate::memo::{self, Memo};

/// How to compile an envelope.
#[derive(Debug, Clone, Default)]
pub struct CompileOptions {
    /// Cache markers.
    pub breakpoints: BreakpointMode,
    /// `prompt_cache_key` to set, where the API has one.
    pub prompt_cache_key: Option<String>,
    /// Replace a `prompt_cache_key` the client sent itself.
    pub override_prompt_cache_key: bool,
    /// Anthropic, a turn's first request: how many of the history's first messages the
    /// provider still sees as the previous turn's requests sent them, when it drops thinking
    /// they kept (older models drop a turn's thinking at the next turn). `auto` reaches back
    /// to there, not to the end of the previous request, whose entry no longer matches.
    pub kept_history: Option<usize>,
}

fn json_str(text: &str) -> Vec<u8> {
    serde_json::to_vec(text).unwrap_or_else(|_| b"\"\"".to_vec())
}

/// A system text as a JSON string literal. A rewritten system prompt (tens of KB, with an
/// escape on every line) is encoded for the marker plan and again for the body, on every
/// request: a long one is remembered by its bytes, as its decoding is (`parse::system_text`).
fn system_literal(text: &str) -> Bytes {
    static LITERALS: Memo<Bytes> = Memo::new(32);
    if !(1024..=REMEMBERED_LITERAL).contains(&text.len()) {
        return json_str(text).into();
    }
    LITERALS.get_or_insert_with(memo::key(b"system literal", text.as_bytes()), || {
        json_str(text).into()
    })
}

/// The longest system text whose literal is remembered.
const REMEMBERED_LITERAL: usize = 64 * 1024;

impl Envelope {
    /// The JSON string literal interior of part `i` (original bytes when untouched).
    fn part_interior(&self, i: usize) -> Vec<u8> {
        let part = &self.system[i];
        if let (SystemForm::Text, Some(el)) = (&self.system_form, part.untouched()) {
            let b = self.bytes_of(&el.raw);
            return b[1..b.len() - 1].to_vec();
        }
        let lit = system_literal(&part.text);
        lit[1..lit.len() - 1].to_vec()
    }

    /// Part `i` as a system text block. A rewritten client block keeps every
    /// field but its text: a client's cache marker on it survives the rewrite.
    pub(crate) fn system_block_bytes(&self, i: usize) -> std::borrow::Cow<'_, [u8]> {
        let part = &self.system[i];
        if let (SystemForm::Blocks(_), Some(el)) = (&self.system_form, &part.element) {
            let raw = self.bytes_of(&el.raw);
            if !part.rewritten {
                return raw.into();
            }
            if let Some(out) = scan::replace_field(raw, 0, "text", &system_literal(&part.text)) {
                return out.into();
            }
        }
        let mut out = br#"{"type":"text","text":""#.to_vec();
        out.extend_from_slice(&self.part_interior(i));
        out.extend_from_slice(b"\"}");
        out.into()
    }

    /// Compile with `opts`, then add what the wire's marker rules add after compiling
    /// (OpenAI's explicit breakpoints, where `auto` asks for them).
    pub fn compile_with_markers(&self, opts: &CompileOptions) -> Payload {
        let compiled = self.compile_payload(opts);
        self.wire.after_compile(self, compiled, opts)
    }

    /// Compile the envelope into the provider payload, in one buffer.
    pub fn compile(&self, opts: &CompileOptions) -> Bytes {
        self.compile_payload(opts).to_bytes()
    }

    /// Compile the envelope into the provider payload, as a splice of the client's body.
    pub fn compile_payload(&self, opts: &CompileOptions) -> Payload {
        let wire = self.wire;
        let (mode, plan) = wire.plan_markers(self, opts);
        let mut option_edits = self.option_edits.clone();
        wire.option_edits(self, mode, opts, &mut option_edits);
        if !self.is_patched() && plan.is_empty() && option_edits.is_empty() {
            return Payload::from(self.body.clone());
        }
        let ctx = Ctx {
            env: self,
            plan: &plan,
        };
        let b: &[u8] = &self.body;
        let mut items: Vec<Item<'_>> = Vec::with_capacity(self.top.len() + 4);
        let mut done = Vec::new();
        for (i, e) in self.top.iter().enumerate() {
            let key = scan::decode_str(b, &e.key).unwrap_or_default();
            let new_value: Option<Option<Section<'_>>> =
                if wire.owned_keys().contains(&key.as_str()) {
                    done.push(key.clone());
                    ctx.section(&key)
                } else if let Some((_, v)) = option_edits.iter().rev().find(|(k, _)| *k == key) {
                    done.push(key.clone());
                    Some(v.as_ref().map(|v| Section::Bytes(v.to_vec())))
                } else {
                    None
                };
            let whole = e.key.start..e.value.end;
            let key_part = &b[e.key.start..e.value.start];
            items.push(match new_value {
                None => Item::new(Some(i), Cow::Borrowed(&b[whole])),
                Some(None) => continue,
                Some(Some(Section::Bytes(v))) => {
                    let mut out = key_part.to_vec();
                    out.extend_from_slice(&v);
                    Item::new(Some(i), Cow::Owned(out))
                }
                Some(Some(Section::Seq(seq))) => Item {
                    origin: Some(i),
                    bytes: Cow::Borrowed(key_part),
                    edits: Vec::new(),
                    then: Some(Box::new(seq)),
                },
            });
        }
        for key in wire.owned_keys() {
            if !done.iter().any(|d| d == key) {
                match ctx.section(key) {
                    Some(Some(Section::Bytes(v))) => {
                        items.push(Item::new(None, Cow::Owned(entry(key, &v))))
                    }
                    Some(Some(Section::Seq(seq))) => items.push(Item {
                        origin: None,
                        bytes: Cow::Owned(entry(key, b"")),
                        edits: Vec::new(),
                        then: Some(Box::new(seq)),
                    }),
                    _ => {}
                }
            }
        }
        for (k, (key, value)) in option_edits.iter().enumerate() {
            let last = !option_edits[k + 1..].iter().any(|(o, _)| o == key);
            if let (true, false, Some(v)) = (last, done.contains(key), value) {
                items.push(Item::new(None, Cow::Owned(entry(key, v))));
            }
        }
        let elems: Vec<scan::Span> = self.top.iter().map(|e| e.key.start..e.value.end).collect();
        let container = Container {
            src: b,
            span: Some(self.top_span.clone()),
            elems: &elems,
        };
        let mut out = Splicer::new(&self.body);
        out.put(&b[..self.top_span.start]);
        render(&container, b'{', b'}', &items, &mut out);
        out.put(&b[self.top_span.end..]);
        out.finish()
    }
}

/// A system/developer message whose text a patch changed: its content becomes the new
/// text, every other field stays, and a cache marker on one of its parts moves to the
/// single part that replaces them.
fn rewritten_message(raw: &[u8], text: &str) -> Vec<u8> {
    let start = scan::skip_ws(raw, 0);
    let content = scan::field(raw, start, "content");
    let new_content = match content {
        Some(span) if raw.get(span.start) == Some(&b'[') => {
            let marker = scan::elements(raw, span.start)
                .unwrap_or_default()
                .into_iter()
                .find_map(|part| scan::field(raw, part.start, "cache_control"))
                .map(|m| raw[m].to_vec());
            let mut out = br#"[{"type":"text","text":"#.to_vec();
            out.extend_from_slice(&system_literal(text));
            if let Some(marker) = marker {
                out.extend_from_slice(br#","cache_control":"#);
                out.extend_from_slice(&marker);
            }
            out.extend_from_slice(b"}]");
            out
        }
        _ => system_literal(text).to_vec(),
    };
    scan::replace_field(raw, start, "content", &new_content).unwrap_or_else(|| {
        serde_json::to_vec(&serde_json::json!({"role": "system", "content": text}))
            .unwrap_or_default()
    })
}

fn entry(key: &str, value: &[u8]) -> Vec<u8> {
    let mut out = json_str(key);
    out.push(b':');
    out.extend_from_slice(value);
    out
}

struct Ctx<'a> {
    env: &'a Envelope,
    plan: &'a Plan,
}

/// A top-level value the envelope owns, as compiled.
enum Section<'a> {
    Bytes(Vec<u8>),
    /// Rendered straight into the output when the body is written (the messages: most of
    /// a large body, not worth a buffer of their own).
    Seq(Seq<'a>),
}

impl<'a> Ctx<'a> {
    /// The new value of an envelope-owned top-level key: `None` = unchanged,
    /// `Some(None)` = remove the key.
    fn section(&self, key: &str) -> Option<Option<Section<'a>>> {
        let bytes = |v: Option<Option<Vec<u8>>>| v.map(|v| v.map(Section::Bytes));
        let env = self.env;
        let marks_system = !self.plan.system.is_empty();
        match env.wire.owned(key, &env.system_form, marks_system)? {
            Owned::Tools => bytes(self.tools()),
            Owned::History => self.messages(),
            Owned::TextSystem => bytes(self.text_system()),
            Owned::BlockSystem => bytes(self.block_system()),
            Owned::WireSystem => bytes(env.system_dirty.then(|| env.wire.system_value(env))),
        }
    }

    fn tools(&self) -> Option<Option<Vec<u8>>> {
        let env = self.env;
        if !env.tools_dirty && self.plan.tools.is_empty() {
            return None;
        }
        if env.tools.is_empty() && env.tools_orig.span.is_none() {
            return Some(None);
        }
        let items: Vec<Item<'_>> = env
            .tools
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let raw = env.bytes_of(&t.raw);
                let bytes = match self.plan.tools.get(&i) {
                    Some(&want) => env
                        .wire
                        .set_marker(raw, want)
                        .map_or(Cow::Borrowed(raw), Cow::Owned),
                    None => Cow::Borrowed(raw),
                };
                Item::new(t.origin, bytes)
            })
            .collect();
        let c = Container {
            src: &env.body,
            span: env.tools_orig.span.clone(),
            elems: &env.tools_orig.elems,
        };
        Some(Some(rendered(&c, b'[', b']', &items)))
    }

    /// A string system prompt (Anthropic `system`, Responses `instructions`).
    fn text_system(&self) -> Option<Option<Vec<u8>>> {
        let env = self.env;
        if !env.system_dirty {
            return None;
        }
        if env.system.is_empty() {
            return Some(None);
        }
        let mut out = vec![b'"'];
        for i in 0..env.system.len() {
            out.extend_from_slice(&env.part_interior(i));
        }
        out.push(b'"');
        Some(Some(out))
    }

    /// System text blocks, one per part.
    fn block_system(&self) -> Option<Option<Vec<u8>>> {
        let env = self.env;
        if !env.system_dirty && self.plan.system.is_empty() {
            return None;
        }
        if env.system.is_empty() {
            return Some(None);
        }
        let blocks_form = matches!(env.system_form, SystemForm::Blocks(_));
        let items: Vec<Item<'_>> = (0..env.system.len())
            .map(|i| {
                let raw = env.system_block_bytes(i);
                let bytes = match self.plan.system.get(&i) {
                    Some(&want) => env.wire.set_marker(&raw, want).map_or(raw, Cow::Owned),
                    None => raw,
                };
                let origin = env.system[i]
                    .element
                    .as_ref()
                    .and_then(|e| e.origin)
                    .filter(|_| blocks_form);
                Item::new(origin, bytes)
            })
            .collect();
        let (span, elems) = match &env.system_form {
            SystemForm::Blocks(span) => (
                Some(span.clone()),
                scan::elements(&env.body, span.start).unwrap_or_default(),
            ),
            _ => (None, Vec::new()),
        };
        let c = Container {
            src: &env.body,
            span,
            elems: &elems,
        };
        Some(Some(rendered(&c, b'[', b']', &items)))
    }

    fn messages(&self) -> Option<Option<Section<'a>>> {
        let env = self.env;
        let leading = match &env.system_form {
            SystemForm::LeadingMessages { role } => Some(role.as_str()),
            // An API whose only place for a system prompt is leading messages.
            _ => env.wire.leading_system_role(),
        };
        let system_here = leading.is_some() && env.system_dirty;
        let tail_dirty = !env.uncached.is_empty();
        if !env.messages_dirty && !tail_dirty && !system_here && self.plan.messages.is_empty() {
            return None;
        }
        // At its size: a history of 100,000 messages is a list of 7 MB.
        let leading_parts = leading.map_or(0, |_| env.system.len());
        let mut items: Vec<Item<'_>> =
            Vec::with_capacity(leading_parts + env.cached.len() + env.uncached.len());
        if let Some(role) = leading {
            for part in &env.system {
                let item = match &part.element {
                    Some(el) if !part.rewritten => {
                        Item::new(el.origin, Cow::Borrowed(env.bytes_of(&el.raw)))
                    }
                    Some(el) => Item::new(
                        el.origin,
                        Cow::Owned(rewritten_message(env.bytes_of(&el.raw), &part.text)),
                    ),
                    None => {
                        let m = serde_json::json!({"role": role, "content": part.text});
                        Item::new(None, Cow::Owned(serde_json::to_vec(&m).unwrap_or_default()))
                    }
                };
                items.push(item);
            }
        }
        for (i, m) in env.cached.iter().enumerate() {
            let raw = env.bytes_of(&m.raw);
            let edits = self
                .plan
                .messages
                .get(&i)
                .and_then(|changes| env.wire.marker_edits(raw, changes));
            items.push(Item::edited(m.origin, raw, edits.unwrap_or_default()));
        }
        for m in &env.uncached {
            let raw = env.bytes_of(&m.raw);
            let edits = env.wire.tail_edits(raw);
            items.push(Item::edited(None, raw, edits.unwrap_or_default()));
        }
        let c = Container {
            src: &env.body,
            span: env.messages_orig.span.clone(),
            elems: &env.messages_orig.elems,
        };
        Some(Some(Section::Seq(Seq {
            c,
            open: b'[',
            close: b']',
            items,
        })))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::envelope::Ttl;
    use crate::route::Endpoint;

    #[test]
    fn identity_is_the_same_bytes() {
        let body = Bytes::from_static(b" {\"model\" : \"claude-sonnet-4-5\", \"system\":\"s\",\n \"messages\":[{\"role\":\"user\",\"content\":\"hi\"} ] } ");
        let env = crate::providers::parse_envelope(Endpoint::Messages, body.clone()).unwrap();
        let out = env.compile(&CompileOptions::default());
        assert_eq!(out, body);
        assert_eq!(
            out.as_ptr(),
            body.as_ptr(),
            "no copy for an unpatched envelope"
        );
    }

    /// A long rewritten system text is encoded once and remembered (`system_literal`): what
    /// is remembered must be that text's literal, never another's of the same length.
    #[test]
    fn a_long_rewritten_system_text_compiles_to_its_own_literal() {
        let long = |tag: &str| format!("# {tag}\n\"quoted\" \\ tab\t line\n").repeat(80);
        let body = serde_json::json!({
            "model": "claude-sonnet-4-5",
            "system": [
                {"type": "text", "text": "You are an agent."},
                {"type": "text", "text": long("a"), "cache_control": {"type": "ephemeral"}},
            ],
            "messages": [{"role": "user", "content": "hi"}],
        });
        let body = Bytes::from(serde_json::to_vec(&body).unwrap());
        let env = crate::providers::parse_envelope(Endpoint::Messages, body).unwrap();
        let auto = CompileOptions {
            breakpoints: BreakpointMode::Auto {
                ttl: Ttl::FiveMinutes,
            },
            ..Default::default()
        };
        for tag in ["b", "c", "b"] {
            let mut env = env.clone();
            env.system[1].text = long(tag);
            env.system[1].rewritten = true;
            env.system_dirty = true;
            assert!(
                env.system[1].text.len() >= 1024,
                "long enough to be remembered"
            );
            for opts in [&auto, &CompileOptions::default(), &auto] {
                let out: serde_json::Value = serde_json::from_slice(&env.compile(opts)).unwrap();
                assert_eq!(out["system"][1]["text"], long(tag));
                assert_eq!(out["system"][0]["text"], "You are an agent.");
            }
            let kept: serde_json::Value =
                serde_json::from_slice(&env.compile(&CompileOptions::default())).unwrap();
            assert_eq!(kept["system"][1]["cache_control"]["type"], "ephemeral");
        }
    }

    /// A marker placed on a long history changes a few bytes: the payload is the client's
    /// bytes around them, shared rather than copied, and the same bytes as one buffer.
    #[test]
    fn a_marker_on_a_long_history_shares_the_clients_bytes() {
        let turn = |i: usize| {
            [
                serde_json::json!({"role": "user", "content": format!("question {i} {}", "x".repeat(900))}),
                serde_json::json!({"role": "assistant", "content": [{"type": "text", "text": format!("answer {i}")}]}),
            ]
        };
        let body = serde_json::json!({
            "model": "claude-sonnet-4-5",
            "max_tokens": 1024,
            "system": [{"type": "text", "text": "You are an agent.".repeat(20)}],
            "messages": (0..40).flat_map(turn).collect::<Vec<_>>(),
        });
        let body = Bytes::from(serde_json::to_vec(&body).unwrap());
        let env = crate::providers::parse_envelope(Endpoint::Messages, body.clone()).unwrap();
        let auto = auto_markers();
        let payload = env.compile_payload(&auto);
        let whole = env.compile(&auto);
        assert_ne!(whole, body, "markers were placed");
        assert!(payload.is(&whole) && payload.len() == whole.len());
        let copied = copied_from_elsewhere(&payload, &body);
        assert!(
            copied * 20 < body.len(),
            "{copied} of {} bytes copied, in {} pieces",
            body.len(),
            payload.pieces().len()
        );
        assert!(payload.pieces().len() <= 12, "{}", payload.pieces().len());
    }

    /// An Anthropic history of `n` messages of one short text block each: an agent's many
    /// small steps.
    fn small_steps(n: usize) -> Envelope {
        let messages: Vec<serde_json::Value> = (0..n)
            .map(|i| {
                let role = ["user", "assistant"][i % 2];
                serde_json::json!({"role": role, "content": [{"type": "text", "text": format!("step {i}")}]})
            })
            .collect();
        let body = serde_json::json!({"model": "claude-sonnet-4-5", "messages": messages});
        let body = Bytes::from(serde_json::to_vec(&body).unwrap());
        crate::providers::parse_envelope(Endpoint::Messages, body).unwrap()
    }

    /// A history of more messages than half the memos hold (an agent's many small steps)
    /// is read without them: its kinds and blocks are held once, in the body's facts, not
    /// a second time in memos it would start over within itself.
    #[test]
    fn a_history_longer_than_the_memos_is_read_past_them() {
        let n = 40_000;
        let env = small_steps(n);
        let (read, peak) = crate::alloc_meter::peak_during(|| {
            let kinds = env.orig_kinds().len();
            let blocks: usize = env
                .cached
                .iter()
                .map(|m| env.with_blocks(m, <[_]>::len))
                .sum();
            (kinds, blocks)
        });
        assert_eq!(read, (n, n));
        let kinds = n * std::mem::size_of::<crate::envelope::MsgKind>();
        // An `Arc<[Block]>` of one block: the block after two counts, and its handle.
        let blocks = n * (std::mem::size_of::<super::super::blocks::Block>() + 16 + 16);
        let held = kinds + blocks;
        assert!(
            peak < held + held / 4,
            "{peak} bytes held at once for {held} of facts"
        );
    }

    /// A long history is compiled with its lists made at their size: the marker plan's
    /// list of blocks and the list of messages to write. Grown by doubling, each held up to
    /// twice what it needed, and its old half beside it as it grew, at the moment a shaped
    /// body of 100,000 small steps peaks.
    #[test]
    fn a_long_history_is_compiled_without_growing_its_list() {
        let n = 40_000;
        let env = small_steps(n);
        let auto = auto_markers();
        // The facts compiling reads are the envelope's, kept for the request: read first.
        let _ = env.compile_payload(&auto);
        let (payload, peak) = crate::alloc_meter::peak_during(|| env.compile_payload(&auto));
        assert!(payload.pieces().len() > 1, "markers were placed");
        // The plan's list and the messages' are of one size; one is held at a time, with
        // what each phase keeps beside it.
        let list = n * std::mem::size_of::<super::super::seq::Item<'_>>();
        assert!(
            peak < list + list / 2,
            "{peak} bytes held at once for a list of {list}"
        );
    }

    /// A marker placed on one huge message (a pasted file as the prompt) adds a few bytes
    /// around its text: the text goes out as the client's bytes, shared, not copied into a
    /// new buffer.
    #[test]
    fn a_marker_on_one_huge_message_shares_its_text() {
        let text = "fn main() { println!(\"hi\"); }\n".repeat(40_000);
        let body = serde_json::json!({
            "model": "claude-sonnet-4-5",
            "max_tokens": 1024,
            "system": "You are an agent.",
            "messages": [{"role": "user", "content": text}],
        });
        let body = Bytes::from(serde_json::to_vec(&body).unwrap());
        let env = crate::providers::parse_envelope(Endpoint::Messages, body.clone()).unwrap();
        let auto = auto_markers();
        let (payload, peak) = crate::alloc_meter::peak_during(|| env.compile_payload(&auto));
        assert!(peak < 64 * 1024, "{peak} bytes held at once compiling");
        let whole = env.compile(&auto);
        let sent: serde_json::Value = serde_json::from_slice(&whole).unwrap();
        assert_eq!(
            sent["messages"][0]["content"],
            serde_json::json!([{"type": "text", "text": text, "cache_control": {"type": "ephemeral"}}])
        );
        assert!(payload.is(&whole) && payload.len() == whole.len());
        let copied = copied_from_elsewhere(&payload, &body);
        assert!(copied < 1024, "{copied} of {} bytes copied", body.len());
    }

    /// The prompt memory retrieval reads is taken from a pasted file of megabytes without
    /// decoding it: its ends only, as much as a source is asked about.
    #[test]
    fn a_huge_prompt_is_read_at_its_ends() {
        let text = format!(
            "question first\n{}question last",
            "let s = \"quoted\";\n".repeat(200_000)
        );
        let body = serde_json::json!({
            "model": "claude-sonnet-4-5",
            "max_tokens": 1024,
            "messages": [{"role": "user", "content": [{"type": "text", "text": text}]}],
        });
        let body = Bytes::from(serde_json::to_vec(&body).unwrap());
        let env = crate::providers::parse_envelope(Endpoint::Messages, body.clone()).unwrap();
        let (prompt, peak) = crate::alloc_meter::peak_during(|| env.latest_user_prompt(8192));
        let (at, prompt) = prompt.unwrap();
        assert_eq!(at, 0);
        assert!(prompt.starts_with("question first\n") && prompt.ends_with("question last"));
        assert!(prompt.len() < 20_000, "{}", prompt.len());
        assert!(
            peak < 256 * 1024,
            "{peak} bytes held to read a prompt of {}",
            text.len()
        );
    }

    fn auto_markers() -> CompileOptions {
        CompileOptions {
            breakpoints: BreakpointMode::Auto {
                ttl: Ttl::FiveMinutes,
            },
            ..Default::default()
        }
    }

    /// Bytes of `payload` that are not slices of the client's `body`.
    fn copied_from_elsewhere(payload: &Payload, body: &Bytes) -> usize {
        let range = body.as_ptr_range();
        payload
            .pieces()
            .iter()
            .filter(|p| !range.contains(&p.as_ptr()))
            .map(Bytes::len)
            .sum()
    }

    #[test]
    fn prompt_cache_key_is_added_but_never_overrides_unless_asked() {
        let body = Bytes::from_static(br#"{"model":"gpt-5","input":"hi"}"#);
        let env = crate::providers::parse_envelope(Endpoint::Responses, body).unwrap();
        let opts = CompileOptions {
            prompt_cache_key: Some("s1".into()),
            ..Default::default()
        };
        assert_eq!(
            &env.compile(&opts)[..],
            br#"{"model":"gpt-5","input":"hi","prompt_cache_key":"s1"}"#
        );
        let body =
            Bytes::from_static(br#"{"model":"gpt-5","prompt_cache_key":"own","messages":[]}"#);
        let env = crate::providers::parse_envelope(Endpoint::Chat, body.clone()).unwrap();
        assert_eq!(env.compile(&opts), body);
        let opts = CompileOptions {
            override_prompt_cache_key: true,
            ..opts
        };
        assert_eq!(
            &env.compile(&opts)[..],
            br#"{"model":"gpt-5","prompt_cache_key":"s1","messages":[]}"#
        );
    }
}
