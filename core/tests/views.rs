//! Tool views over the example manifests: candidates, policy filter, ranking, reasons, adapters
//! (the golden prompts of tests/golden/tool-selection.yaml are in review/tests/golden.rs).

mod support;

use std::collections::BTreeMap;

use serde_json::Value;
use support::{example_registry, now};
use toolgate_core::principal::Principal;
use toolgate_core::registry::Registry;
use toolgate_core::view::{ApprovalHint, ToolView, ViewFormat, ViewRequest, compile_view};
use toolgate_crds::ActionType;

const FIXER: &str = "system:serviceaccount:team-a:fixer";

fn view(
    r: &Registry,
    principal: &Principal,
    intent: &str,
    action: Option<ActionType>,
    max: usize,
    explain: bool,
    failures: &BTreeMap<String, u32>,
) -> ToolView {
    compile_view(
        r,
        &ViewRequest {
            namespace: "team-a",
            principal,
            intent,
            action_type: action,
            domains: &[],
            max_tools: max,
            recent_failures: failures,
            explain,
            now: now(),
            usage: &Default::default(),
        },
    )
}

fn names(v: &ToolView) -> Vec<&str> {
    v.exposed.iter().map(|t| t.name.as_str()).collect()
}

#[test]
fn every_exposed_tool_has_a_reason_and_every_hidden_one_a_decision() {
    let r = example_registry();
    let none = BTreeMap::new();
    let v = view(
        &r,
        &Principal::new(FIXER),
        "fix the failing date test in serializer.ts",
        None,
        3,
        true,
        &none,
    );
    assert_eq!(v.exposed.len(), 3);
    assert_eq!(
        v.exposed.len() + v.hidden.len(),
        10,
        "every tool of the namespace is accounted for"
    );
    for t in &v.exposed {
        assert!(
            t.reason.starts_with("granted by fixer-agent")
                || t.reason.starts_with("granted by fixer-skills"),
            "{}: {}",
            t.name,
            t.reason
        );
    }
    for h in &v.hidden {
        assert!(!h.reason.is_empty());
        // The reviewer subagent is told not to be used for running tests ("test" is in the
        // intent); every other tool is ranked out, or not described by any word of the intent
        // (a view is not filled with tools that fit nothing).
        if h.name == "review.delegate" {
            assert_eq!(h.code, "negative-match", "{h:?}");
        } else {
            assert!(h.code == "ranked-out" || h.code == "no-match", "{h:?}");
        }
    }
}

#[test]
fn the_policy_filter_hides_what_the_principal_may_not_use() {
    let r = example_registry();
    let none = BTreeMap::new();
    let alice = Principal::new("alice@example.com");
    let v = view(&r, &alice, "look at the serializer", None, 10, true, &none);
    let mut exposed = names(&v);
    exposed.sort();
    // The reviewers' selector grant (read, search, inspect up to L1) matches the example skill's
    // search tool as it matches any other: a skill's tool is granted like any tool.
    assert_eq!(
        exposed,
        vec!["code.search", "file.read", "fix-failing-test.locate-test"]
    );
    let hidden: BTreeMap<&str, &str> = v.hidden.iter().map(|h| (h.name.as_str(), h.code)).collect();
    // Granted, but no word of the intent describes it: not in the view, and said why.
    assert_eq!(hidden.get("git.diff"), Some(&"no-match"));
    assert_eq!(hidden.get("file.write"), Some(&"no-grant"));
    assert_eq!(
        hidden.get("web.fetch"),
        Some(&"no-grant"),
        "L3 is above the reviewers' maxTier L1"
    );
    assert_eq!(hidden.get("github.create-issue"), Some(&"no-grant"));

    let stranger = Principal::new("system:serviceaccount:team-a:stranger");
    let v = view(&r, &stranger, "anything", None, 10, true, &none);
    assert!(v.exposed.is_empty());
    assert!(
        v.hidden.iter().all(|h| h.code == "no-grant"),
        "{:#?}",
        v.hidden
    );
}

#[test]
fn candidates_by_action_type() {
    let r = example_registry();
    let none = BTreeMap::new();
    let v = view(
        &r,
        &Principal::new(FIXER),
        "fix it",
        Some(ActionType::Write),
        10,
        true,
        &none,
    );
    assert_eq!(names(&v), vec!["file.write"]);
    assert_eq!(
        v.hidden
            .iter()
            .filter(|h| h.code == "action-type-mismatch")
            .count(),
        9
    );
    // Without explain, non-candidates cost nothing and are not listed.
    let v = view(
        &r,
        &Principal::new(FIXER),
        "fix it",
        Some(ActionType::Write),
        10,
        false,
        &none,
    );
    assert!(v.hidden.is_empty());
}

