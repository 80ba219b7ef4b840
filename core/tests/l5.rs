//! L5 needs more than L4: an approval and, as the tool chooses, a second approver or a recent
//! successful dry run of the same args. Every way around it is refused with its reason.

mod support;

use jiff::{SignedDuration, Timestamp};
use serde_json::{Value, json};
use support::{examples, now, objects};
use toolgate_core::approval::{DRY_RUN_VALID_SECONDS, DryRunEntry};
use toolgate_core::decision::ApprovalEntry;
use toolgate_core::lifecycle::{
    ApprovalRequest, Call, Policies, Refusal, Snapshot, awaiting, issue, plan_run,
};
use toolgate_crds::conditions::{APPROVAL_GRANTED, reason};
use toolgate_crds::{
    ApprovalDecision, CallPhase, DecisionOutcome, StrongConfirmation, ToolApprovalSpec,
    ToolCallSpec, ToolCallStatus,
};

const NS: &str = "team-a";
const FIXER: &str = "system:serviceaccount:team-a:fixer";

/// The examples with file.delete (L5, supports dry runs; approval by its tier, so a dry run
/// runs unapproved) asking for `confirmation`.
fn policies(confirmation: Option<&str>) -> Policies {
    let mut docs = examples();
    let doc = docs
        .iter_mut()
        .find(|d| d.value["metadata"]["name"] == "file.delete")
        .expect("file.delete");
    doc.value["spec"]["permissions"]["approvalPolicy"] = "on_risk".into();
    if let Some(c) = confirmation {
        doc.value["spec"]["permissions"]["strongConfirmation"] = Value::from(c);
    }
    // The example calls pin file.delete's digest; the edited descriptor has another.
    docs.retain(|d| d.value["kind"] != "ToolCall" && d.value["kind"] != "ToolApproval");
    Policies::new(objects(docs))
}

/// The delete of the example scenario, for real or as a dry run.
fn delete(path: &str, dry_run: bool) -> ToolCallSpec {
    serde_json::from_value(json!({
        "toolRef": {"name": "file.delete"},
        "principal": FIXER,
        "args": {"path": path},
        "intent": {"userGoal": "g", "currentTask": "t", "actionType": "delete", "rationaleSummary": "r"},
        "dryRun": dry_run,
    }))
    .expect("call")
}

/// The status of a call proposed now: decided, waiting for approval.
fn proposed(p: &Policies, name: &str, spec: &ToolCallSpec) -> ToolCallStatus {
    let mut status = ToolCallStatus::default();
    let call = Call {
        namespace: NS,
        name,
        spec,
        status: &ToolCallStatus::default(),
    };
    let snap = Snapshot::new(p, vec![], now());
    let steps = toolgate_core::lifecycle::propose(&snap, &call, &mut status, |_| Ok(()));
    for s in &steps {
        toolgate_core::lifecycle::apply(&mut status, s, now(), 1);
    }
    status
}

/// A dry run of `spec` that succeeded at `at`, as a runtime stores it.
fn succeeded(p: &Policies, name: &str, spec: &ToolCallSpec, at: Timestamp) -> ToolCallStatus {
    let mut status = proposed(p, name, spec);
    assert_eq!(status.phase, Some(CallPhase::Authorized), "{status:#?}");
    let done = toolgate_core::lifecycle::Step::ok(
        toolgate_crds::conditions::STATE_UPDATED,
        reason::SUCCEEDED,
        "done",
    )
    .then(CallPhase::Succeeded);
    toolgate_core::lifecycle::apply(&mut status, &done, at, 1);
    status
}

fn approve(
    snap: &Snapshot<'_>,
    call: &Call<'_>,
    approver: &str,
) -> Result<ToolApprovalSpec, Refusal> {
    issue(
        snap,
        call,
        &ApprovalRequest {
            approver,
            decision: ApprovalDecision::AllowOnce,
            shown: None,
            ttl_seconds: 0,
            comment: "",
        },
    )
}

fn entries(approvals: &[(String, ToolApprovalSpec)]) -> Vec<ApprovalEntry<'_>> {
    approvals
        .iter()
        .map(|(name, spec)| ApprovalEntry {
            name,
            spec,
            consumed: false,
        })
        .collect()
}

