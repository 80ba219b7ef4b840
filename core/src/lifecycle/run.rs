//! Running an authorized call: decide again, find what it runs with, and the steps up to
//! Started. The runtime places it (a pod, or a local sandbox) between these pure steps.

use toolgate_crds::conditions::{
    CREDENTIALS_BOUND, POLICY_CHECKED, SANDBOX_PREPARED, STARTED, reason,
};
use toolgate_crds::{
    ApprovalDecision, CallPhase, CallRuntime, CredentialBindingSpec, DecisionOutcome,
    ExecutionAdapter, LocalObjectRef, SandboxPolicySpec, ToolCallStatus,
};

use super::cannot_run;
use super::ended_without_running;
use super::snapshot::{Call, Snapshot};
use super::step::{Step, camel, reasons_text};
use crate::manifest::{ObjectSet, Spec};
use crate::registry::{RegisteredTool, Registry};

/// What an allowed call runs with, found before anything runs (invariant 10).
#[derive(Debug, Clone, Copy)]
pub struct RunTarget<'a> {
    /// The registered tool.
    pub tool: &'a RegisteredTool,
    /// Name of its sandbox policy.
    pub policy_name: &'a str,
    /// The sandbox policy.
    pub policy: &'a SandboxPolicySpec,
    /// Its credential binding, by name, if it has one.
    pub binding: Option<(&'a str, &'a CredentialBindingSpec)>,
}

impl RunTarget<'_> {
    /// How long a credential brokered for this run may live, in seconds: no longer than one
    /// attempt of the tool (the broker takes the smaller of this and the binding's TTL).
    pub fn credential_deadline_seconds(&self) -> u64 {
        u64::from(self.tool.spec.execution.timeout_ms).div_ceil(1000)
    }
}

/// Look up the tool, its sandbox policy and its credential binding of a call.
pub(crate) fn run_target_of<'a>(
    snapshot: &Snapshot<'a>,
    call: &Call<'_>,
) -> Result<RunTarget<'a>, Vec<Step>> {
    lookup(
        snapshot.registry,
        snapshot.objects,
        call.namespace,
        &call.spec.tool_ref.name,
    )
}

/// Look up the tool, its sandbox policy and its credential binding in a namespace; a missing
/// piece ends the call with its own reason, the same words on both runtimes.
pub fn run_target<'a>(
    registry: &'a Registry,
    objects: &'a ObjectSet,
    namespace: &str,
    tool_name: &str,
) -> Result<RunTarget<'a>, Vec<Step>> {
    lookup(registry, objects, namespace, tool_name)
}

fn lookup<'a>(
    registry: &'a Registry,
    objects: &'a ObjectSet,
    namespace: &str,
    tool_name: &str,
) -> Result<RunTarget<'a>, Vec<Step>> {
    let tool = registry.tool(namespace, tool_name).ok_or_else(|| {
        cannot_run(
            SANDBOX_PREPARED,
            reason::TOOL_MISSING,
            format!("tool {tool_name} is gone"),
        )
    })?;
    let policy_name = tool
        .spec
        .sandbox_policy_ref
        .as_ref()
        .map(|r| r.name.as_str())
        .ok_or_else(|| {
            cannot_run(
                SANDBOX_PREPARED,
                reason::SANDBOX_POLICY_MISSING,
                format!("tool {tool_name} names no sandboxPolicyRef; nothing runs without one"),
            )
        })?;
    let policy = match objects
        .find("SandboxPolicy", namespace, policy_name)
        .map(|o| &o.spec)
    {
        Some(Spec::SandboxPolicy(p)) => &**p,
        _ => {
            return Err(cannot_run(
                SANDBOX_PREPARED,
                reason::SANDBOX_POLICY_MISSING,
                format!("SandboxPolicy {policy_name} does not exist in {namespace}"),
            ));
        }
    };
    let binding = match &tool.spec.credential_binding_ref {
        None => None,
        Some(r) => match objects
            .find("CredentialBinding", namespace, &r.name)
            .map(|o| &o.spec)
        {
            Some(Spec::CredentialBinding(b)) => Some((r.name.as_str(), &**b)),
            _ => {
                return Err(cannot_run(
                    CREDENTIALS_BOUND,
                    reason::BINDING_MISSING,
                    format!("CredentialBinding {} does not exist in {namespace}", r.name),
                ));
            }
        },
    };
    Ok(RunTarget {
        tool,
        policy_name,
        policy,
        binding,
    })
}

