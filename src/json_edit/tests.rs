//! The edits on bytes against the `json-patch` crate on a parse of the same text: the same
//! value comes out (or the same operation fails, for the same reason), and what the edit
//! does not touch keeps its bytes.

use json_patch::PatchOperation;
use proptest::prelude::*;
use serde_json::{json, Value};

use super::{equal, merge, patch, splice};

/// A JSON value with keys that need escaping in a pointer (`~`, `/`) and strings that need
/// escaping in JSON.
fn any_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        (-50i64..50).prop_map(|n| json!(n)),
        prop_oneof![Just(1.5f64), Just(-0.25), Just(2.0), Just(1e21)].prop_map(|f| json!(f)),
        "[ab~/é\"\\\\]{0,3}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 5, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::vec(("[ab~/]{0,2}", inner), 0..5)
                .prop_map(|members| Value::Object(members.into_iter().collect())),
        ]
    })
}

/// A deterministic stream of choices for the writer.
struct Choices(u64);

impl Choices {
    fn next(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }

    fn ws(&mut self, out: &mut Vec<u8>) {
        let pad: &[u8] = match self.next(5) {
            0 => b" ",
            1 => b"\n  ",
            2 => b"\t",
            _ => b"",
        };
        out.extend_from_slice(pad);
    }
}

/// `v` written as a client might: white space between tokens and, now and then, a member
/// named twice, its first value one a parse drops.
fn write(v: &Value, c: &mut Choices, out: &mut Vec<u8>) {
    match v {
        Value::Object(members) => {
            out.push(b'{');
            c.ws(out);
            let mut first = true;
            for (key, value) in members {
                let mut member = |value: &Value, c: &mut Choices, out: &mut Vec<u8>| {
                    if !std::mem::take(&mut first) {
                        out.push(b',');
                        c.ws(out);
                    }
                    out.extend_from_slice(&serde_json::to_vec(key).unwrap());
                    c.ws(out);
                    out.push(b':');
                    c.ws(out);
                    write(value, c, out);
                    c.ws(out);
                };
                if c.next(8) == 0 {
                    member(&json!("dropped"), c, out);
                }
                member(value, c, out);
            }
            out.push(b'}');
        }
        Value::Array(items) => {
            out.push(b'[');
            c.ws(out);
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                    c.ws(out);
                }
                write(item, c, out);
                c.ws(out);
            }
            out.push(b']');
        }
        scalar => out.extend_from_slice(&serde_json::to_vec(scalar).unwrap()),
    }
}

fn written(v: &Value, seed: u64) -> Vec<u8> {
    let mut out = Vec::new();
    let mut c = Choices(seed | 1);
    c.ws(&mut out);
    write(v, &mut c, &mut out);
    c.ws(&mut out);
    out
}

fn escape(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}

/// Every pointer that names a value of `v`.
fn pointers(v: &Value, at: String, out: &mut Vec<String>) {
    out.push(at.clone());
    match v {
        Value::Object(members) => {
            for (key, value) in members {
                pointers(value, format!("{at}/{}", escape(key)), out);
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                pointers(item, format!("{at}/{i}"), out);
            }
        }
        _ => {}
    }
}

/// One operation's choices, turned into an operation on a given document.
#[derive(Debug, Clone)]
struct OpChoice {
    op: u8,
    path: usize,
    from: usize,
    tail: u8,
    value: Value,
}

fn any_op() -> impl Strategy<Value = OpChoice> {
    (0u8..6, any::<usize>(), any::<usize>(), 0u8..14, any_value()).prop_map(
        |(op, path, from, tail, value)| OpChoice {
            op,
            path,
            from,
            tail,
            value,
        },
    )
}

