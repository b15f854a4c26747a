//! Provider adapters, parse side: split a request body into the envelope in one scan,
//! recording byte ranges instead of building a document.

use bytes::Bytes;

use super::{Element, Envelope, Meta, OrigArray, SystemForm, SystemPart};
use crate::error::ApiError;
use crate::json::check as json_check;
use crate::json::scan::{self, Span};
use crate::known_prefix::{Gathered, PrefixMatch};
use crate::memo::{self, Memo};
use crate::route::{Endpoint, Provider};

/// The name of the n-th part the client's own system prompt arrives as.
pub(crate) fn base_part_name(n: usize) -> String {
    if n == 0 {
        "base".into()
    } else {
        format!("base.{n}")
    }
}

/// Keys whose arrays are split into elements during the top-level scan.
fn is_split_key(endpoint: Endpoint, key: &str) -> bool {
    match endpoint {
        Endpoint::Responses => key == "input" || key == "tools",
        _ => key == "messages" || key == "tools",
    }
}

/// Parse a body; with `known`, its history array's first elements are taken from the
/// remembered body it repeats (see [`crate::known_prefix`]) instead of being scanned again;
/// with `gathered`, the top-level entries and the elements of the history and the tools are
/// the ones the body check found, and only an array it did not read is scanned.
pub(crate) fn parse(
    provider: Provider,
    endpoint: Endpoint,
    body: Bytes,
    known: Option<&PrefixMatch>,
    gathered: Option<&Gathered>,
) -> Result<Envelope, ApiError> {
    if !matches!(
        endpoint,
        Endpoint::Messages | Endpoint::CountTokens | Endpoint::Chat | Endpoint::Responses
    ) {
        return Err(ApiError::invalid(format!(
            "the {} endpoint has no context envelope",
            endpoint.label()
        )));
    }
    let b: &[u8] = &body;
    let start = scan::skip_ws(b, 0);
    if b.get(start) != Some(&b'{') {
        return Err(ApiError::invalid("the request body must be a JSON object"));
    }
    let mut arrays: Vec<(String, Vec<Span>)> = Vec::new();
    let resumed = known.filter(|m| split_key(b, endpoint, &m.known.key).is_some());
    let (top, end) = match (gathered.and_then(Gathered::as_scanned), resumed) {
        (Some((fields, history)), _) => from_check(b, endpoint, fields, history, &mut arrays),
        (None, Some(m)) => scan_resumed(b, endpoint, m, &mut arrays),
        (None, None) => scan::entries_with(b, start, |key, vstart| {
            split_value(b, endpoint, key, vstart, &mut arrays)
        }),
    }
    .map_err(|e| ApiError::invalid(format!("the request body is not valid JSON: {e}")))?;
    if scan::skip_ws(b, end) != b.len() {
        return Err(ApiError::invalid(
            "the request body has trailing data after the JSON object",
        ));
    }
    let find = |name: &str| {
        top.iter()
            .find(|e| scan::key_is(b, &e.key, name))
            .map(|e| e.value.clone())
    };
    let take_array = |name: &str| -> Result<OrigArray, ApiError> {
        let Some(span) = find(name) else {
            return Ok(OrigArray::default());
        };
        if &b[span.clone()] == b"null" {
            return Ok(OrigArray::default());
        }
        let elems = arrays
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, e)| e.clone())
            .ok_or_else(|| ApiError::invalid(format!("{name} must be an array")))?;
        Ok(OrigArray {
            span: Some(span),
            elems,
        })
    };
    let model = match find("model") {
        Some(span) => {
            scan::decode_str(b, &span).ok_or_else(|| ApiError::invalid("model must be a string"))?
        }
        None => String::new(),
    };
    let tools_orig = take_array("tools")?;
    let tools = elements_of(&tools_orig, 0);
    let mut env = Envelope {
        provider,
        endpoint,
        body: body.clone(),
        top: top.clone(),
        top_span: start..end,
        system_form: SystemForm::Absent,
        system: Vec::new(),
        system_dirty: false,
        tools_orig,
        tools,
        tools_dirty: false,
        messages_orig: OrigArray::default(),
        input_text: None,
        cached: Vec::new(),
        uncached: Vec::new(),
        messages_dirty: false,
        option_edits: Vec::new(),
        meta: Meta::new(provider, endpoint, model),
        orig_facts: known
            .map(|m| super::OrigFacts::after(&m.known.facts, m.elems().len()))
            .unwrap_or_default(),
    };
    match endpoint {
        Endpoint::Chat => {
            if find("messages").is_none() {
                return Err(ApiError::invalid("messages is required"));
            }
            env.messages_orig = take_array("messages")?;
            check_objects(b, &env.messages_orig, "messages")?;
            split_leading_system(&mut env);
        }
        Endpoint::Responses => {
            if let Some(span) = find("instructions") {
                text_system(&mut env, span, "instructions")?;
            }
            match find("input") {
                Some(span) if b[span.start] == b'"' => {
                    let item = format!(
                        r#"{{"type":"message","role":"user","content":{}}}"#,
                        String::from_utf8_lossy(&b[span.clone()])
                    );
                    env.cached.push(Element::new(Bytes::from(item)));
                    env.input_text = Some(span);
                }
                _ => {
                    env.messages_orig = take_array("input")?;
                    check_objects(b, &env.messages_orig, "input")?;
                    if env.system.is_empty() && find("instructions").is_none() {
                        split_leading_system(&mut env);
                    } else {
                        env.cached = elements_of(&env.messages_orig, 0);
                    }
                }
            }
        }
        _ => {
            if find("messages").is_none() {
                return Err(ApiError::invalid("messages is required"));
            }
            env.messages_orig = take_array("messages")?;
            check_objects(b, &env.messages_orig, "messages")?;
            env.cached = elements_of(&env.messages_orig, 0);
            if let Some(span) = find("system") {
                match b[span.start] {
                    b'"' => text_system(&mut env, span, "system")?,
                    b'[' => block_system(&mut env, span)?,
                    b'n' => {}
                    _ => {
                        return Err(ApiError::invalid(
                            "system must be a string or an array of text blocks",
                        ))
                    }
                }
            }
        }
    }
    Ok(env)
}

