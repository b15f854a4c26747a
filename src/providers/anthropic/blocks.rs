//! Anthropic content blocks and their `cache_control` markers, edited by splicing: adding,
//! changing or removing a marker rewrites only the bytes of that entry.

use crate::envelope::{Block, Ttl};
use crate::json::scan::{self, Span};

fn marker_json(ttl: Ttl) -> &'static str {
    match ttl {
        Ttl::FiveMinutes => r#"{"type":"ephemeral"}"#,
        Ttl::OneHour => r#"{"type":"ephemeral","ttl":"1h"}"#,
    }
}

fn marker_of(b: &[u8], value: &Span) -> Ttl {
    match scan::str_field(b, value.start, "ttl").as_deref() {
        Some("1h") => Ttl::OneHour,
        _ => Ttl::FiveMinutes,
    }
}

/// [`object_block`] of a whole tool definition or system block, remembered by its bytes:
/// the head of the prompt comes back unchanged on every request, and finding its marker
/// means reading past every field (a tool's schema, a system prompt's text).
pub(crate) fn whole_object_block(b: &[u8]) -> Block {
    static SEEN: crate::memo::Memo<Block> = crate::memo::Memo::new(4096);
    SEEN.get_or_insert_with(crate::memo::key(b"object block", b), || {
        object_block(b, 0..b.len())
    })
}

/// Describe the object at `span` as a block.
pub(crate) fn object_block(b: &[u8], span: Span) -> Block {
    let mut block = Block {
        span: span.clone(),
        markable: b.get(span.start) == Some(&b'{'),
        marker: None,
        thinking: false,
        compaction: false,
    };
    let Ok(entries) = scan::entries(b, span.start) else {
        block.markable = false;
        return block;
    };
    for e in &entries {
        if scan::key_is(b, &e.key, "cache_control") && &b[e.value.clone()] != b"null" {
            block.marker = Some(marker_of(b, &e.value));
        } else if scan::key_is(b, &e.key, "type") {
            let ty = scan::decode_str(b, &e.value).unwrap_or_default();
            if super::is_thinking_block(&ty) {
                block.markable = false;
                block.thinking = true;
            }
            block.compaction = ty == crate::providers::anthropic::COMPACTION_BLOCK;
        } else if scan::key_is(b, &e.key, "text") && &b[e.value.clone()] == b"\"\"" {
            block.markable = false;
        }
    }
    block
}

/// Whether the Anthropic content block `block` (its JSON) may carry a marker: not a
/// thinking block, not an empty text block.
pub fn is_markable(block: &[u8]) -> bool {
    let start = scan::skip_ws(block, 0);
    scan::value_end(block, start).is_ok_and(|end| object_block(block, start..end).markable)
}

/// The content blocks of an Anthropic message (string content is one block).
pub(crate) fn message_blocks(b: &[u8]) -> Vec<Block> {
    message_blocks_among(b, 1)
}

/// [`message_blocks`] of one of `among` messages read together (a body's history).
pub(crate) fn message_blocks_among(b: &[u8], among: usize) -> Vec<Block> {
    // Agents resend every message on every request: its blocks are remembered by a hash
    // of its bytes (an xxh3 pass instead of a JSON scan of each block).
    static SEEN: crate::memo::Memo<Vec<Block>> = crate::memo::Memo::new(65_536);
    let key = || crate::memo::key(b"message-blocks", b);
    SEEN.get_or_insert_among(among, key, || scan_message_blocks(b))
}

/// [`message_blocks`], read from the bytes.
fn scan_message_blocks(b: &[u8]) -> Vec<Block> {
    let Some(content) = scan::field(b, scan::skip_ws(b, 0), "content") else {
        return Vec::new();
    };
    match b.get(content.start) {
        Some(b'"') => vec![Block {
            markable: content.len() > 2,
            span: content,
            marker: None,
            thinking: false,
            compaction: false,
        }],
        Some(b'[') => scan::elements(b, content.start)
            .unwrap_or_default()
            .into_iter()
            .map(|s| object_block(b, s))
            .collect(),
        _ => Vec::new(),
    }
}

