//! ToolPolicies in Cedar over the example manifests: argument conditions (path prefix, enum,
//! number bound, string pattern) allow and deny as written, forbid wins over an approval,
//! shadow mode changes nothing but is visible, type errors fail lint with their position, and a
//! policy that does not compile fails closed.

mod support;

use serde_json::{Value, json};
use support::{examples, linter, now};
use toolgate_core::approval::ApprovalSubject;
use toolgate_core::args::ArgsLimits;
use toolgate_core::decision::{ApprovalEntry, CallUnderReview, Decision, decide_in};
use toolgate_core::lint::{LintReport, Severity, parse_yaml};
use toolgate_core::manifest::RawManifest;
use toolgate_core::principal::Principal;
use toolgate_core::registry::Registry;
use toolgate_core::view::{ViewFormat, ViewRequest, compile_view};
use toolgate_crds::{DecisionOutcome, ToolCallSpec};

const NS: &str = "team-a";
const FIXER: &str = "system:serviceaccount:team-a:fixer";

/// A tool with number args, to bound them.
const REFUND: &str = r#"
apiVersion: toolgate.dev/v1alpha1
kind: ToolDescriptor
metadata: {name: payments.refund, namespace: team-a}
spec:
  canonicalName: payments.refund
  version: "1.0.0"
  source: {type: cli, packageName: coreutils}
  description:
    summary: Refund an order.
    useWhen: ["a customer is owed money back"]
    doNotUseWhen: ["anything else"]
  intent: {actionTypes: [execute], domains: [test]}
  schemas:
    inputSchema:
      type: object
      required: [order, amount]
      additionalProperties: false
      properties:
        order: {type: string, maxLength: 64}
        amount: {type: integer, minimum: 0}
        fee: {type: number}
        notes: {type: object}
  effects: {reads: [], writes: [], externalCalls: false, sendsUserData: false,
            mutatesState: false, idempotent: true, reversible: true, dryRunSupported: false}
  risk: {level: low, destructive: false, openWorld: false}
  permissions: {approvalPolicy: never, requiredScopes: ["workspace:read"]}
  sandboxPolicyRef: {name: read-only}
  contextPolicy: {exposeToModel: true, exposeOutputToModel: full, maxOutputPreviewTokens: 100}
  execution: {adapter: cli, argv: [echo, "{{order}}"], timeoutMs: 1000}
  provenance: {trustLevel: first_party}
---
apiVersion: toolgate.dev/v1alpha1
kind: ToolGrant
metadata: {name: refunds, namespace: team-a}
spec:
  subjects: [{kind: ServiceAccount, name: fixer, namespace: team-a}, {kind: Group, name: contractors}]
  tools: {names: [payments.refund, file.write]}
  scopes: ["workspace:read", "workspace:write"]
"#;

fn policy(name: &str, mode: &str, text: &str) -> String {
    let indented: String = text.lines().map(|l| format!("    {l}\n")).collect();
    format!(
        "apiVersion: toolgate.dev/v1alpha1\nkind: ToolPolicy\nmetadata: {{name: {name}, namespace: team-a}}\nspec:\n  mode: {mode}\n  description: a test policy\n  policies: |\n{indented}"
    )
}

fn docs(extra: &[String]) -> Vec<RawManifest> {
    let mut docs = examples();
    // The example calls and approval are not part of these decisions, nor are the example
    // ToolPolicies (their own test below): each test brings its policies.
    docs.retain(|d| {
        !["ToolCall", "ToolApproval", "ToolPolicy"]
            .contains(&d.value["kind"].as_str().unwrap_or(""))
    });
    let (refund, findings) = parse_yaml("refund.yaml", REFUND);
    assert!(findings.is_empty(), "{findings:#?}");
    docs.extend(refund);
    for (i, e) in extra.iter().enumerate() {
        let (d, findings) = parse_yaml(&format!("policy-{i}.yaml"), e);
        assert!(findings.is_empty(), "{findings:#?}");
        docs.extend(d);
    }
    docs
}

fn lint(extra: &[String]) -> LintReport {
    linter().lint(docs(extra), now())
}

fn registry(extra: &[String]) -> Registry {
    let report = lint(extra);
    let errors: Vec<_> = report
        .findings
        .iter()
        .filter(|f| f.severity == Severity::Error)
        .collect();
    assert!(errors.is_empty(), "{errors:#?}");
    Registry::from_objects(&report.objects)
}

fn call(tool: &str, args: Value, action: &str) -> ToolCallSpec {
    serde_json::from_value(json!({
        "toolRef": {"name": tool}, "principal": FIXER, "args": args,
        "intent": {"userGoal": "g", "currentTask": "t", "actionType": action, "rationaleSummary": "r",
                   "target": {"kind": "repo", "ref": "acme/web-app"}},
    }))
    .expect("call")
}