/// When the decision taken again right before running no longer allows the call: the steps that
/// end it (the manifests changed, the approval expired or stopped binding, the grant went).
pub fn recheck_steps(d: &crate::decision::Decision) -> Option<Vec<Step>> {
    if d.outcome == DecisionOutcome::Allow {
        return None;
    }
    let code = d.reasons.last().map_or("decision-changed", |r| r.code);
    Some(vec![
        Step::failed(
            POLICY_CHECKED,
            camel(code),
            format!("checked again before running: {}", reasons_text(d)),
        ),
        ended_without_running(),
    ])
}

/// An authorized call, decided again and with what it runs with, ready to be placed.
#[derive(Debug, Clone)]
pub struct Run<'a> {
    /// What it runs with.
    pub target: RunTarget<'a>,
    /// The allowOnce approvals it uses up when it starts, by name: its approval and, for an L5
    /// call, its second approver's (an allowForSession approval covers later calls of its
    /// session and is never used up).
    pub consumes: Vec<&'a str>,
}

/// How an authorized call starts: a delegation opens (no sandbox), anything else runs.
#[derive(Debug)]
pub enum Start<'a> {
    /// A call of a subagent tool: [`start_delegation`].
    Delegation(DelegationStart<'a>),
    /// Any other call: [`plan_run`], for the runtime to place.
    Run(Run<'a>),
}

/// Start an authorized call: decided again, then opened as a delegation when its tool is a
/// subagent's, or planned to run. `Err`: the steps that end it.
pub fn start<'a>(
    snapshot: &Snapshot<'a>,
    call: &Call<'_>,
    status: &mut ToolCallStatus,
) -> Result<Start<'a>, Vec<Step>> {
    let delegation = snapshot
        .tool(call)
        .is_some_and(|t| crate::subagent::subagent_of(&t.spec).is_some());
    if delegation {
        start_delegation(snapshot, call, status).map(Start::Delegation)
    } else {
        plan_run(snapshot, call, status).map(Start::Run)
    }
}

/// Plan the run of an authorized call: decide again (the approval must still bind, the tool must
/// not have changed), then find its target. On refusal, the steps that end the call; the status
/// keeps the decision taken now.
pub fn plan_run<'a>(
    snapshot: &Snapshot<'a>,
    call: &Call<'_>,
    status: &mut ToolCallStatus,
) -> Result<Run<'a>, Vec<Step>> {
    let consumes = decided_again(snapshot, call, status)?;
    let target = run_target_of(snapshot, call)?;
    Ok(Run { target, consumes })
}

/// Decide an authorized call again before it starts: the allowOnce approvals its start uses up,
/// or the steps that end it.
fn decided_again<'a>(
    snapshot: &Snapshot<'a>,
    call: &Call<'_>,
    status: &mut ToolCallStatus,
) -> Result<Vec<&'a str>, Vec<Step>> {
    let decision = snapshot.decide(call);
    if let Some(steps) = recheck_steps(decision) {
        status.authorization = decision.authorization(snapshot.now);
        return Err(steps);
    }
    let second = decision
        .confirmation
        .as_ref()
        .filter(|c| c.kind == toolgate_crds::StrongConfirmation::SecondApprover)
        .map(|c| c.name.as_str());
    let consumes = decision
        .approval
        .as_deref()
        .into_iter()
        .chain(second)
        .filter_map(|name| snapshot.approval(name))
        .filter(|a| a.spec.decision == ApprovalDecision::AllowOnce)
        .map(|a| a.name)
        .collect();
    Ok(consumes)
}

/// A delegation that starts: the approvals its start uses up and its steps to Running.
#[derive(Debug, Clone)]
pub struct DelegationStart<'a> {
    /// The allowOnce approvals it uses up.
    pub consumes: Vec<&'a str>,
    /// What it allows.
    pub subagent: &'a toolgate_crds::SubagentSpec,
    /// SandboxPrepared, CredentialsBound and Started (Running).
    pub steps: Vec<Step>,
}