/// The end of the top-level value at `vstart`, named `key`; an array the envelope splits is
/// split into `arrays` on the way.
fn split_value(
    b: &[u8],
    endpoint: Endpoint,
    key: &Span,
    vstart: usize,
    arrays: &mut Vec<(String, Vec<Span>)>,
) -> Result<usize, scan::ScanError> {
    if let Some(name) = split_array(b, endpoint, key, vstart) {
        let (elems, end) = scan::elements_end(b, vstart)?;
        arrays.push((name, elems));
        return Ok(end);
    }
    scan::value_end(b, vstart)
}

/// What [`scan::entries_with`] gives, for a body that repeats the kept body of `m` up to
/// the end of its last repeated history message: the entries before the history are the
/// kept body's (the same bytes at the same offsets), the history is scanned from the end of
/// the repeated messages, and what follows it is the kept body's when the body ends with
/// the same bytes, else scanned.
fn scan_resumed(
    b: &[u8],
    endpoint: Endpoint,
    m: &PrefixMatch,
    arrays: &mut Vec<(String, Vec<Span>)>,
) -> Result<(Vec<scan::Entry>, usize), scan::ScanError> {
    let known = &m.known;
    let mut top = known.before.clone();
    for entry in &known.before {
        let kept = || {
            let (_, elems) = known
                .arrays_before
                .iter()
                .find(|(s, _)| *s == entry.value.start)?;
            Some(elems.clone())
        };
        split_entry(b, endpoint, entry, kept, arrays)?;
    }
    let (elems, end) = scan::elements_end_after(b, m.elems())?;
    let history = scan::Entry {
        key: known.key.clone(),
        value: known.array_start..end,
    };
    split_entry(b, endpoint, &history, || Some(elems), arrays)?;
    top.push(history);
    match known.tail() {
        Some((tail, bytes)) if b.get(end..) == Some(bytes) => {
            for entry in tail.entries_at(end) {
                let kept = || tail.spans_at(end, entry.value.start);
                split_entry(b, endpoint, &entry, kept, arrays)?;
                top.push(entry);
            }
            // The kept body ended with one object and blanks after it.
            Ok((top, object_end(b)))
        }
        _ => scan::entries_with_after(b, top, end, |key, vstart| {
            split_value(b, endpoint, key, vstart, arrays)
        }),
    }
}

