//! Properties of argv rendering over arbitrary args: it never panics, a rendered value is never
//! split or joined, and no value becomes an option before a literal `--`.

use proptest::prelude::*;
use serde_json::{Value, json};
use toolgate_executor::render::{render_argv, render_url};

fn value() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        "\\PC{0,24}".prop_map(Value::String),
        prop_oneof![
            Just("-rf"),
            Just("--output=/tmp/x"),
            Just("; rm -rf /"),
            Just("$(id)"),
            Just("../../etc/passwd"),
            Just("a\u{0}b"),
            Just(".."),
            Just("-")
        ]
        .prop_map(|s| Value::String(s.into())),
        prop::collection::vec("\\PC{0,8}".prop_map(Value::String), 0..4).prop_map(Value::Array),
        Just(json!({"nested": true})),
    ]
}

fn template() -> impl Strategy<Value = Vec<String>> {
    let element = prop_oneof![
        Just("{{a}}".to_string()),
        Just("{{b?}}".to_string()),
        Just("--flag={{a}}".to_string()),
        Just("x{{b}}y".to_string()),
        Just("--".to_string()),
        Just("-v".to_string()),
        Just("literal".to_string()),
        "[a-z0-9 ;$()./]{0,6}".prop_map(|s| format!("x{s}")),
    ];
    prop::collection::vec(element, 1..6)
}

proptest! {
    #[test]
    fn rendering_is_total_and_never_makes_options_from_values(t in template(), a in value(), b in value()) {
        let args = json!({"a": a, "b": b});
        if let Ok(argv) = render_argv(&t, &args) {
            // Literals here never start with '-' except `-v`, `--flag=…` and `--`; so before a
            // `--`, anything else starting with '-' would be a value turned into an option.
            let ended_at = t.iter().position(|e| e == "--");
            let limit = match ended_at {
                // Elements before the `--` literal: it renders as itself, so find it in the output.
                Some(_) => argv.iter().position(|e| e == "--").unwrap_or(argv.len()),
                None => argv.len(),
            };
            for (i, e) in argv[..limit].iter().enumerate() {
                // The one value right after the literal option `-v` is that option's argument.
                let argument_of_v = i > 0 && argv[i - 1] == "-v";
                if e.starts_with('-') && !argument_of_v {
                    prop_assert!(e == "-v" || e.starts_with("--flag="), "value became an option: {e:?} in {argv:?} from {t:?}");
                }
            }
            for e in &argv {
                prop_assert!(!e.contains('\0'));
            }
        }
    }

    #[test]
    fn urls_never_gain_structure_from_values(a in value()) {
        if let Ok(url) = render_url("https://api.example.com/x/{{a}}/y", &json!({"a": a})) {
            let tail = &url["https://api.example.com/x/".len()..];
            prop_assert!(tail.ends_with("/y"));
            let segment = &tail[..tail.len() - 2];
            prop_assert!(!segment.contains(['/', '?', '#']), "{url}");
            prop_assert!(segment != "." && segment != ".." && segment != "%2E%2E");
        }
    }
}