#[test]
fn approval_hints_and_negative_hints_and_failures() {
    let r = example_registry();
    let none = BTreeMap::new();
    let v = view(
        &r,
        &Principal::new(FIXER),
        "file an issue on github",
        None,
        10,
        false,
        &none,
    );
    let issue = v
        .exposed
        .iter()
        .find(|t| t.name == "github.create-issue")
        .expect("exposed");
    assert_eq!(issue.approval, ApprovalHint::Required);
    assert!(
        issue.reason.contains("L4 calls need approval"),
        "{}",
        issue.reason
    );
    let read = v
        .exposed
        .iter()
        .find(|t| t.name == "file.read")
        .expect("exposed");
    assert_eq!(read.approval, ApprovalHint::None);

    // "deleting files" is in file.write's do-not-use-when.
    let v = view(
        &r,
        &Principal::new(FIXER),
        "deleting files",
        None,
        10,
        false,
        &none,
    );
    assert!(
        v.hidden
            .iter()
            .any(|h| h.name == "file.write" && h.code == "negative-match"),
        "{:#?}",
        v.hidden
    );

    let intent = "show me the contents of src/serializer.ts";
    let top = view(&r, &Principal::new(FIXER), intent, None, 1, false, &none).exposed[0]
        .name
        .clone();
    let failures = BTreeMap::from([(top.clone(), 5u32)]);
    let after = view(
        &r,
        &Principal::new(FIXER),
        intent,
        None,
        1,
        false,
        &failures,
    )
    .exposed[0]
        .name
        .clone();
    assert_ne!(top, after, "recent failures lower a tool's rank");
}

#[test]
fn provider_payloads_carry_only_what_the_provider_expects() {
    let r = example_registry();
    let none = BTreeMap::new();
    let v = view(&r, &Principal::new(FIXER), "", None, 10, false, &none);
    let name_re = regex::Regex::new("^[a-zA-Z0-9_-]{1,64}$").expect("re");

    for tool in v.render(ViewFormat::OpenAi).as_array().expect("array") {
        let mut keys: Vec<&str> = tool
            .as_object()
            .expect("obj")
            .keys()
            .map(String::as_str)
            .collect();
        keys.sort();
        assert_eq!(keys, vec!["function", "type"]);
        let f = tool["function"].as_object().expect("function");
        let mut fk: Vec<&str> = f.keys().map(String::as_str).collect();
        fk.sort();
        assert_eq!(fk, vec!["description", "name", "parameters"]);
        let name = f["name"].as_str().expect("name");
        assert!(name_re.is_match(name), "{name}");
        assert_eq!(
            v.resolve(name).map(|t| t.canonical_name.as_str()),
            Some(name.replace("__", ".").as_str()),
            "reversible"
        );
    }
    // The Responses API's flat shape: the same name and schema, no `function` wrapper.
    let chat = v.render(ViewFormat::OpenAi);
    for (tool, chat) in v
        .render(ViewFormat::OpenAiResponses)
        .as_array()
        .expect("array")
        .iter()
        .zip(chat.as_array().expect("array"))
    {
        let mut keys: Vec<&str> = tool
            .as_object()
            .expect("obj")
            .keys()
            .map(String::as_str)
            .collect();
        keys.sort();
        assert_eq!(
            keys,
            vec!["description", "name", "parameters", "strict", "type"]
        );
        assert_eq!(tool["type"], "function");
        assert_eq!(tool["name"], chat["function"]["name"]);
        assert_eq!(tool["parameters"], chat["function"]["parameters"]);
    }
    for tool in v.render(ViewFormat::Anthropic).as_array().expect("array") {
        let mut keys: Vec<&str> = tool
            .as_object()
            .expect("obj")
            .keys()
            .map(String::as_str)
            .collect();
        keys.sort();
        assert_eq!(keys, vec!["description", "input_schema", "name"]);
        assert!(name_re.is_match(tool["name"].as_str().expect("name")));
    }
    let mcp = v.render(ViewFormat::Mcp);
    let by_name = |n: &str| {
        mcp.as_array()
            .expect("a")
            .iter()
            .find(|t| t["name"] == n)
            .cloned()
            .expect(n)
    };
    assert_eq!(
        by_name("file.delete")["annotations"]["destructiveHint"],
        true
    );
    assert_eq!(by_name("file.read")["annotations"]["readOnlyHint"], true);
    assert_eq!(
        by_name("file.read")["annotations"]["destructiveHint"],
        false
    );
    assert_eq!(by_name("web.fetch")["annotations"]["openWorldHint"], true);
    assert_eq!(by_name("file.write")["annotations"]["idempotentHint"], true);

    // Descriptions carry use-when, do-not-use-when and the approval hint.
    let desc = by_name("github.create-issue")["description"]
        .as_str()
        .expect("d")
        .to_string();
    assert!(
        desc.contains("Use when:")
            && desc.contains("Do not use when:")
            && desc.contains("approval"),
        "{desc}"
    );

    // Internal fields never reach a provider payload.
    for format in [
        ViewFormat::OpenAi,
        ViewFormat::OpenAiResponses,
        ViewFormat::Anthropic,
        ViewFormat::Mcp,
    ] {
        let text = v.render(format).to_string();
        for internal in [
            "sha256:",
            "fixer-agent",
            "github-issues-bot",
            "team-a/",
            "riskTier",
            "sandboxPolicyRef",
        ] {
            assert!(!text.contains(internal), "{format:?} leaks {internal:?}");
        }
    }
    let canonical: Value = v.render(ViewFormat::Canonical);
    assert!(
        canonical.to_string().contains("sha256:"),
        "the canonical form pins the version"
    );
}