/// The byte ranges of an Anthropic message's content blocks.
pub fn content_block_spans(b: &[u8]) -> Vec<Span> {
    message_blocks(b)
        .into_iter()
        .map(|block| block.span)
        .collect()
}

/// Splice the object at `span` so that it carries `want` as its marker; returns the edit
/// (range of `b` to replace, and the new bytes), or `None` when nothing changes.
fn object_edit(b: &[u8], span: &Span, want: Option<Ttl>) -> Option<(Span, Vec<u8>)> {
    let entries = scan::entries(b, span.start).ok()?;
    let pos = entries
        .iter()
        .position(|e| scan::key_is(b, &e.key, "cache_control"));
    match (pos, want) {
        (Some(i), Some(ttl)) => {
            let value = entries[i].value.clone();
            if &b[value.clone()] == b"null" {
                return Some((value, marker_json(ttl).as_bytes().to_vec()));
            }
            if marker_of(b, &value) == ttl {
                return None;
            }
            Some(ttl_edit(b, &value, ttl).unwrap_or_else(|| (value, marker_json(ttl).into())))
        }
        (Some(i), None) => {
            // Remove the entry with one neighbouring comma.
            let range = if i > 0 {
                entries[i - 1].value.end..entries[i].value.end
            } else if entries.len() > 1 {
                entries[0].key.start..entries[1].key.start
            } else {
                entries[0].key.start..entries[0].value.end
            };
            Some((range, Vec::new()))
        }
        (None, Some(ttl)) => {
            let close = span.end - 1;
            let sep = if entries.is_empty() { "" } else { "," };
            let insert = format!(r#"{sep}"cache_control":{}"#, marker_json(ttl));
            Some((close..close, insert.into_bytes()))
        }
        (None, None) => None,
    }
}

/// Change the lifetime of the marker object at `value`, touching only its `ttl`: the value
/// of an existing `ttl` entry is replaced, or a `ttl` entry is added before the closing
/// brace. Whatever else the client put in its marker stays as it was.
fn ttl_edit(b: &[u8], value: &Span, ttl: Ttl) -> Option<(Span, Vec<u8>)> {
    let entries = scan::entries(b, value.start).ok()?;
    let literal = format!("\"{}\"", ttl.label()).into_bytes();
    if let Some(e) = entries.iter().find(|e| scan::key_is(b, &e.key, "ttl")) {
        return Some((e.value.clone(), literal));
    }
    let close = value.end - 1;
    let sep = if entries.is_empty() { "" } else { "," };
    let mut insert = format!("{sep}\"ttl\":").into_bytes();
    insert.extend_from_slice(&literal);
    Some((close..close, insert))
}

/// Apply edits (sorted or not) to `b`, returning the new bytes.
fn splice(b: &[u8], mut edits: Vec<(Span, Vec<u8>)>) -> Vec<u8> {
    edits.sort_by_key(|(r, _)| r.start);
    let mut out = Vec::with_capacity(b.len() + 64);
    let mut at = 0;
    for (range, bytes) in edits {
        out.extend_from_slice(&b[at..range.start]);
        out.extend_from_slice(&bytes);
        at = range.end;
    }
    out.extend_from_slice(&b[at..]);
    out
}

/// Set the marker of a whole object (tool definition or system block).
pub(crate) fn set_object_marker(b: &[u8], want: Option<Ttl>) -> Option<Vec<u8>> {
    let start = scan::skip_ws(b, 0);
    let end = scan::value_end(b, start).ok()?;
    let edit = object_edit(b, &(start..end), want)?;
    Some(splice(b, vec![edit]))
}

/// Set the markers of a message's content blocks: `changes[k] = (block index, marker)`.
/// String content that gets a marker becomes a one-block array holding the same string.
#[cfg(test)]
pub(crate) fn set_message_markers(b: &[u8], changes: &[(usize, Option<Ttl>)]) -> Option<Vec<u8>> {
    message_marker_edits(b, changes).map(|edits| splice(b, edits))
}

/// [`set_message_markers`] as the edits to make, in order, each a range of `b` and what
/// replaces it: a writer that puts the rest of the message as the client's own bytes never
/// copies its text (a marker on a pasted 30 MB file adds a few bytes around it).
pub(crate) fn message_marker_edits(
    b: &[u8],
    changes: &[(usize, Option<Ttl>)],
) -> Option<Vec<(Span, Vec<u8>)>> {
    let blocks = message_blocks(b);
    let mut edits = Vec::new();
    for &(j, want) in changes {
        let block = blocks.get(j)?;
        if b[block.span.start] == b'"' {
            if let Some(ttl) = want {
                // The string stays where it is; the block's array is written around it.
                let (start, end) = (block.span.start, block.span.end);
                edits.push((start..start, br#"[{"type":"text","text":"#.to_vec()));
                let close = format!(r#","cache_control":{}}}]"#, marker_json(ttl));
                edits.push((end..end, close.into_bytes()));
            }
        } else if let Some(edit) = object_edit(b, &block.span, want) {
            edits.push(edit);
        }
    }
    if edits.is_empty() {
        return None;
    }
    edits.sort_by_key(|(r, _)| r.start);
    Some(edits)
}

/// Remove every marker from a message (the uncached tail never carries one).
#[cfg(test)]
pub(crate) fn strip_message_markers(b: &[u8]) -> Option<Vec<u8>> {
    strip_marker_edits(b).map(|edits| splice(b, edits))
}

/// [`strip_message_markers`] as edits (see [`message_marker_edits`]).
pub(crate) fn strip_marker_edits(b: &[u8]) -> Option<Vec<(Span, Vec<u8>)>> {
    let changes: Vec<(usize, Option<Ttl>)> = message_blocks(b)
        .iter()
        .enumerate()
        .filter(|(_, blk)| blk.marker.is_some())
        .map(|(j, _)| (j, None))
        .collect();
    message_marker_edits(b, &changes)
}

/// Count the markers in a compiled Anthropic payload (tools, system, messages).
pub fn count_markers(payload: &[u8]) -> usize {
    memchr::memmem::find_iter(payload, b"\"cache_control\"").count()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A remembered block is the reading of its bytes, on the first ask and after: its
    /// marker, whether it can carry one, whether it is thinking.
    #[test]
    fn a_remembered_object_block_is_the_reading_of_its_bytes() {
        let objects: [&[u8]; 4] = [
            br#"{"name":"read","input_schema":{"type":"object"}}"#,
            br#"{"name":"read","input_schema":{},"cache_control":{"type":"ephemeral","ttl":"1h"}}"#,
            br#"{"type":"thinking","thinking":"hm","signature":"s"}"#,
            br#"not an object"#,
        ];
        for _ in 0..2 {
            for b in objects {
                assert_eq!(whole_object_block(b), object_block(b, 0..b.len()));
            }
        }
        assert_eq!(whole_object_block(objects[1]).marker, Some(Ttl::OneHour));
    }

    /// Remembered blocks are the scanned ones, for every message of the client fixtures
    /// (asked twice: the second answer comes from the memo), and for odd messages.
    #[test]
    fn remembered_message_blocks_equal_scanned_ones() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/clients");
        let mut messages: Vec<Vec<u8>> = Vec::new();
        for entry in std::fs::read_dir(dir).unwrap() {
            let body = std::fs::read(entry.unwrap().path()).unwrap();
            for key in ["messages", "input"] {
                if let Some(array) = scan::field(&body, scan::skip_ws(&body, 0), key) {
                    for span in scan::elements(&body, array.start).unwrap_or_default() {
                        messages.push(body[span].to_vec());
                    }
                }
            }
        }
        assert!(messages.len() > 30, "the fixtures hold messages");
        messages.extend(
            [
                &br#"{"role":"user","content":""}"#[..],
                br#"{"content":[1,"x",{}]}"#,
                b"{}",
                b"[",
                b"",
            ]
            .map(<[u8]>::to_vec),
        );
        for m in &messages {
            for _ in 0..2 {
                assert_eq!(message_blocks(m), scan_message_blocks(m));
            }
        }
        // A message that differs only by its marker is not answered from the other's entry.
        let plain = br#"{"role":"user","content":[{"type":"text","text":"go"}]}"#;
        let marked = br#"{"role":"user","content":[{"type":"text","text":"go","cache_control":{"type":"ephemeral"}}]}"#;
        for _ in 0..2 {
            assert_eq!(message_blocks(plain)[0].marker, None);
            assert_eq!(message_blocks(marked)[0].marker, Some(Ttl::FiveMinutes));
        }
    }

    #[test]
    fn markers_are_added_changed_and_removed_by_splicing() {
        let m = br#"{"role":"user","content":[ {"type":"text", "text":"a"} ,{"type":"thinking","thinking":"x"}]}"#;
        let blocks = message_blocks(m);
        assert!(blocks[0].markable && !blocks[1].markable);
        let out = set_message_markers(m, &[(0, Some(Ttl::FiveMinutes))]).unwrap();
        assert_eq!(
            String::from_utf8(out.clone()).unwrap(),
            r#"{"role":"user","content":[ {"type":"text", "text":"a","cache_control":{"type":"ephemeral"}} ,{"type":"thinking","thinking":"x"}]}"#
        );
        let back = strip_message_markers(&out).unwrap();
        assert_eq!(back, m.to_vec());
        let s = br#"{"role":"user","content":"hi"}"#;
        let out = set_message_markers(s, &[(0, Some(Ttl::OneHour))]).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            r#"{"role":"user","content":[{"type":"text","text":"hi","cache_control":{"type":"ephemeral","ttl":"1h"}}]}"#
        );
        let first = br#"{"cache_control":{"type":"ephemeral"}, "name":"t"}"#;
        assert_eq!(
            set_object_marker(first, None).unwrap(),
            br#"{"name":"t"}"#.to_vec()
        );
        assert!(set_object_marker(
            br#"{"name":"t","cache_control":{"type":"ephemeral"}}"#,
            Some(Ttl::FiveMinutes)
        )
        .is_none());
    }

    /// Upgrading a client's 5-minute marker edits only its `ttl`: Claude Code's
    /// `{"type":"ephemeral"}` gains `"ttl":"1h"`, an explicit `"ttl": "5m"` has its value
    /// replaced, and anything else inside the marker keeps its bytes.
    #[test]
    fn a_lifetime_change_edits_only_the_ttl() {
        let cc = br#"{"type":"text","text":"You are a Claude agent.","cache_control":{"type":"ephemeral"}}"#;
        assert_eq!(
            String::from_utf8(set_object_marker(cc, Some(Ttl::OneHour)).unwrap()).unwrap(),
            r#"{"type":"text","text":"You are a Claude agent.","cache_control":{"type":"ephemeral","ttl":"1h"}}"#
        );
        let spelled = br#"{"type":"text","text":"x","cache_control":{ "ttl": "5m" , "type":"ephemeral", "scope":"s"}}"#;
        assert_eq!(
            String::from_utf8(set_object_marker(spelled, Some(Ttl::OneHour)).unwrap()).unwrap(),
            r#"{"type":"text","text":"x","cache_control":{ "ttl": "1h" , "type":"ephemeral", "scope":"s"}}"#
        );
        let m = br#"{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"ok","cache_control":{"type":"ephemeral"}},{"type":"text","text":"r"}]}"#;
        let out = set_message_markers(m, &[(0, Some(Ttl::OneHour))]).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            r#"{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"ok","cache_control":{"type":"ephemeral","ttl":"1h"}},{"type":"text","text":"r"}]}"#
        );
    }
}