fn operation(choice: &OpChoice, known: &[String]) -> PatchOperation {
    let pick = |i: usize| known[i % known.len()].clone();
    // Some paths name nothing yet (a new member, the end of an array, an index past it, a
    // leading zero), some are not pointers to anything at all.
    let path = match choice.tail {
        0 => format!("{}/new", pick(choice.path)),
        1 => format!("{}/-", pick(choice.path)),
        2 => format!("{}/9", pick(choice.path)),
        3 => format!("{}/00", pick(choice.path)),
        4 => format!("{}/b~1", pick(choice.path)),
        _ => pick(choice.path),
    };
    let from = pick(choice.from);
    let op = ["add", "remove", "replace", "move", "copy", "test"][usize::from(choice.op)];
    serde_json::from_value(json!({"op": op, "path": path, "from": from, "value": choice.value}))
        .expect("generated operations are well formed")
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    /// A patch on bytes gives the value the crate gives on a parse, or fails at the same
    /// operation for the same reason and leaves the bytes as they were.
    #[test]
    fn a_patch_on_bytes_is_the_crates_patch(
        doc in any_value(),
        ops in prop::collection::vec(any_op(), 1..3),
        seed in any::<u64>(),
    ) {
        let raw = written(&doc, seed);
        let parsed: Value = serde_json::from_slice(&raw).unwrap();
        let mut known = Vec::new();
        pointers(&parsed, String::new(), &mut known);
        let ops: Vec<PatchOperation> = ops.iter().map(|c| operation(c, &known)).collect();
        // The crate's unsafe form: its atomic `patch` undoes a failed patch by applying the
        // inverse operations, and panics when the inverse of a `move` to the parent of its
        // `from` is refused. What a failed patch leaves is checked on our side.
        let mut theirs = parsed.clone();
        let expected = json_patch::patch_unsafe(&mut theirs, &ops);
        let mut ours = raw.clone();
        let got = patch(&mut ours, &ops);
        match (expected, got) {
            (Ok(()), Ok(())) => {
                let value: Value = serde_json::from_slice(&ours)
                    .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&ours)));
                prop_assert_eq!(value, theirs);
            }
            (Err(e), Err(g)) => {
                prop_assert_eq!((e.operation, e.kind.to_string()), (g.operation, g.kind.to_string()));
                prop_assert_eq!(&ours, &raw, "a failed patch leaves the bytes");
            }
            (e, g) => prop_assert!(false, "crate {:?}, bytes {:?}, ops {:?}", e, g, ops),
        }
    }

    /// A merge patch on bytes gives the crate's merge of a parse.
    #[test]
    fn a_merge_on_bytes_is_the_crates_merge(
        doc in any_value(),
        merge_patch in any_value(),
        seed in any::<u64>(),
    ) {
        let raw = written(&doc, seed);
        let mut theirs: Value = serde_json::from_slice(&raw).unwrap();
        json_patch::merge(&mut theirs, &merge_patch);
        let mut ours = raw.clone();
        merge(&mut ours, &merge_patch);
        let value: Value = serde_json::from_slice(&ours).unwrap();
        prop_assert_eq!(value, theirs);
    }

    /// Equality on bytes is `Value` equality, whatever the white space, key order or
    /// duplicate keys of either text.
    #[test]
    fn equality_on_bytes_is_value_equality(
        a in any_value(),
        b in any_value(),
        seeds in any::<(u64, u64)>(),
    ) {
        let (ra, ra2, rb) = (written(&a, seeds.0), written(&a, seeds.1), written(&b, seeds.1));
        let (va, vb): (Value, Value) =
            (serde_json::from_slice(&ra).unwrap(), serde_json::from_slice(&rb).unwrap());
        let va2: Value = serde_json::from_slice(&ra2).unwrap();
        prop_assert_eq!(equal(&ra, &rb), va == vb);
        prop_assert_eq!(equal(&ra, &ra2), va == va2);
    }

    /// A replacement spliced over the original reads as the replacement, and keeps the
    /// original's bytes exactly when the two are equal.
    #[test]
    fn a_splice_reads_as_the_replacement(
        doc in any_value(),
        ops in prop::collection::vec(any_op(), 0..3),
        seeds in any::<(u64, u64)>(),
    ) {
        let old = written(&doc, seeds.0);
        let before: Value = serde_json::from_slice(&old).unwrap();
        let mut known = Vec::new();
        pointers(&before, String::new(), &mut known);
        let mut after = before.clone();
        for op in ops.iter().map(|c| operation(c, &known)) {
            let _ = json_patch::patch(&mut after, &[op]);
        }
        let new = written(&after, seeds.1);
        let after: Value = serde_json::from_slice(&new).unwrap();
        let out = splice(&old, &new);
        let read: Value = serde_json::from_slice(&out).unwrap();
        prop_assert_eq!(&read, &after);
        if before == after {
            prop_assert_eq!(out, old);
        }
    }
}

#[test]
fn an_added_member_leaves_every_other_byte() {
    let mut doc = br#"{ "model" : "m",  "messages":[{"role":"user","content":"a  b","n":1.50}], "max_tokens":10 }"#.to_vec();
    let ops = serde_json::from_value::<json_patch::Patch>(
        json!([{"op": "add", "path": "/metadata", "value": {"user_id": "s-1"}}]),
    )
    .unwrap();
    patch(&mut doc, &ops).unwrap();
    assert_eq!(
        String::from_utf8(doc).unwrap(),
        r#"{ "model" : "m",  "messages":[{"role":"user","content":"a  b","n":1.50}], "max_tokens":10,"metadata":{"user_id":"s-1"} }"#
    );
}

/// The crate removes a member by swapping the last one into its place, so a `remove` of a
/// top-level option (or a merge patch's `null`) reordered the body's other members.
#[test]
fn a_removed_member_leaves_the_others_in_their_order() {
    let body = r#"{"model":"m","temperature":1,"messages":[{"role":"user","content":"hi"}],"max_tokens":10}"#;
    let mut doc = body.as_bytes().to_vec();
    let ops = serde_json::from_value::<json_patch::Patch>(
        json!([{"op": "remove", "path": "/temperature"}]),
    )
    .unwrap();
    patch(&mut doc, &ops).unwrap();
    let expected = r#"{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":10}"#;
    assert_eq!(String::from_utf8(doc).unwrap(), expected);
    let mut doc = body.as_bytes().to_vec();
    merge(&mut doc, &json!({"temperature": null, "top_k": 5}));
    assert_eq!(
        String::from_utf8(doc).unwrap(),
        r#"{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":10,"top_k":5}"#
    );
}

