//! The golden prompts of tests/golden/tool-selection.yaml, read by the eval's parser: each one's
//! expected tool ranks first in the view over the example manifests.

#[path = "../../core/tests/support/mod.rs"]
mod support;

use std::collections::BTreeMap;

use support::{example_registry, now, root};
use toolgate_core::principal::Principal;
use toolgate_core::view::{ViewRequest, compile_view};

const FIXER: &str = "system:serviceaccount:team-a:fixer";

#[test]
fn golden_prompts_select_the_expected_tool() {
    let r = example_registry();
    let none = BTreeMap::new();
    let text =
        std::fs::read_to_string(root().join("tests/golden/tool-selection.yaml")).expect("golden");
    let cases = toolgate_review::eval::parse_prompts(&text, "tool-selection.yaml").expect("golden");
    assert!(cases.len() >= 8);
    let mut misses = Vec::new();
    for c in &cases {
        let principal = Principal::new(FIXER);
        let v = compile_view(
            &r,
            &ViewRequest {
                namespace: "team-a",
                principal: &principal,
                intent: &c.intent,
                action_type: c.action_type,
                domains: &[],
                max_tools: 3,
                recent_failures: &none,
                explain: false,
                now: now(),
                usage: &Default::default(),
            },
        );
        let got = v
            .exposed
            .first()
            .map(|t| t.name.as_str())
            .unwrap_or("<none>");
        let top = c.expect.first().map(String::as_str).unwrap_or("<none>");
        if got != top {
            misses.push(format!(
                "{:?}: expected {}, got {} ({:?})",
                c.intent,
                top,
                got,
                v.exposed
                    .iter()
                    .map(|t| t.name.as_str())
                    .collect::<Vec<_>>()
            ));
        }
    }
    assert!(misses.is_empty(), "{misses:#?}");
}