fn decide_as(r: &Registry, principal: &Principal, spec: &ToolCallSpec) -> Decision {
    decide_with(r, principal, spec, &[])
}

fn decide_with(
    r: &Registry,
    principal: &Principal,
    spec: &ToolCallSpec,
    approvals: &[ApprovalEntry<'_>],
) -> Decision {
    decide_in(
        r,
        &CallUnderReview {
            namespace: NS,
            name: "c",
            spec,
            principal,
            dry_runs: &[],
            tool_policies: None,
            delegation: None,
        },
        approvals,
        now(),
        &ArgsLimits::default(),
    )
}

fn fixer() -> Principal {
    Principal::new(FIXER)
}

fn outcome(d: &Decision) -> (DecisionOutcome, Option<&'static str>) {
    (d.outcome, d.reasons.last().map(|r| r.code))
}

#[test]
fn argument_conditions_allow_and_deny_as_written() {
    let r = registry(&[policy(
        "args",
        "enforce",
        r#"@id("writes-under-src")
@reason("this agent writes only under src/")
forbid (principal, action == Action::"file.write", resource)
unless { context.args.path like "src/*" };

@id("known-repos")
@reason("issues only in web-app and api")
forbid (principal, action == Action::"github.create-issue", resource)
unless { ["web-app", "api"].contains(context.args.repo) };

@id("refunds-under-100")
@reason("refunds of 100 or more go through finance")
forbid (principal, action == Action::"payments.refund", resource)
when { context.args.amount >= 100 };

@id("fee-bound")
forbid (principal, action == Action::"payments.refund", resource)
when { context has args.fee && context.args.fee.greaterThan(decimal("2.5")) };

@id("no-test-orders")
forbid (principal, action == Action::"payments.refund", resource)
when { context.args.order like "TEST-*" };"#,
    )]);
    let p = fixer();
    let write = |path: &str| call("file.write", json!({"path": path, "content": "x"}), "write");
    // Path prefix.
    let d = decide_as(&r, &p, &write("src/a.ts"));
    assert_eq!(d.outcome, DecisionOutcome::Allow, "{:#?}", d.reasons);
    let d = decide_as(&r, &p, &write("docs/a.md"));
    assert_eq!(
        outcome(&d),
        (DecisionOutcome::Deny, Some("policy-forbidden"))
    );
    let why = &d.reasons.last().expect("reason").message;
    assert!(
        why.contains("ToolPolicy args") && why.contains("args/writes-under-src"),
        "{why}"
    );
    assert!(why.contains("this agent writes only under src/"), "{why}");
    // Enum membership (the call waits for approval when allowed: L4).
    let issue = |repo: &str| {
        call(
            "github.create-issue",
            json!({"owner": "acme", "repo": repo, "title": "a flaky test", "body": "b"}),
            "external_send",
        )
    };
    assert_eq!(
        decide_as(&r, &p, &issue("web-app")).outcome,
        DecisionOutcome::RequireApproval
    );
    assert_eq!(
        outcome(&decide_as(&r, &p, &issue("payroll"))),
        (DecisionOutcome::Deny, Some("policy-forbidden"))
    );
    // Number bounds (Long and decimal) and a string pattern.
    let refund = |args: Value| call("payments.refund", args, "execute");
    for (args, want) in [
        (
            json!({"order": "A-1", "amount": 99}),
            DecisionOutcome::Allow,
        ),
        (
            json!({"order": "A-1", "amount": 100}),
            DecisionOutcome::Deny,
        ),
        (
            json!({"order": "A-1", "amount": 5, "fee": 2.5}),
            DecisionOutcome::Allow,
        ),
        (
            json!({"order": "A-1", "amount": 5, "fee": 2.51}),
            DecisionOutcome::Deny,
        ),
        (
            json!({"order": "TEST-7", "amount": 1}),
            DecisionOutcome::Deny,
        ),
        // A field with no Cedar type (an untyped object) is left out and harms nothing.
        (
            json!({"order": "A-2", "amount": 1, "notes": {"k": "v"}}),
            DecisionOutcome::Allow,
        ),
    ] {
        let d = decide_as(&r, &p, &refund(args.clone()));
        assert_eq!(d.outcome, want, "{args}: {:#?}", d.reasons);
    }
}

#[test]
fn principals_groups_and_targets_can_be_named() {
    let r = registry(&[policy(
        "who",
        "enforce",
        r#"forbid (principal in Group::"contractors", action == Action::"payments.refund", resource);
forbid (principal, action == Action::"file.write", resource)
when { resource.kind == "repo" && principal is ServiceAccount && principal.namespace == "team-a" && context.args.path like "*.lock" };"#,
    )]);
    let refund = call(
        "payments.refund",
        json!({"order": "A", "amount": 1}),
        "execute",
    );
    assert_eq!(
        decide_as(&r, &fixer(), &refund).outcome,
        DecisionOutcome::Allow
    );
    let contractor = Principal::new("bob@example.com").with_groups(["contractors"]);
    assert_eq!(
        outcome(&decide_as(&r, &contractor, &refund)),
        (DecisionOutcome::Deny, Some("policy-forbidden"))
    );
    let lock = call(
        "file.write",
        json!({"path": "src/yarn.lock", "content": "x"}),
        "write",
    );
    assert_eq!(
        outcome(&decide_as(&r, &fixer(), &lock)),
        (DecisionOutcome::Deny, Some("policy-forbidden"))
    );
}

#[test]
fn forbid_wins_over_an_approval() {
    let r = registry(&[policy(
        "no-payroll",
        "enforce",
        r#"forbid (principal, action == Action::"github.create-issue", resource) when { context.args.repo == "payroll" };"#,
    )]);
    let spec = call(
        "github.create-issue",
        json!({"owner": "acme", "repo": "payroll", "title": "a flaky test", "body": "b"}),
        "external_send",
    );
    let tool = r.tool(NS, "github.create-issue").expect("tool");
    let args = toolgate_core::digest::json_digest(&spec.args).expect("digest");
    let approval: toolgate_crds::ToolApprovalSpec = serde_json::from_value(json!({
        "callRef": {"name": "c"}, "argsDigest": args, "toolDigest": tool.digest, "riskTier": "L4",
        "scopes": tool.spec.permissions.required_scopes, "principal": FIXER,
        "approver": "alice@example.com", "decision": "allowOnce", "expiresAt": "2099-01-01T00:00:00Z",
    }))
    .expect("approval");
    let subject = ApprovalSubject {
        call_name: "c",
        session_id: None,
        args_digest: &args,
        tool_digest: &tool.digest,
        tier: tool.tier,
        scopes: &tool.spec.permissions.required_scopes,
        principal: FIXER,
    };
    assert_eq!(
        toolgate_core::approval::check_approval(&approval, false, &subject, now()),
        Ok(()),
        "the approval itself binds"
    );
    let entry = ApprovalEntry {
        name: "a",
        spec: &approval,
        consumed: false,
    };
    let d = decide_with(&r, &fixer(), &spec, &[entry]);
    assert_eq!(
        outcome(&d),
        (DecisionOutcome::Deny, Some("policy-forbidden"))
    );
}

#[test]
fn shadow_mode_changes_nothing_but_is_recorded() {
    let text = r#"@reason("try: no writes to docs")
forbid (principal, action == Action::"file.write", resource) unless { context.args.path like "src/*" };"#;
    let r = registry(&[policy("trial", "shadow", text)]);
    let d = decide_as(
        &r,
        &fixer(),
        &call(
            "file.write",
            json!({"path": "docs/a.md", "content": "x"}),
            "write",
        ),
    );
    assert_eq!(d.outcome, DecisionOutcome::Allow, "{:#?}", d.reasons);
    let shadow = d
        .reasons
        .iter()
        .find(|r| r.code == "policy-shadow-forbid")
        .expect("recorded");
    assert!(
        shadow.message.contains("trial") && shadow.message.contains("try: no writes to docs"),
        "{}",
        shadow.message
    );
    // Not matching: nothing recorded.
    let d = decide_as(
        &r,
        &fixer(),
        &call(
            "file.write",
            json!({"path": "src/a", "content": "x"}),
            "write",
        ),
    );
    assert!(!d.codes().contains(&"policy-shadow-forbid"));
}

#[test]
fn a_tool_every_call_of_which_is_forbidden_is_hidden_from_views() {
    let r = registry(&[policy(
        "freeze",
        "enforce",
        r#"@reason("refunds are frozen during the audit")
forbid (principal, action == Action::"payments.refund", resource);
forbid (principal, action == Action::"file.write", resource) unless { context.args.path like "src/*" };"#,
    )]);
    let p = fixer();
    let view = compile_view(
        &r,
        &ViewRequest {
            namespace: NS,
            principal: &p,
            intent: "refund an order and write a file",
            action_type: None,
            domains: &[],
            max_tools: 32,
            recent_failures: &Default::default(),
            explain: true,
            now: now(),
            usage: &Default::default(),
        },
    );
    let hidden = view
        .hidden
        .iter()
        .find(|h| h.name == "payments.refund")
        .expect("hidden");
    assert_eq!(hidden.code, "policy-forbidden");
    assert!(
        hidden.reason.contains("frozen during the audit"),
        "{}",
        hidden.reason
    );
    // A tool only some calls of which are forbidden stays in the view.
    assert!(
        view.exposed.iter().any(|t| t.name == "file.write"),
        "{:?}",
        view.hidden
    );
    let _ = view.render(ViewFormat::Canonical);
}

#[test]
fn type_errors_permits_and_parse_errors_fail_lint_with_their_position() {
    let report = lint(&[
        policy(
            "typo",
            "enforce",
            "// line 1 is a comment\nforbid (principal, action == Action::\"file.write\", resource)\nwhen { context.args.pathh like \"src/*\" };",
        ),
        policy(
            "wrong-type",
            "enforce",
            "forbid (principal, action == Action::\"payments.refund\", resource)\nwhen { context.args.order > 3 };",
        ),
        policy(
            "permits",
            "enforce",
            "forbid (principal, action == Action::\"file.write\", resource) when { context.args.path like \"x*\" };\npermit (principal, action, resource);",
        ),
        policy(
            "broken",
            "enforce",
            "forbid (principal, action, resource) when {",
        ),
    ]);
    let find = |object: &str, code: &str| {
        report
            .findings
            .iter()
            .find(|f| f.object.as_deref() == Some(object) && f.code == code)
            .unwrap_or_else(|| panic!("no {code} for {object}: {:#?}", report.findings))
    };
    let typo = find("ToolPolicy/typo", "cedar-type");
    assert_eq!(typo.severity, Severity::Error);
    assert_eq!(typo.path, "spec.policies");
    assert!(
        typo.message.starts_with("line 3, column "),
        "{}",
        typo.message
    );
    assert!(typo.message.contains("pathh"), "{}", typo.message);
    let wrong = find("ToolPolicy/wrong-type", "cedar-type");
    assert!(
        wrong.message.starts_with("line 2, column "),
        "{}",
        wrong.message
    );
    let permit = find("ToolPolicy/permits", "cedar-permit");
    assert!(
        permit.message.starts_with("line 2, column 1:"),
        "{}",
        permit.message
    );
    let broken = find("ToolPolicy/broken", "cedar-parse");
    assert!(
        broken.message.starts_with("line 1, column "),
        "{}",
        broken.message
    );
}

#[test]
fn a_policy_that_does_not_compile_fails_closed() {
    // Applied without lint (kubectl, a cluster): the broken enforced policy refuses the calls it
    // names; others are not affected.
    let report = lint(&[policy(
        "typo",
        "enforce",
        "forbid (principal, action == Action::\"file.write\", resource) when { context.args.pathh == \"x\" };",
    )]);
    let r = Registry::from_objects(&report.objects);
    let d = decide_as(
        &r,
        &fixer(),
        &call(
            "file.write",
            json!({"path": "src/a", "content": "x"}),
            "write",
        ),
    );
    assert_eq!(
        outcome(&d),
        (DecisionOutcome::Deny, Some("policy-forbidden"))
    );
    assert!(
        d.reasons
            .last()
            .expect("r")
            .message
            .contains("does not compile"),
        "{:#?}",
        d.reasons
    );
    let other = call(
        "payments.refund",
        json!({"order": "A", "amount": 1}),
        "execute",
    );
    assert_eq!(
        decide_as(&r, &fixer(), &other).outcome,
        DecisionOutcome::Allow
    );
}

#[test]
fn without_tool_policies_nothing_changes() {
    let r = registry(&[]);
    assert!(r.tool_policies(NS).is_none());
    let d = decide_as(
        &r,
        &fixer(),
        &call(
            "file.write",
            json!({"path": "docs/a", "content": "x"}),
            "write",
        ),
    );
    assert_eq!(d.outcome, DecisionOutcome::Allow);
}

#[test]
fn the_example_tool_policies_bound_the_fixer() {
    let r = support::example_registry();
    let write = |path: &str| call("file.write", json!({"path": path, "content": "x"}), "write");
    let d = decide_as(&r, &fixer(), &write("src/serializer.ts"));
    assert_eq!(d.outcome, DecisionOutcome::Allow, "{:#?}", d.reasons);
    assert!(d.shadow_forbids.is_empty());
    let d = decide_as(&r, &fixer(), &write(".github/workflows/ci.yml"));
    assert_eq!(
        outcome(&d),
        (DecisionOutcome::Deny, Some("policy-forbidden"))
    );
    // The shadow trial records a lock-file edit and refuses nothing.
    let d = decide_as(&r, &fixer(), &write("src/yarn.lock"));
    assert_eq!(d.outcome, DecisionOutcome::Allow, "{:#?}", d.reasons);
    assert_eq!(
        d.shadow_forbids
            .iter()
            .map(|f| f.policy.as_str())
            .collect::<Vec<_>>(),
        vec!["lockfiles-trial/no-lockfiles"]
    );
}