#[test]
fn descriptors_choose_their_confirmation_and_default_by_dry_run_support() {
    let p = policies(None);
    let tool = p.registry.tool(NS, "file.delete").expect("tool");
    assert_eq!(
        tool.spec.strong_confirmation(),
        StrongConfirmation::DryRun,
        "file.delete supports dry runs"
    );
    let mut spec = tool.spec.as_ref().clone();
    spec.effects.dry_run_supported = false;
    assert_eq!(
        spec.strong_confirmation(),
        StrongConfirmation::SecondApprover
    );
    let p = policies(Some("second_approver"));
    let tool = p.registry.tool(NS, "file.delete").expect("tool");
    assert_eq!(
        tool.spec.strong_confirmation(),
        StrongConfirmation::SecondApprover
    );
}

#[test]
fn a_second_approver_must_be_someone_else() {
    let p = policies(Some("second_approver"));
    let spec = delete("src/old.snap", false);
    let status = proposed(&p, "del", &spec);
    assert_eq!(status.phase, Some(CallPhase::AwaitingApproval));
    let asked = status
        .conditions
        .iter()
        .find(|c| c.type_ == "ApprovalRequested")
        .expect("asked");
    assert!(
        asked.message.contains("a second, different approver"),
        "the prompt says which: {}",
        asked.message
    );
    let call = Call {
        namespace: NS,
        name: "del",
        spec: &spec,
        status: &status,
    };

    // One approval: still waiting, and ApprovalGranted says for what.
    let mut given = Vec::new();
    let snap = Snapshot::new(&p, entries(&given), now());
    given.push((
        "a1".to_string(),
        approve(&snap, &call, "alice@example.com").expect("first"),
    ));
    let snap = Snapshot::new(&p, entries(&given), now());
    let d = snap.decide(&call);
    assert_eq!(d.outcome, DecisionOutcome::RequireApproval);
    assert!(d.codes().contains(&"second-approver-required"), "{d:#?}");
    let mut s = status.clone();
    let steps = awaiting(&snap, &call, &mut s);
    assert_eq!(steps.len(), 1, "{steps:#?}");
    assert_eq!(steps[0].kind, APPROVAL_GRANTED);
    assert_eq!(steps[0].reason, reason::AWAITING_CONFIRMATION);
    assert_eq!(steps[0].phase, None, "the call keeps waiting");
    // Said once: looking again with the condition recorded adds nothing.
    toolgate_core::lifecycle::apply(&mut s, &steps[0], now(), 1);
    assert!(awaiting(&snap, &call, &mut s.clone()).is_empty());

    // The same approver again: refused when asked, and not counted when it exists anyway (an
    // approval object created by hand on a cluster).
    let again = approve(&snap, &call, "alice@example.com").expect_err("same approver");
    assert!(
        matches!(
            &again,
            Refusal::FailedPrecondition {
                code: "approval-same-approver",
                ..
            }
        ),
        "{again:?}"
    );
    let mut twice = given.clone();
    let mut copy = given[0].1.clone();
    copy.comment = Some("again".into());
    twice.push(("a2".into(), copy));
    let snap2 = Snapshot::new(&p, entries(&twice), now());
    let d = snap2.decide(&call);
    assert_eq!(d.outcome, DecisionOutcome::RequireApproval);
    assert!(d.codes().contains(&"approval-same-approver"), "{d:#?}");

    // The principal cannot be the second approver either.
    let own = approve(&snap, &call, FIXER).expect_err("self");
    assert!(matches!(
        own,
        Refusal::PermissionDenied {
            code: "approval-self",
            ..
        }
    ));

    // A second, different approver authorizes; both approvals are used up by the run.
    given.push((
        "a2".to_string(),
        approve(&snap, &call, "bob@example.com").expect("second"),
    ));
    let snap = Snapshot::new(&p, entries(&given), now());
    let mut s = status.clone();
    let steps = awaiting(&snap, &call, &mut s);
    assert_eq!(
        steps.last().and_then(|s| s.phase),
        Some(CallPhase::Authorized),
        "{steps:#?}"
    );
    assert!(steps[0].message.contains("bob@example.com approved too"));
    let auth = s.authorization.clone().expect("decided");
    let confirmation = auth.confirmation.expect("confirmation recorded");
    assert_eq!(
        (confirmation.kind, confirmation.name.as_str()),
        (StrongConfirmation::SecondApprover, "a2")
    );
    for step in &steps {
        toolgate_core::lifecycle::apply(&mut s, step, now(), 1);
    }
    let authorized = Call { status: &s, ..call };
    let run = plan_run(&snap, &authorized, &mut s.clone()).expect("runs");
    assert_eq!(run.consumes, vec!["a1", "a2"]);
}

