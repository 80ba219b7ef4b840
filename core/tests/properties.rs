//! Properties of digests and redaction.

use proptest::prelude::*;
use serde_json::{Map, Value};
use toolgate_core::digest::{args_digest, canonical_json, canonical_value, json_digest};
use toolgate_core::redact::Redactor;

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i32>().prop_map(Value::from),
        (-1.0e9f64..1.0e9)
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        "[a-z é😀\"\\\\]{0,12}".prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 5, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::btree_map("[a-z]{1,6}", inner, 0..5)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Values that reach every corner of RFC 8785: integers past 2^53, doubles of every magnitude,
/// control characters, property names whose UTF-16 order differs from their UTF-8 order
/// (U+E000–U+FFFF against characters past U+FFFF).
fn wide_json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>()
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        "[\\x00-\\x1f\"\\\\/a-z\u{7f}\u{e000}\u{fffd}\u{ffff}\u{10000}😀]{0,8}"
            .prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 32, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec(
                ("[a-z\u{e000}\u{fffd}\u{ffff}\u{10000}😀\n]{0,3}", inner),
                0..6
            )
            .prop_map(|props| Value::Object(props.into_iter().collect())),
        ]
    })
}

/// The same value with every object's keys in reverse order.
fn reorder(v: &Value) -> Value {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.reverse();
            let mut out = Map::new();
            for k in keys {
                out.insert(k.clone(), reorder(&m[k]));
            }
            Value::Object(out)
        }
        Value::Array(a) => Value::Array(a.iter().map(reorder).collect()),
        other => other.clone(),
    }
}

/// Change one leaf of the value (the first found, depth-first).
fn change_one_leaf(v: &mut Value) -> bool {
    match v {
        Value::Object(m) => m.values_mut().any(change_one_leaf),
        Value::Array(a) => a.iter_mut().any(change_one_leaf),
        Value::Null => {
            *v = Value::Bool(false);
            true
        }
        Value::Bool(b) => {
            *b = !*b;
            true
        }
        Value::Number(n) => {
            *v = Value::from(n.as_f64().unwrap_or(0.0) + 1.0);
            true
        }
        Value::String(s) => {
            s.push('x');
            true
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]
    /// The args digest's own canonical writer gives exactly what the canonicalizer crate does.
    #[test]
    fn the_args_canonical_form_is_the_crates(v in wide_json_value()) {
        let ours = canonical_value(&v).unwrap();
        let crates = canonical_json(&v).unwrap();
        prop_assert_eq!(String::from_utf8(ours).unwrap(), String::from_utf8(crates).unwrap());
        prop_assert_eq!(args_digest(&v).unwrap(), json_digest(&v).unwrap());
    }
}

proptest! {
    #[test]
    fn digest_ignores_key_order_and_whitespace(v in json_value()) {
        let d = json_digest(&v).unwrap();
        prop_assert_eq!(&d, &json_digest(&reorder(&v)).unwrap());
        let pretty: Value = serde_json::from_str(&serde_json::to_string_pretty(&v).unwrap()).unwrap();
        prop_assert_eq!(&d, &json_digest(&pretty).unwrap());
    }

    #[test]
    fn digest_changes_with_any_value(v in json_value()) {
        let mut changed = v.clone();
        if change_one_leaf(&mut changed) && changed != v {
            prop_assert_ne!(json_digest(&v).unwrap(), json_digest(&changed).unwrap());
        }
    }

    #[test]
    fn streamed_redaction_never_leaks_and_matches_one_shot(
        before in "[a-z \n]{0,6000}",
        after in "[a-z \n]{0,300}",
        cuts in prop::collection::vec(0usize..7000, 0..6),
    ) {
        let canary = "Canary-Secret-91c2";
        let r = Redactor::new([canary]);
        let text = format!("{before}{canary}{after}{canary}");
        let bytes = text.as_bytes();
        let mut points: Vec<usize> = cuts.into_iter().map(|c| c.min(bytes.len())).collect();
        points.sort_unstable();
        let mut s = r.stream();
        let mut out = Vec::new();
        let mut at = 0;
        for p in points {
            out.extend(s.push(&bytes[at..p]));
            at = p;
        }
        out.extend(s.push(&bytes[at..]));
        out.extend(s.finish());
        let out = String::from_utf8(out).unwrap();
        prop_assert!(!out.contains(canary));
        prop_assert_eq!(out, r.redact_str(&text));
    }
}

proptest! {
    /// Any bytes, any known values, any chunking: the redactor never panics and the stream says
    /// what one pass says.
    #[test]
    fn redaction_of_arbitrary_bytes_never_panics_and_streams_alike(
        text in prop::collection::vec(any::<u8>(), 0..12000),
        secrets in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..40), 0..3),
        chunk in 1usize..3000,
    ) {
        let r = Redactor::new(&secrets);
        let mut s = r.stream();
        let mut out = Vec::new();
        for piece in text.chunks(chunk) {
            out.extend(s.push(piece));
        }
        out.extend(s.finish());
        prop_assert_eq!(out, r.redact_bytes(&text));
    }
}