#[test]
fn elements_are_inserted_and_removed_between_their_neighbours() {
    let ops = |v: Value| serde_json::from_value::<json_patch::Patch>(v).unwrap();
    let mut doc = br#"[ 1 , 2 ]"#.to_vec();
    patch(
        &mut doc,
        &ops(json!([{"op": "add", "path": "/1", "value": "x"}])),
    )
    .unwrap();
    assert_eq!(doc, br#"[ 1 , "x",2 ]"#);
    patch(
        &mut doc,
        &ops(json!([{"op": "add", "path": "/-", "value": 3}])),
    )
    .unwrap();
    assert_eq!(doc, br#"[ 1 , "x",2,3 ]"#);
    patch(&mut doc, &ops(json!([{"op": "remove", "path": "/3"}]))).unwrap();
    patch(&mut doc, &ops(json!([{"op": "remove", "path": "/0"}]))).unwrap();
    assert_eq!(doc, br#"[ "x",2 ]"#);
    let mut empty = b"{\"a\":[]}".to_vec();
    patch(
        &mut empty,
        &ops(json!([{"op": "add", "path": "/a/0", "value": {}}])),
    )
    .unwrap();
    assert_eq!(empty, b"{\"a\":[{}]}");
}

#[test]
fn a_failing_patch_is_undone_and_says_where() {
    let body = br#"{"a":{"b":[1,2]},"c":3}"#;
    let mut doc = body.to_vec();
    let ops = serde_json::from_value::<json_patch::Patch>(json!([
        {"op": "add", "path": "/a/b/-", "value": 3},
        {"op": "move", "from": "/c", "path": "/a/b/c"},
    ]))
    .unwrap();
    let e = patch(&mut doc, &ops).unwrap_err();
    assert_eq!(
        e.to_string(),
        "operation '/1' failed at path '/a/b/c': path is invalid"
    );
    assert_eq!(doc, body, "the first operation is undone too");
}

#[test]
fn numbers_and_strings_compare_as_values() {
    assert!(equal(b"1.50", b"1.5"));
    assert!(equal(br#""\u0041""#, br#""A""#));
    assert!(equal(br#"{"a":1, "b":[true]}"#, br#"{"b":[true],"a":1}"#));
    assert!(
        !equal(b"1", b"1.0"),
        "an integer is not a float to serde_json"
    );
    assert!(!equal(br#"{"a":1}"#, br#"{"a":1,"b":null}"#));
    assert!(
        equal(br#"{"a":1,"a":2}"#, br#"{"a":2}"#),
        "the last of a key named twice"
    );
}

#[test]
fn a_hooks_reserialised_payload_keeps_the_clients_bytes() {
    let old = br#"{"model":"m", "messages":[{"role":"user","content":[{"type":"text","text":"a"}]},{"role":"assistant","content":"b"}],"max_tokens":10}"#;
    // As Python's json.dumps writes it, with one field changed and one added.
    let new = br#"{"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": "a"}]}, {"role": "assistant", "content": "b"}], "max_tokens": 7, "metadata": {"user_id": "s"}}"#;
    let out = String::from_utf8(splice(old, new)).unwrap();
    assert_eq!(
        out,
        r#"{"model":"m", "messages":[{"role":"user","content":[{"type":"text","text":"a"}]},{"role":"assistant","content":"b"}],"max_tokens":7,"metadata": {"user_id": "s"}}"#
    );
}

/// A key named in every other member of a long object, edited: every entry of it goes in
/// one pass over the object, not one pass per entry.
#[test]
fn a_key_named_many_times_is_edited_in_one_pass() {
    let n = 20_000;
    let members: Vec<String> = (0..n)
        .map(|i| format!(r#""{}":{i}"#, if i % 2 == 0 { "a" } else { "b" }))
        .collect();
    let body = format!("{{{}}}", members.join(","));
    for op in [
        json!({"op": "remove", "path": "/a"}),
        json!({"op": "replace", "path": "/a", "value": 0}),
    ] {
        let ops: json_patch::Patch = serde_json::from_value(json!([op])).unwrap();
        let mut doc = super::doc::Doc::new(body.clone().into_bytes());
        super::patch::apply_to(&mut doc, &ops).unwrap();
        assert!(
            doc.moved <= 2 * body.len(),
            "{} bytes moved for {}",
            doc.moved,
            body.len()
        );
        let mut expected: Value = serde_json::from_str(&body).unwrap();
        let mut theirs = expected.clone();
        json_patch::patch_unsafe(&mut theirs, &ops).unwrap();
        expected = theirs;
        assert_eq!(
            serde_json::from_slice::<Value>(&doc.bytes).unwrap(),
            expected
        );
    }
    let mut bytes = body.clone().into_bytes();
    super::retain_members(&mut bytes, |k| k != "b");
    assert_eq!(
        serde_json::from_slice::<Value>(&bytes).unwrap(),
        json!({"a": n - 2})
    );
}
