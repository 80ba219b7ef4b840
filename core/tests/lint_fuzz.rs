//! Property tests: lint and args validation never panic, whatever the input, and every finding
//! they produce says where and what.

mod support;

use std::sync::OnceLock;

use proptest::prelude::*;
use serde_json::Value;
use support::{linter, now};
use toolgate_core::args::{ArgsLimits, validate_args};
use toolgate_core::lint::parse_yaml;
use toolgate_core::manifest::RawManifest;

fn examples() -> &'static Vec<RawManifest> {
    static E: OnceLock<Vec<RawManifest>> = OnceLock::new();
    E.get_or_init(support::examples)
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        ".{0,40}".prop_map(Value::String),
        prop_oneof![
            Just("low"),
            Just("always"),
            Just("read"),
            Just("2026-01-01T00:00:00Z"),
            Just("{{path}}")
        ]
        .prop_map(|s| Value::String(s.into())),
    ];
    leaf.prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map("[a-zA-Z]{1,12}", inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Every node of a JSON value, as pointers.
fn pointers(v: &Value, base: String, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, c) in m {
                let p = format!("{base}/{}", k.replace('~', "~0").replace('/', "~1"));
                out.push(p.clone());
                pointers(c, p, out);
            }
        }
        Value::Array(a) => {
            for (i, c) in a.iter().enumerate() {
                let p = format!("{base}/{i}");
                out.push(p.clone());
                pointers(c, p, out);
            }
        }
        _ => {}
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, .. ProptestConfig::default() })]

    #[test]
    fn arbitrary_text_never_panics(text in ".{0,400}") {
        let (docs, _) = parse_yaml("fuzz.yaml", &text);
        let report = linter().lint(docs, now());
        for f in &report.findings {
            prop_assert!(!f.message.is_empty());
        }
    }

    #[test]
    fn arbitrary_documents_never_panic(docs in prop::collection::vec(json_value(), 0..4)) {
        let raws = docs.into_iter().enumerate().map(|(i, value)| RawManifest {
            origin: toolgate_core::manifest::Origin { source: "fuzz.yaml".into(), document: i }, value,
        }).collect();
        linter().lint(raws, now());
    }

    /// Replace one node of one example with arbitrary JSON: lint reports, never panics, and
    /// every error names the object it is about.
    #[test]
    fn mutated_examples_never_panic(doc_index in 0usize..22, node in any::<prop::sample::Index>(), value in json_value()) {
        let mut docs = examples().clone();
        let n = docs.len();
        let doc = &mut docs[doc_index % n];
        let mut ptrs = Vec::new();
        pointers(&doc.value, String::new(), &mut ptrs);
        let target = ptrs[node.index(ptrs.len())].clone();
        if let Some(slot) = doc.value.pointer_mut(&target) {
            *slot = value;
        }
        let report = linter().lint(docs, now());
        for f in &report.findings {
            prop_assert!(!f.message.is_empty() && !f.code.is_empty());
        }
    }

    #[test]
    fn args_validation_never_panics(schema in json_value(), args in json_value()) {
        let report = validate_args(&schema, &args, &ArgsLimits::default());
        for v in report.violations {
            prop_assert!(!v.message.is_empty());
        }
    }
}

proptest! {
    /// The poisoning scan folds any text (compatibility forms, look-alikes, invisibles) without
    /// panicking.
    #[test]
    fn the_poisoning_scan_takes_any_text(text in "\\PC{0,200}|[\\u{0}-\\u{2FFFF}]{0,100}") {
        let _ = toolgate_core::lint::poisoning::scan(&text);
    }

    /// Whatever a tool prints, what is shown of it has no control character but newline, tab
    /// and a carriage return before a newline, and no hiding character.
    #[test]
    fn shown_text_never_holds_a_control_or_hiding_character(text in "[\\u{0}-\\u{2FFFF}]{0,200}") {
        let shown = toolgate_core::text::neutralise(&text);
        let chars: Vec<char> = shown.chars().collect();
        for (i, c) in chars.iter().enumerate() {
            let allowed = matches!(c, '\n' | '\t') || (*c == '\r' && chars.get(i + 1) == Some(&'\n'));
            prop_assert!(allowed || !c.is_control(), "{:?} in {:?}", c, shown);
            prop_assert!(toolgate_core::text::hidden_kind(*c).is_none(), "{:?} in {:?}", c, shown);
        }
    }

    /// Path normalisation takes any string, never climbs out, and is stable.
    #[test]
    fn path_normalisation_takes_any_string(path in "[a-z./]{0,30}|.{0,30}") {
        if let Some(normal) = toolgate_core::args::normalise_path(&path) {
            prop_assert!(!normal.split('/').any(|s| s == ".."), "{}", normal);
            prop_assert_eq!(toolgate_core::args::normalise_path(&normal), Some(normal.clone()));
        }
        let schema = serde_json::json!({"type": "object", "properties": {"p": {"type": "string", "format": "path"}}});
        let _ = toolgate_core::args::path_violations(&schema, &serde_json::json!({"p": path}), true);
    }
}