/// The end of the one object a body that passed holds: before the blanks that end it.
fn object_end(b: &[u8]) -> usize {
    b.len()
        - b.iter()
            .rev()
            .take_while(|c| matches!(c, b' ' | b'\t' | b'\n' | b'\r'))
            .count()
}

/// Split `entry`'s value into `arrays` when it is an array the envelope splits: into the
/// element spans `known` gives, when it knows them, else into those scanned.
fn split_entry(
    b: &[u8],
    endpoint: Endpoint,
    entry: &scan::Entry,
    known: impl FnOnce() -> Option<Vec<Span>>,
    arrays: &mut Vec<(String, Vec<Span>)>,
) -> Result<(), scan::ScanError> {
    if let Some(name) = split_array(b, endpoint, &entry.key, entry.value.start) {
        let elems = match known() {
            Some(elems) => elems,
            None => scan::elements_end(b, entry.value.start)?.0,
        };
        arrays.push((name, elems));
    }
    Ok(())
}

/// The name of the top-level key `key` when its value, at `vstart`, is an array the
/// envelope splits into elements.
fn split_array(b: &[u8], endpoint: Endpoint, key: &Span, vstart: usize) -> Option<String> {
    (b.get(vstart) == Some(&b'[')).then(|| split_key(b, endpoint, key))?
}

/// The name of a top-level key whose array is split into elements, if it is one.
fn split_key(b: &[u8], endpoint: Endpoint, key: &Span) -> Option<String> {
    scan::decode_str(b, key).filter(|k| is_split_key(endpoint, k))
}

/// The top-level entries, and the elements of the arrays split, of a body the check passed
/// whole, from what it gathered: the history's and the tools' elements as the check found
/// them (when it read them: a resumed check does not read the fields before the history),
/// any other array split by a scan of its own. Gives what [`scan::entries_with`] gives for
/// that body.
fn from_check(
    b: &[u8],
    endpoint: Endpoint,
    fields: &[json_check::Field],
    history: &json_check::Elements<'_>,
    arrays: &mut Vec<(String, Vec<Span>)>,
) -> Result<(Vec<scan::Entry>, usize), scan::ScanError> {
    let top: Vec<scan::Entry> = fields
        .iter()
        .map(|f| scan::Entry {
            key: f.key.start - 1..f.key.end + 1,
            value: f.value.clone(),
        })
        .collect();
    for entry in &top {
        let known = || history.spans_at(entry.value.start).map(<[Span]>::to_vec);
        split_entry(b, endpoint, entry, known, arrays)?;
    }
    // The check passed one object with only blanks around it.
    Ok((top, object_end(b)))
}

fn elements_of(arr: &OrigArray, skip: usize) -> Vec<Element> {
    arr.elems
        .iter()
        .enumerate()
        .skip(skip)
        .map(|(i, s)| Element::orig(i, s.clone()))
        .collect()
}

fn check_objects(b: &[u8], arr: &OrigArray, name: &str) -> Result<(), ApiError> {
    match arr.elems.iter().position(|s| b[s.start] != b'{') {
        Some(i) => Err(ApiError::invalid(format!("{name}[{i}] must be an object"))),
        None => Ok(()),
    }
}

fn text_system(env: &mut Envelope, span: Span, field: &str) -> Result<(), ApiError> {
    if &env.body[span.clone()] == b"null" {
        return Ok(());
    }
    let text = system_text(&env.body, &span)
        .ok_or_else(|| ApiError::invalid(format!("{field} must be a string")))?;
    env.system.push(SystemPart::new(
        base_part_name(0),
        text,
        Some(Element::orig(0, span.clone())),
    ));
    env.system_form = SystemForm::Text;
    Ok(())
}