/// Start an authorized delegation (a call of a subagent tool): decided again, then running with
/// no sandbox and no credential of its own — its subagent's calls get theirs. The status's
/// runtime block says so and when it started (its time runs from there). `Err`: the steps that
/// end it.
pub fn start_delegation<'a>(
    snapshot: &Snapshot<'a>,
    call: &Call<'_>,
    status: &mut ToolCallStatus,
) -> Result<DelegationStart<'a>, Vec<Step>> {
    let consumes = decided_again(snapshot, call, status)?;
    let Some(subagent) = snapshot
        .tool(call)
        .and_then(|t| crate::subagent::subagent_of(&t.spec))
    else {
        return Err(cannot_run(
            SANDBOX_PREPARED,
            reason::TOOL_MISSING,
            format!("{} is not a subagent tool", call.spec.tool_ref.name),
        ));
    };
    let runtime = status.runtime.get_or_insert_with(CallRuntime::default);
    runtime.adapter = Some(adapter_name(ExecutionAdapter::Subagent).into());
    runtime.started_at = Some(toolgate_crds::Timestamp(snapshot.now));
    let steps = vec![
        Step::ok(
            SANDBOX_PREPARED,
            reason::DELEGATED,
            format!(
                "no sandbox: delegated to subagent {} (tools {}; {} call(s), {} ms); each of its calls runs in its own",
                subagent.agent_id,
                subagent.allowed_tools.join(", "),
                subagent.budget.max_calls,
                subagent.budget.timeout_ms
            ),
        ),
        Step::ok(
            CREDENTIALS_BOUND,
            reason::NOT_REQUIRED,
            "a delegation holds no credential: the subagent's calls are brokered their own",
        ),
        Step::ok(
            STARTED,
            reason::DELEGATED,
            "delegation open: its principal may fetch the subagent's token (GetDelegationToken) once",
        )
        .then(CallPhase::Running),
    ];
    Ok(DelegationStart {
        consumes,
        subagent,
        steps,
    })
}

/// How the credential reached the sandbox, for CredentialsBound.
#[derive(Debug, Clone)]
pub enum Credential {
    /// The tool uses none.
    NotRequired,
    /// Issued and delivered.
    Issued {
        /// The binding.
        binding: String,
        /// Where it was put, in words (`as file github-token`, `in Secret tc-x`).
        delivered: String,
        /// Lifetime the broker gave it.
        ttl_seconds: u64,
        /// Whether it is a lease the runtime revokes when the call ends.
        leased: bool,
    },
    /// The broker refused or failed: nothing was started.
    Failed {
        /// The binding.
        binding: String,
        /// The reason (`BrokerUnavailable`, `BrokerForbidden`, `BrokerFailed`).
        reason: &'static str,
        /// Why (never the value).
        error: String,
    },
}

/// The steps from SandboxPrepared to Started of a call the runtime has placed: `sandbox` says
/// what it was given, `started` where the executor started. A credential the broker could not
/// issue ends the call instead. Fills the status's runtime block.
pub fn start_steps(
    target: &RunTarget<'_>,
    status: &mut ToolCallStatus,
    sandbox: String,
    credential: Credential,
    started: String,
) -> Vec<Step> {
    let runtime = status.runtime.get_or_insert_with(CallRuntime::default);
    runtime.adapter = Some(adapter_name(target.tool.spec.execution.adapter).into());
    runtime.sandbox_policy_ref = Some(LocalObjectRef {
        name: target.policy_name.to_string(),
    });
    let mut steps = vec![Step::ok(
        SANDBOX_PREPARED,
        reason::RESOLVED,
        format!("SandboxPolicy {}: {sandbox}", target.policy_name),
    )];
    match credential {
        Credential::NotRequired => steps.push(Step::ok(
            CREDENTIALS_BOUND,
            reason::NOT_REQUIRED,
            "the tool uses no credential",
        )),
        Credential::Failed {
            binding,
            reason,
            error,
        } => {
            steps.extend(cannot_run(
                CREDENTIALS_BOUND,
                reason,
                format!("CredentialBinding {binding}: {error}"),
            ));
            return steps;
        }
        Credential::Issued {
            binding,
            delivered,
            ttl_seconds,
            leased,
        } => {
            let lease = if leased {
                "; leased, revoked when the call ends"
            } else {
                ""
            };
            let vault = target
                .binding
                .map(|(_, b)| format!(" ({:?} {}/{})", b.vault.engine, b.vault.mount, b.vault.path))
                .unwrap_or_default();
            runtime.credential_binding_ref = Some(LocalObjectRef {
                name: binding.clone(),
            });
            steps.push(Step::ok(
                CREDENTIALS_BOUND,
                reason::BROKERED,
                format!(
                    "CredentialBinding {binding}{vault} delivered {delivered}, TTL {ttl_seconds} s{lease}"
                ),
            ));
        }
    }
    steps.push(Step::ok(STARTED, reason::EXECUTOR_STARTED, started).then(CallPhase::Running));
    steps
}

/// The adapter as the status spells it.
pub fn adapter_name(adapter: ExecutionAdapter) -> &'static str {
    match adapter {
        ExecutionAdapter::Cli => "cli",
        ExecutionAdapter::Http => "http",
        ExecutionAdapter::Builtin => "builtin",
        ExecutionAdapter::Mcp => "mcp",
        ExecutionAdapter::Subagent => "subagent",
    }
}