/// Past the small-set threshold a view is scored through the term index and visited only until
/// it is full; it must expose exactly what a full evaluation (explain) exposes.
#[test]
fn large_candidate_sets_rank_like_a_full_evaluation() {
    let mut docs = support::examples();
    let template = docs
        .iter()
        .find(|d| d.value["metadata"]["name"] == "file.read")
        .expect("file.read")
        .value
        .clone();
    let words = [
        "ledger",
        "invoice",
        "report",
        "schema",
        "config",
        "readme",
        "changelog",
        "fixture",
    ];
    for i in 0..150 {
        let mut d = template.clone();
        let name = format!("gen.read-{i:03}");
        d["metadata"]["name"] = Value::from(name.clone());
        d["spec"]["canonicalName"] = Value::from(name);
        d["spec"]["description"]["summary"] = Value::from(format!(
            "Read one {} file number {i}",
            words[i % words.len()]
        ));
        if i % 7 == 0 {
            d["spec"]["description"]["doNotUseWhen"] =
                serde_json::json!(["reading invoice drafts"]);
        }
        if i % 11 == 0 {
            d["spec"]["disabled"] = Value::Bool(true);
        }
        docs.push(toolgate_core::manifest::RawManifest {
            origin: toolgate_core::manifest::Origin {
                source: format!("gen-{i}"),
                document: 0,
            },
            value: d,
        });
    }
    // A selector grant: every read tool, so the candidate set is large.
    docs.push(toolgate_core::manifest::RawManifest {
        origin: toolgate_core::manifest::Origin { source: "gen-grant".into(), document: 0 },
        value: serde_json::json!({"apiVersion": "toolgate.dev/v1alpha1", "kind": "ToolGrant",
            "metadata": {"name": "readers", "namespace": "team-a"},
            "spec": {"subjects": [{"kind": "User", "name": "reader"}], "tools": {"selector": {"actionTypes": ["read"]}}, "scopes": ["workspace:read", "web:fetch"]}}),
    });
    let report = support::linter().lint(docs, now());
    let r = Registry::from_objects(&report.objects);
    let reader = Principal::new("reader");
    let failures = BTreeMap::from([("gen.read-003".to_string(), 2u32)]);
    for intent in [
        "read the ledger file",
        "invoice report",
        "the changelog",
        "reading invoice drafts",
        "",
    ] {
        let fast = view(
            &r,
            &reader,
            intent,
            Some(ActionType::Read),
            5,
            false,
            &failures,
        );
        let full = view(
            &r,
            &reader,
            intent,
            Some(ActionType::Read),
            5,
            true,
            &failures,
        );
        assert_eq!(names(&fast), names(&full), "{intent:?}");
        assert_eq!(fast.exposed.len(), 5);
        assert!(fast.not_ranked > 0, "the fast path stops early");
        assert_eq!(full.not_ranked, 0);
    }
}