#[test]
fn a_dry_run_confirms_only_the_same_args_recently_by_the_same_principal() {
    let p = policies(None);
    let spec = delete("src/old.snap", false);
    let status = proposed(&p, "del", &spec);
    let asked = &status
        .conditions
        .iter()
        .find(|c| c.type_ == "ApprovalRequested")
        .expect("asked")
        .message;
    assert!(asked.contains("a successful dry run"), "{asked}");
    let call = Call {
        namespace: NS,
        name: "del",
        spec: &spec,
        status: &status,
    };
    let snap = Snapshot::new(&p, vec![], now());
    let given = vec![(
        "a1".to_string(),
        approve(&snap, &call, "alice@example.com").expect("approve"),
    )];

    // The dry runs a runtime might find.
    let same = delete("src/old.snap", true);
    let other_args = delete("src/other.snap", true);
    let mut by_other = delete("src/old.snap", true);
    by_other.principal = "system:serviceaccount:team-a:other".into();
    let recent = now() - SignedDuration::from_secs(60);
    let old = now() - SignedDuration::from_secs(DRY_RUN_VALID_SECONDS + 1);
    let same_recent = succeeded(&p, "dry-same", &same, recent);
    let same_old = succeeded(&p, "dry-old", &same, old);
    let other_recent = succeeded(&p, "dry-other-args", &other_args, recent);
    let entry = |name, spec, status| DryRunEntry::of(name, spec, status).expect("a dry run");
    let cases: Vec<(Vec<DryRunEntry<'_>>, &str)> = vec![
        (vec![], "dry-run-required"),
        (
            vec![entry("dry-other-args", &other_args, &other_recent)],
            "dry-run-other-args",
        ),
        (vec![entry("dry-old", &same, &same_old)], "dry-run-stale"),
        (
            vec![entry("dry-by-other", &by_other, &same_recent)],
            "dry-run-other-principal",
        ),
    ];
    for (dry_runs, code) in cases {
        let snap = Snapshot::new(&p, entries(&given), now()).with_dry_runs(dry_runs);
        let d = snap.decide(&call);
        assert_eq!(
            d.outcome,
            DecisionOutcome::RequireApproval,
            "{code}: {d:#?}"
        );
        assert!(d.codes().contains(&code), "{code}: {d:#?}");
        assert!(d.codes().contains(&"dry-run-required"), "{code}: {d:#?}");
        let steps = awaiting(&snap, &call, &mut status.clone());
        assert_eq!(
            steps.iter().map(|s| s.reason.as_str()).collect::<Vec<_>>(),
            vec![reason::AWAITING_CONFIRMATION],
            "{code}"
        );
    }

    // Without an approval a dry run authorizes nothing.
    let dry = vec![entry("dry-same", &same, &same_recent)];
    let snap = Snapshot::new(&p, vec![], now()).with_dry_runs(dry.clone());
    assert_eq!(snap.decide(&call).outcome, DecisionOutcome::RequireApproval);
    assert!(awaiting(&snap, &call, &mut status.clone()).is_empty());

    // The approval and the recent dry run of the same args: authorized, the dry run named.
    let snap = Snapshot::new(&p, entries(&given), now()).with_dry_runs(dry);
    let mut s = status.clone();
    let steps = awaiting(&snap, &call, &mut s);
    assert_eq!(
        steps.last().and_then(|s| s.phase),
        Some(CallPhase::Authorized),
        "{steps:#?}"
    );
    let confirmation = s
        .authorization
        .and_then(|a| a.confirmation)
        .expect("confirmation");
    assert_eq!(
        (confirmation.kind, confirmation.name.as_str()),
        (StrongConfirmation::DryRun, "dry-same")
    );
}

