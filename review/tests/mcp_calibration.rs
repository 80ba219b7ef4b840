//! Real MCP servers' tool lists (tests/golden/mcp), imported as a platform team imports them:
//! the gates fit what their authors declared, and their descriptions are not mistaken for
//! poisoning.

#[path = "../../core/tests/support/mod.rs"]
mod support;

use std::collections::BTreeMap;

use serde_json::Value;
use toolgate_core::decision::approval_needed;
use toolgate_core::principal::Principal;
use toolgate_core::registry::Registry;
use toolgate_crds::{RiskTier, StrongConfirmation, TrustLevel};

/// Every saved list, by server name.
fn lists() -> Vec<(String, Vec<Value>)> {
    let dir = support::root().join("tests/golden/mcp");
    let mut out = Vec::new();
    for entry in std::fs::read_dir(&dir).expect("lists") {
        let path = entry.expect("entry").path();
        if path.extension().is_some_and(|e| e == "json") {
            let text = std::fs::read_to_string(&path).expect("read");
            let tools = toolgate_core::mcp::parse_list(&text).expect("a tools/list answer");
            let server = path
                .file_stem()
                .expect("stem")
                .to_string_lossy()
                .into_owned();
            out.push((server, tools));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    assert!(out.len() >= 10, "{} servers", out.len());
    out
}

fn imported(trust: TrustLevel) -> (Registry, Vec<toolgate_core::lint::Finding>) {
    let principal = Principal::new("system:serviceaccount:team-a:fixer");
    let (docs, refused) =
        toolgate_review::eval::imported_servers(&lists(), "team-a", &principal, trust);
    assert!(refused.is_empty(), "{refused:?}");
    let report = support::linter().lint(docs, support::now());
    (Registry::from_objects(&report.objects), report.findings)
}

/// The annotations each server gave each tool, by descriptor name.
fn annotations() -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    for (server, tools) in lists() {
        for t in tools {
            let name = t["name"].as_str().expect("name").to_lowercase();
            let safe: String = name
                .chars()
                .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
                .collect();
            out.insert(format!("{server}.{safe}"), t["annotations"].clone());
        }
    }
    out
}

#[test]
fn first_party_reads_never_wait_for_a_human_and_only_declared_destruction_needs_two() {
    let (registry, findings) = imported(TrustLevel::FirstParty);
    let errors: Vec<_> = findings
        .iter()
        .filter(|f| f.severity == toolgate_core::lint::Severity::Error)
        .collect();
    assert!(errors.is_empty(), "{errors:#?}");
    let hints = annotations();
    let grant = registry
        .grants()
        .find(|g| g.name == toolgate_review::eval::IMPORTED)
        .expect("grant");
    let (mut reads, mut writers, mut destroyers) = (0, 0, 0);
    for tool in registry.tools_in("team-a") {
        assert!(tool.is_callable(), "{}: {:?}", tool.name, tool.findings);
        let a = hints.get(&tool.name).expect("hints");
        let (needs, why) = approval_needed(tool, &grant.spec, false);
        let two = needs
            && tool.tier == RiskTier::L5
            && why.also_needs == Some(StrongConfirmation::SecondApprover);
        if a["readOnlyHint"] == Value::Bool(true) {
            reads += 1;
            assert!(
                !needs,
                "{} is read-only and waits for a human: {:?}",
                tool.name, tool.tier
            );
        }
        if a["destructiveHint"] == Value::Bool(true) && a["readOnlyHint"] != Value::Bool(true) {
            destroyers += 1;
            assert!(two, "{} is declared destructive", tool.name);
        } else {
            writers += usize::from(a["readOnlyHint"] != Value::Bool(true));
            assert!(
                !two,
                "{} needs two approvers, not declared destructive",
                tool.name
            );
            assert!(
                !tool
                    .spec
                    .intent
                    .action_types
                    .contains(&toolgate_crds::ActionType::Delete),
                "{} is called a deletion",
                tool.name
            );
        }
    }
    assert!(
        reads > 100 && writers > 50 && destroyers > 20,
        "{reads} {writers} {destroyers}"
    );
}

#[test]
fn third_party_servers_keep_every_tool_at_the_top_gate_and_lose_none_to_routing_advice() {
    let (registry, findings) = imported(TrustLevel::ThirdParty);
    // GitHub's routing advice ("always call this tool when…", "pass the token name(s) in the
    // parameter") is not instruction-like text: no tool of any server is held back for it.
    let flagged: Vec<_> = findings
        .iter()
        .filter(|f| f.code == toolgate_core::lint::poisoning::CODE)
        .map(|f| format!("{f}"))
        .collect();
    assert!(flagged.is_empty(), "{flagged:#?}");
    for tool in registry.tools_in("team-a") {
        assert_eq!(tool.tier, RiskTier::L5, "{}", tool.name);
        assert_eq!(
            tool.spec.permissions.approval_policy,
            toolgate_crds::ApprovalPolicy::Always,
            "{}",
            tool.name
        );
    }
}

#[test]
fn a_grant_selects_every_tool_of_a_server_by_its_label_beyond_the_name_limit() {
    let principal = Principal::new("system:serviceaccount:team-a:fixer");
    let github: Vec<_> = lists().into_iter().filter(|(s, _)| s == "github").collect();
    let count = github[0].1.len();
    assert!(count > 100, "{count}");
    let view_size = |server: &str| {
        let (mut docs, _) = toolgate_review::eval::imported_servers(
            &github,
            "team-a",
            &principal,
            TrustLevel::FirstParty,
        );
        let grant = docs
            .iter_mut()
            .find(|d| d.value["kind"] == "ToolGrant")
            .expect("grant");
        grant.value["spec"]["tools"] = serde_json::json!({
            "selector": {"matchLabels": {toolgate_core::mcp::SERVER_LABEL: server}}
        });
        let report = support::linter().lint(docs, support::now());
        let registry = Registry::from_objects(&report.objects);
        let none = BTreeMap::new();
        toolgate_core::view::compile_view(
            &registry,
            &toolgate_core::view::ViewRequest {
                namespace: "team-a",
                principal: &principal,
                intent: "",
                action_type: None,
                domains: &[],
                max_tools: 256,
                recent_failures: &none,
                explain: false,
                now: support::now(),
                usage: &Default::default(),
            },
        )
        .exposed
        .len()
    };
    assert_eq!(view_size("github"), count);
    assert_eq!(view_size("gitlab"), 0);
}