fn block_system(env: &mut Envelope, span: Span) -> Result<(), ApiError> {
    let b = &env.body;
    let blocks =
        scan::elements(b, span.start).map_err(|e| ApiError::invalid(format!("system: {e}")))?;
    for (i, block) in blocks.into_iter().enumerate() {
        if b[block.start] != b'{' {
            return Err(ApiError::invalid(format!(
                "system[{i}] must be a text block"
            )));
        }
        let text = scan::field(b, block.start, "text")
            .and_then(|span| system_text(b, &span))
            .ok_or_else(|| ApiError::invalid(format!("system[{i}] must be a text block")))?;
        env.system.push(SystemPart::new(
            base_part_name(i),
            text,
            Some(Element::orig(i, block)),
        ));
    }
    env.system_form = SystemForm::Blocks(span);
    Ok(())
}

/// The decoded text of a system prompt's JSON string at `span`. Agents resend the same
/// system prompt, often tens of KB with escapes on every line, on every request: a long one
/// is remembered by its bytes (up to [`REMEMBERED_TEXT`] each, a few at a time).
fn system_text(b: &[u8], span: &Span) -> Option<String> {
    static TEXTS: Memo<Option<String>> = Memo::new(32);
    if !(1024..=REMEMBERED_TEXT).contains(&span.len()) {
        return scan::decode_str(b, span);
    }
    let raw = &b[span.clone()];
    TEXTS.get_or_insert_with(memo::key(b"system text", raw), || scan::decode_str(b, span))
}

/// The longest system text remembered.
const REMEMBERED_TEXT: usize = 64 * 1024;

/// The leading `system`/`developer` messages are the system parts: always for Chat, for
/// Responses when it sends no `instructions` (what a system role is, is the provider
/// modules' rule).
fn split_leading_system(env: &mut Envelope) {
    let b = &env.body;
    let mut leading = 0;
    let mut role_of_first = None;
    for span in &env.messages_orig.elems {
        let role = scan::str_field(b, span.start, "role").unwrap_or_default();
        let kind = crate::providers::MsgKind::of(env.endpoint, &b[span.clone()]);
        let message = kind.item_type.is_empty() || kind.item_type == "message";
        if !(kind.is_instruction() && message) {
            break;
        }
        role_of_first.get_or_insert(role);
        let text = chat_text(b, span.start);
        env.system.push(SystemPart::new(
            base_part_name(leading),
            text,
            Some(Element::orig(leading, span.clone())),
        ));
        leading += 1;
    }
    env.system_form = match role_of_first {
        Some(role) => SystemForm::LeadingMessages { role },
        None if env.endpoint == Endpoint::Chat => SystemForm::LeadingMessages {
            role: "system".into(),
        },
        None => SystemForm::Absent,
    };
    env.cached = elements_of(&env.messages_orig, leading);
}

/// The text of a Chat message: its string content or its text parts joined.
fn chat_text(b: &[u8], start: usize) -> String {
    let Some(content) = scan::field(b, start, "content") else {
        return String::new();
    };
    if let Some(text) = scan::decode_str(b, &content) {
        return text;
    }
    scan::elements(b, content.start)
        .unwrap_or_default()
        .iter()
        .filter_map(|part| scan::str_field(b, part.start, "text"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A system text read from the memo is the one decoding gives, for short and long texts,
    /// with and without escapes, and for values that are not strings.
    #[test]
    fn a_remembered_system_text_is_its_decoding() {
        let long = r#"line \"quoted\" \u00e9 \\ tab\t\n"#.repeat(200);
        let plain = "x".repeat(5000);
        let huge = r"y\n".repeat(40_000);
        for raw in [
            r#""short""#.to_string(),
            format!(r#""{long}""#),
            format!(r#""{plain}""#),
            // The same length as the one before, other bytes.
            format!(r#""{}""#, "z".repeat(5000)),
            format!(r#""{huge}""#),
            format!(r#"["{plain}"]"#),
            "null".to_string(),
        ] {
            let b = raw.as_bytes();
            let span = 0..b.len();
            for _ in 0..2 {
                assert_eq!(
                    system_text(b, &span),
                    scan::decode_str(b, &span),
                    "{}",
                    &raw[..20.min(raw.len())]
                );
            }
        }
    }
}