#[test]
fn a_dry_run_itself_needs_no_second_confirmation() {
    let p = policies(Some("second_approver"));
    let status = proposed(&p, "dry", &delete("src/old.snap", true));
    assert_eq!(status.phase, Some(CallPhase::Authorized), "{status:#?}");
}

#[test]
fn dry_run_confirmation_needs_a_tool_that_dry_runs() {
    let mut docs = examples();
    let doc = docs
        .iter_mut()
        .find(|d| d.value["metadata"]["name"] == "file.delete")
        .expect("file.delete");
    doc.value["spec"]["permissions"]["strongConfirmation"] = "dry_run".into();
    doc.value["spec"]["effects"]["dryRunSupported"] = false.into();
    doc.value["spec"]["permissions"]["approvalPolicy"] = "always".into();
    let report = support::linter().lint(docs, now());
    let finding = report
        .findings
        .iter()
        .find(|f| f.code == "cel-rule" && f.message.contains("strongConfirmation dry_run"))
        .unwrap_or_else(|| panic!("{:#?}", report.findings));
    assert_eq!(finding.severity, toolgate_core::lint::Severity::Error);
}

#[test]
fn an_approval_that_changes_nothing_the_call_waits_for_is_refused_and_explain_names_every_approval()
{
    let p = policies(Some("dry_run"));
    let spec = delete("src/old.snap", false);
    let status = proposed(&p, "del", &spec);
    assert_eq!(status.phase, Some(CallPhase::AwaitingApproval));
    let call = Call {
        namespace: NS,
        name: "del",
        spec: &spec,
        status: &status,
    };
    let request = |approver| ApprovalRequest {
        approver,
        decision: ApprovalDecision::AllowOnce,
        shown: None,
        ttl_seconds: 0,
        comment: "",
    };
    // The first approval binds: the call now waits for its dry run instead.
    let mut given = Vec::new();
    let snap = Snapshot::new(&p, entries(&given), now());
    let first =
        toolgate_core::lifecycle::approve(&snap, &call, &request("alice@example.com"), "a1")
            .expect("the first approval binds");
    given.push(("a1".to_string(), first));
    let snap = Snapshot::new(&p, entries(&given), now());
    assert!(snap.decide(&call).codes().contains(&"dry-run-required"));
    // Another approver adds nothing a dry run would: refused, saying what the call waits for.
    let again = toolgate_core::lifecycle::approve(&snap, &call, &request("bob@example.com"), "a2")
        .expect_err("a second approval cannot stand in for the dry run");
    match &again {
        Refusal::FailedPrecondition { code, message } => {
            assert_eq!(*code, "approval-not-binding");
            assert!(message.contains("dry-run-required"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    // A denial always binds: it ends the call.
    let deny = ApprovalRequest {
        decision: ApprovalDecision::Deny,
        ..request("bob@example.com")
    };
    let denial = toolgate_core::lifecycle::approve(&snap, &call, &deny, "a2").expect("a denial");
    given.push(("a2".to_string(), denial));
    let snap = Snapshot::new(&p, entries(&given), now());
    assert_eq!(snap.decide(&call).outcome, DecisionOutcome::Deny);
    // ExplainCall names both, in order, with their approvers.
    assert_eq!(
        toolgate_core::lifecycle::explained_approvals(&snap, &call),
        [("a1", "alice@example.com"), ("a2", "bob@example.com")]
    );
}

#[test]
fn only_the_proposer_and_the_namespace_approvers_may_answer_for_a_call() {
    let p = policies(None);
    let spec = delete("src/old.snap", false);
    let status = proposed(&p, "del", &spec);
    let call = Call {
        namespace: NS,
        name: "del",
        spec: &spec,
        status: &status,
    };
    use toolgate_core::lifecycle::may_answer;
    assert!(may_answer(FIXER, &call, false).is_ok());
    assert!(may_answer("alice@example.com", &call, true).is_ok());
    let refused = may_answer("mallory@example.com", &call, false).expect_err("an outsider");
    assert!(
        matches!(
            &refused,
            Refusal::PermissionDenied { code: "not-an-approver", message } if message.contains(NS)
        ),
        "{refused:?}"
    );
}
