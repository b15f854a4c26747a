//! The fast request-body check against serde_json, on generated JSON and on the same JSON
//! damaged at random: both accept exactly the same UTF-8 bodies, the fast check never
//! accepts invalid UTF-8, and the top-level fields it reports are the object's own.

use cachet::json::check as json_check;
use proptest::prelude::*;
use serde::de::IgnoredAny;

/// Characters that matter to a JSON scanner, and plain text around them; long strings make
/// the scanner cross its 16- and 32-byte blocks.
fn string_text() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop_oneof![
            4 => "[a-z ]{1,40}",
            1 => Just("\"".to_string()),
            1 => Just("\\".to_string()),
            1 => Just("\n".to_string()),
            1 => Just("é漢🦀".to_string()),
            1 => Just("\u{1}".to_string()),
            1 => Just("/".to_string()),
        ],
        0..12,
    )
    .prop_map(|parts| parts.concat())
}

fn json_value() -> impl Strategy<Value = serde_json::Value> {
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::Bool),
        any::<i64>().prop_map(|n| n.into()),
        (-1e12f64..1e12).prop_map(|f| serde_json::json!(f)),
        string_text().prop_map(serde_json::Value::String),
    ];
    leaf.prop_recursive(4, 40, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(serde_json::Value::Array),
            prop::collection::vec(("[a-z]{1,8}", inner), 0..6)
                .prop_map(|kv| serde_json::Value::Object(kv.into_iter().collect())),
        ]
    })
}

/// A document as text, compact or pretty.
fn document() -> impl Strategy<Value = Vec<u8>> {
    (json_value(), any::<bool>()).prop_map(|(v, pretty)| {
        if pretty {
            serde_json::to_vec_pretty(&v).unwrap()
        } else {
            serde_json::to_vec(&v).unwrap()
        }
    })
}

#[derive(Debug, Clone)]
enum Damage {
    Delete(usize),
    Insert(usize, u8),
    Replace(usize, u8),
}

fn damage() -> impl Strategy<Value = Damage> {
    let byte = prop_oneof![
        prop::sample::select(b"{}[]:,\"\\ \n\t0-.eE+tfnux\x01\x1f\x7f".to_vec()),
        any::<u8>(),
    ];
    prop_oneof![
        any::<usize>().prop_map(Damage::Delete),
        (any::<usize>(), byte.clone()).prop_map(|(i, b)| Damage::Insert(i, b)),
        (any::<usize>(), byte).prop_map(|(i, b)| Damage::Replace(i, b)),
    ]
}

fn apply(mut doc: Vec<u8>, damage: &[Damage]) -> Vec<u8> {
    for d in damage {
        let len = doc.len();
        match *d {
            Damage::Delete(i) if len > 0 => {
                doc.remove(i % len);
            }
            Damage::Insert(i, b) => doc.insert(i % (len + 1), b),
            Damage::Replace(i, b) if len > 0 => doc[i % len] = b,
            _ => {}
        }
    }
    doc
}

fn agree(body: &[u8]) -> Result<(), TestCaseError> {
    let fast = json_check::check(body, |_| {}).is_ok();
    if std::str::from_utf8(body).is_err() {
        prop_assert!(!fast, "accepted invalid UTF-8: {:?}", body);
    } else {
        let serde = serde_json::from_slice::<IgnoredAny>(body).is_ok();
        prop_assert_eq!(fast, serde, "{}", String::from_utf8_lossy(body));
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, .. ProptestConfig::default() })]

    #[test]
    fn generated_documents_are_valid_and_their_fields_are_reported(doc in document()) {
        let mut fields = Vec::new();
        prop_assert!(json_check::check(&doc, |f| fields.push(f)).is_ok());
        let value: serde_json::Value = serde_json::from_slice(&doc).unwrap();
        if let serde_json::Value::Object(map) = value {
            prop_assert_eq!(fields.len(), map.len());
            for (field, (key, value)) in fields.iter().zip(&map) {
                prop_assert_eq!(&doc[field.key.clone()], key.as_bytes());
                let reported: serde_json::Value =
                    serde_json::from_slice(&doc[field.value.clone()]).unwrap();
                prop_assert_eq!(&reported, value);
            }
        } else {
            prop_assert!(fields.is_empty());
        }
    }

    #[test]
    fn damaged_documents_are_judged_as_serde_json_judges_them(
        doc in document(),
        damage in prop::collection::vec(damage(), 1..4),
    ) {
        agree(&apply(doc, &damage))?;
    }

    #[test]
    fn arbitrary_bytes_are_judged_as_serde_json_judges_them(
        body in prop::collection::vec(
            prop::sample::select(b"{}[]:,\"\\ \n0123456789-.eEtruefalsnl\x01\xc3\xa9".to_vec()),
            0..40,
        ),
    ) {
        agree(&body)?;
    }
}
