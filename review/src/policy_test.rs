//! Policy table tests (`toolgate policy test DIR`): calls and the decisions a team expects for
//! them, kept next to the manifests in `*.policytest.yaml` files and run in CI, so a change to a
//! grant, a descriptor or a ToolPolicy that moves a decision fails the pull request that made it.
//!
//! ```yaml
//! namespace: team-a                              # default for every case
//! principal: system:serviceaccount:team-a:fixer  # default for every case
//! cases:
//! - name: the fixer writes its sources
//!   tool: file.write
//!   args: {path: src/a.ts, content: x}
//!   expect: allow                                # allow | requireApproval | deny
//! - name: but not the CI config
//!   tool: file.write
//!   args: {path: .github/workflows/ci.yml, content: x}
//!   expect: deny
//!   reason: policy-forbidden                     # a reason code the decision must give
//! ```

use jiff::Timestamp;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use toolgate_crds::{ActionType, CallTarget, DecisionOutcome, ToolCallSpec};

use toolgate_core::args::ArgsLimits;
use toolgate_core::decision::{CallUnderReview, Decision, decide_in};
use toolgate_core::principal::Principal;
use toolgate_core::registry::Registry;

/// The file name ending that marks a policy test table.
pub use toolgate_core::manifest::POLICY_TEST_SUFFIX as SUFFIX;

/// A table of cases.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PolicyTestFile {
    /// Namespace of every case that names none.
    #[serde(default)]
    pub namespace: Option<String>,
    /// Principal of every case that names none.
    #[serde(default)]
    pub principal: Option<String>,
    /// Groups of that principal.
    #[serde(default)]
    pub groups: Vec<String>,
    /// Decide at this time (RFC 3339) unless a case says; default: now.
    #[serde(default)]
    pub now: Option<Timestamp>,
    /// The cases.
    pub cases: Vec<PolicyCase>,
}

/// One call and what it must be decided.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PolicyCase {
    /// What the case checks, in words.
    pub name: String,
    /// Namespace (default: the file's).
    #[serde(default)]
    pub namespace: Option<String>,
    /// Principal (default: the file's).
    #[serde(default)]
    pub principal: Option<String>,
    /// Groups (default: the file's).
    #[serde(default)]
    pub groups: Option<Vec<String>>,
    /// The tool.
    pub tool: String,
    /// The args.
    #[serde(default = "empty_object")]
    pub args: Value,
    /// The intent's action type (default: the tool's first).
    #[serde(default)]
    pub action_type: Option<ActionType>,
    /// The intent's target.
    #[serde(default)]
    pub target: Option<CallTarget>,
    /// A dry run.
    #[serde(default)]
    pub dry_run: bool,
    /// Decide at this time.
    #[serde(default)]
    pub now: Option<Timestamp>,
    /// The expected outcome.
    pub expect: DecisionOutcome,
    /// A reason code the decision must give (`policy-forbidden`, `no-grant`, …).
    #[serde(default)]
    pub reason: Option<String>,
}

fn empty_object() -> Value {
    Value::Object(Default::default())
}

/// What a case came to.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CaseResult {
    /// The case's name.
    pub name: String,
    /// Whether the decision is what the case expects.
    pub passed: bool,
    /// What was expected, in words.
    pub expected: String,
    /// The decision.
    pub decision: Decision,
}

/// Why a case could not be run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cases[{index}] ({name}): {message}")]
pub struct CaseError {
    /// Position in the table.
    pub index: usize,
    /// The case's name.
    pub name: String,
    /// What is missing.
    pub message: String,
}

/// Run every case of a table against a registry.
pub fn run(
    registry: &Registry,
    file: &PolicyTestFile,
    now: Timestamp,
) -> Result<Vec<CaseResult>, CaseError> {
    file.cases
        .iter()
        .enumerate()
        .map(|(index, case)| {
            let err = |message: String| CaseError {
                index,
                name: case.name.clone(),
                message,
            };
            let namespace = case
                .namespace
                .as_deref()
                .or(file.namespace.as_deref())
                .ok_or_else(|| err("no namespace (set it on the case or the file)".into()))?;
            let principal = case
                .principal
                .as_deref()
                .or(file.principal.as_deref())
                .ok_or_else(|| err("no principal (set it on the case or the file)".into()))?;
            let groups = case.groups.clone().unwrap_or_else(|| file.groups.clone());
            let action_type = match case.action_type {
                Some(a) => a,
                None => registry
                    .tool(namespace, &case.tool)
                    .and_then(|t| t.spec.intent.action_types.first().copied())
                    .unwrap_or(ActionType::Read),
            };
            let spec: ToolCallSpec = serde_json::from_value(serde_json::json!({
                "toolRef": {"name": case.tool},
                "principal": principal,
                "principalGroups": groups,
                "args": case.args,
                "intent": {"userGoal": "policy test", "currentTask": case.name,
                           "actionType": action_type, "rationaleSummary": "policy test",
                           "target": case.target},
                "dryRun": case.dry_run,
            }))
            .map_err(|e| err(e.to_string()))?;
            let principal = Principal::new(principal).with_groups(groups);
            let decision = decide_in(
                registry,
                &CallUnderReview {
                    namespace,
                    name: &format!("policy-test-{index}"),
                    spec: &spec,
                    principal: &principal,
                    dry_runs: &[],
                    tool_policies: None,
                    delegation: None,
                },
                &[],
                case.now.or(file.now).unwrap_or(now),
                &ArgsLimits::default(),
            );
            let outcome_ok = decision.outcome == case.expect;
            let reason_ok = case
                .reason
                .as_deref()
                .is_none_or(|r| decision.codes().contains(&r));
            let expected = match &case.reason {
                Some(r) => format!("{} ({r})", outcome_name(case.expect)),
                None => outcome_name(case.expect).to_string(),
            };
            Ok(CaseResult {
                name: case.name.clone(),
                passed: outcome_ok && reason_ok,
                expected,
                decision,
            })
        })
        .collect()
}

/// `allow`, `requireApproval` or `deny`.
pub fn outcome_name(o: DecisionOutcome) -> &'static str {
    match o {
        DecisionOutcome::Allow => "allow",
        DecisionOutcome::RequireApproval => "requireApproval",
        DecisionOutcome::Deny => "deny",
    }
}
