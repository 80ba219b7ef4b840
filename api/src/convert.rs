//! Kubernetes-shaped call state (ToolCallSpec and ToolCallStatus) as API messages. Both backends
//! keep a call in that shape, so they answer with the same messages.

use std::collections::BTreeMap;

use jiff::Timestamp;
use toolgate_core::lifecycle::phase_name;
use toolgate_core::principal::Principal;
use toolgate_core::registry::GrantUsages;
use toolgate_core::view::{ApprovalHint, ViewFormat, ViewRequest, compile_view};

use crate::error::ApiError;
use crate::validate::parse_action_type;
use toolgate_crds::{ToolCallSpec, ToolCallStatus};
use toolgate_proto::v1 as pb;

/// A call as the API returns it, from its spec and status (the same on both runtimes).
pub fn call_message(
    id: &str,
    namespace: &str,
    spec: &ToolCallSpec,
    status: &ToolCallStatus,
    created_at: &str,
) -> pb::Call {
    let s = status;
    let auth = s.authorization.as_ref();
    let result = s.result.as_ref();
    pb::Call {
        id: id.into(),
        namespace: namespace.into(),
        tool: spec.tool_ref.name.clone(),
        tool_digest: s
            .tool_digest
            .clone()
            .or_else(|| spec.tool_ref.digest.clone())
            .unwrap_or_default(),
        principal: spec.principal.clone(),
        phase: phase_name(s.phase).into(),
        decision: auth
            .map(|a| match a.decision {
                toolgate_crds::DecisionOutcome::Allow => "allow",
                toolgate_crds::DecisionOutcome::RequireApproval => "requireApproval",
                toolgate_crds::DecisionOutcome::Deny => "deny",
            })
            .unwrap_or_default()
            .into(),
        reasons: auth
            .map(|a| {
                a.reasons
                    .iter()
                    .map(|r| pb::Reason {
                        code: r.code.clone(),
                        message: r.message.clone(),
                    })
                    .collect()
            })
            .unwrap_or_default(),
        args_digest: s.args_digest.clone().unwrap_or_default(),
        risk_tier: auth.map(|a| a.risk_tier.to_string()).unwrap_or_default(),
        conditions: s
            .conditions
            .iter()
            .map(|c| pb::Condition {
                r#type: c.type_.clone(),
                status: format!("{:?}", c.status),
                reason: c.reason.clone(),
                message: c.message.clone(),
                last_transition_time: c.last_transition_time.to_string(),
            })
            .collect(),
        output_preview: result
            .and_then(|r| r.output_preview.clone())
            .unwrap_or_default(),
        artifacts: result
            .map(|r| {
                r.artifacts
                    .iter()
                    .map(|a| pb::Artifact {
                        artifact_id: a.artifact_id.clone(),
                        kind: serde_json::to_value(a.kind)
                            .ok()
                            .and_then(|v| v.as_str().map(String::from))
                            .unwrap_or_default(),
                        uri: a.uri.clone(),
                        content_hash: a.content_hash.clone(),
                        size_bytes: a.size_bytes,
                        event_id: a.event_id.clone(),
                    })
                    .collect()
            })
            .unwrap_or_default(),
        created_at: created_at.into(),
        args_json: spec.args.to_string(),
        status_json: serde_json::to_string(status).unwrap_or_default(),
        idempotency_key: spec.idempotency_key.clone().unwrap_or_default(),
        dry_run: spec.dry_run,
        exit_code: result.and_then(|r| r.exit_code),
        parent_call: spec
            .delegation
            .as_ref()
            .map(|d| d.parent_call.clone())
            .unwrap_or_default(),
    }
}

/// The causal-chain order of condition types, for events derived from conditions.
pub fn chain_position(kind: &str) -> usize {
    toolgate_crds::conditions::CALL_CHAIN
        .iter()
        .position(|k| *k == kind)
        .unwrap_or(toolgate_crds::conditions::CALL_CHAIN.len())
}

fn view_format(f: i32) -> Result<ViewFormat, ApiError> {
    match pb::ViewFormat::try_from(f) {
        Ok(pb::ViewFormat::Unspecified | pb::ViewFormat::Canonical) => Ok(ViewFormat::Canonical),
        Ok(pb::ViewFormat::Openai) => Ok(ViewFormat::OpenAi),
        Ok(pb::ViewFormat::OpenaiResponses) => Ok(ViewFormat::OpenAiResponses),
        Ok(pb::ViewFormat::Anthropic) => Ok(ViewFormat::Anthropic),
        Ok(pb::ViewFormat::Mcp) => Ok(ViewFormat::Mcp),
        Err(_) => Err(ApiError::field(
            "format",
            format!("expected a ViewFormat (0-4), got {f}"),
        )),
    }
}

/// The view `caller` gets: its own grants' tools, or a subagent's — its delegator's grants
/// narrowed to what its delegation allows. `parent_tool` is the tool of the subagent's parent
/// call as the runtime found it (`None`: the parent is gone, and the subagent sees nothing).
pub fn caller_view(
    policies: &toolgate_core::lifecycle::Policies,
    usage: &GrantUsages,
    namespace: &str,
    caller: &crate::Caller,
    req: &pb::GetToolViewRequest,
    parent_tool: Option<&str>,
) -> Result<pb::ToolView, ApiError> {
    if caller.delegation.is_none() {
        return tool_view(policies, usage, namespace, &caller.principal, req, None);
    }
    let allowed =
        toolgate_core::delegation::tools_allowed(&policies.registry, namespace, parent_tool);
    tool_view(
        policies,
        usage,
        namespace,
        &caller.grantee(),
        req,
        Some(&allowed),
    )
}

/// Compile the view a principal gets for a GetToolView request, checking its fields.
pub fn tool_view(
    policies: &toolgate_core::lifecycle::Policies,
    usage: &GrantUsages,
    namespace: &str,
    principal: &Principal,
    req: &pb::GetToolViewRequest,
    only: Option<&[String]>,
) -> Result<pb::ToolView, ApiError> {
    let format = view_format(req.format)?;
    let max_tools = match req.max_tools {
        0 => 8,
        n @ 1..=256 => n as usize,
        n => {
            return Err(ApiError::field(
                "max_tools",
                format!("expected 1 to 256, got {n}"),
            ));
        }
    };
    let action_type = if req.action_type.is_empty() {
        None
    } else {
        Some(parse_action_type(&req.action_type).map_err(|_| {
            ApiError::field(
                "action_type",
                format!(
                    "expected an action type such as read or write, got {:?}",
                    req.action_type
                ),
            )
        })?)
    };
    let failures = BTreeMap::new();
    let registry = &policies.registry;
    let mut view = compile_view(
        registry,
        &ViewRequest {
            namespace,
            principal,
            intent: &req.intent,
            action_type,
            domains: &[],
            max_tools,
            recent_failures: &failures,
            explain: req.explain,
            now: Timestamp::now(),
            usage,
        },
    );
    // A subagent sees its delegator's tools that its delegation allows, no others.
    if let Some(only) = only {
        let (kept, dropped): (Vec<_>, Vec<_>) = std::mem::take(&mut view.exposed)
            .into_iter()
            .partition(|t| only.contains(&t.name));
        view.exposed = kept;
        view.hidden.extend(
            dropped
                .into_iter()
                .map(|t| toolgate_core::view::HiddenTool {
                    name: t.name,
                    code: "delegation-not-allowed",
                    reason: "not among the tools the delegation allows".into(),
                }),
        );
    }
    Ok(pb::ToolView {
        exposed: view
            .exposed
            .iter()
            .map(|t| pb::ExposedTool {
                name: t.name.clone(),
                provider_name: t.provider_name.clone(),
                digest: t.digest.clone(),
                risk_tier: t.tier.to_string(),
                needs_approval: t.approval == ApprovalHint::Required,
                confirmation: t
                    .confirmation
                    .map(|c| c.as_str().to_string())
                    .unwrap_or_default(),
                reason: t.reason.clone(),
                grant: t.grant.clone(),
            })
            .collect(),
        hidden: view
            .hidden
            .iter()
            .map(|h| pb::HiddenTool {
                name: h.name.clone(),
                code: h.code.into(),
                reason: h.reason.clone(),
            })
            .collect(),
        payload_json: view.render(format).to_string(),
        not_ranked: u32::try_from(view.not_ranked).unwrap_or(u32::MAX),
        skills: toolgate_core::skill::matching(
            &policies.skills,
            namespace,
            &req.intent,
            MAX_VIEW_SKILLS,
        )
        .into_iter()
        .map(|m| pb::SkillRef {
            name: m.name,
            description: m.description,
            reason: m.reason,
            tools: m.tools,
        })
        .collect(),
    })
}

/// The most skills a view lists.
const MAX_VIEW_SKILLS: usize = 4;

/// A skill of the policies, as GetSkill answers: its instructions (`instructions` when the
/// runtime read them on request, else the ones it holds), or why not.
pub fn skill_message(
    policies: &toolgate_core::lifecycle::Policies,
    namespace: &str,
    name: &str,
    read: Option<toolgate_core::skill::LoadedSkill>,
) -> Result<pb::Skill, ApiError> {
    let not_found = || ApiError::NotFound {
        what: format!("Skill {namespace}/{name}"),
    };
    let entry = policies
        .skills
        .iter()
        .find(|s| s.namespace == namespace && s.name == name)
        .ok_or_else(not_found)?;
    let (instructions, digest, withheld, description, tools) = match read {
        Some(r) => (
            r.instructions,
            r.instructions_digest,
            r.withheld,
            r.description,
            r.tools.into_iter().map(|t| t.descriptor).collect(),
        ),
        None => (
            entry.instructions.clone().ok_or_else(not_found)?,
            entry.instructions_digest.clone(),
            entry.withheld.clone(),
            entry.description.clone(),
            entry.tools.clone(),
        ),
    };
    if let Some(why) = withheld {
        return Err(ApiError::FailedPrecondition {
            code: "skill-withheld",
            message: why,
        });
    }
    Ok(pb::Skill {
        name: name.to_string(),
        description,
        instructions,
        instructions_digest: digest,
        tools,
    })
}

/// What an explanation adds to a call: the view, the events, who approved, how it was sandboxed.
#[derive(Debug, Default)]
pub struct Trace {
    /// The view the principal gets for the call's intent.
    pub view: Option<pb::ToolView>,
    /// The call's events.
    pub events: Vec<pb::CallEvent>,
    /// The call's approvals by name, comma-separated ([`approvals_line`]).
    pub approval: String,
    /// Who gave each, in the same order.
    pub approver: String,
    /// How the sandbox was resolved (`toolgate_core::lifecycle::sandbox_view`; null: unknown).
    pub sandbox: serde_json::Value,
    /// A delegation's calls (its subagent's), by id.
    pub children: Vec<String>,
}

/// ExplainCall's approval and approver fields from the approvals the core names for a call
/// (`toolgate_core::lifecycle::explained_approvals`): names, then approvers, each
/// comma-separated in the same order.
pub fn approvals_line(approvals: &[(&str, &str)]) -> (String, String) {
    let names: Vec<&str> = approvals.iter().map(|(n, _)| *n).collect();
    let approvers: Vec<&str> = approvals.iter().map(|(_, a)| *a).collect();
    (names.join(", "), approvers.join(", "))
}

/// A call's recorded artifact by id, or NotFound in words both backends use.
pub fn artifact_of(
    status: &ToolCallStatus,
    call: &str,
    artifact_id: &str,
) -> Result<toolgate_crds::ArtifactRef, ApiError> {
    status
        .result
        .as_ref()
        .and_then(|r| r.artifacts.iter().find(|a| a.artifact_id == artifact_id))
        .cloned()
        .ok_or_else(|| ApiError::NotFound {
            what: format!("artifact {artifact_id:?} of call {call}"),
        })
}

/// The view an explanation shows: what the model could see for the call's own intent.
pub fn explanation_view_request(namespace: &str, spec: &ToolCallSpec) -> pb::GetToolViewRequest {
    pb::GetToolViewRequest {
        namespace: namespace.to_string(),
        intent: format!("{} {}", spec.intent.user_goal, spec.intent.current_task),
        format: pb::ViewFormat::Canonical as i32,
        max_tools: 8,
        action_type: String::new(),
        explain: true,
    }
}

/// An Explanation: the call and its trace; the sandbox policy, credential binding (by name),
/// observed effects and verifier come from the status.
pub fn explanation(call: pb::Call, status: &ToolCallStatus, trace: Trace) -> pb::Explanation {
    let runtime = status.runtime.as_ref();
    let result = status.result.as_ref();
    pb::Explanation {
        call: Some(call),
        view: trace.view,
        events: trace.events,
        approval: trace.approval,
        approver: trace.approver,
        sandbox_policy: runtime
            .and_then(|r| r.sandbox_policy_ref.as_ref().map(|r| r.name.clone()))
            .unwrap_or_default(),
        credential_binding: runtime
            .and_then(|r| r.credential_binding_ref.as_ref().map(|r| r.name.clone()))
            .unwrap_or_default(),
        sandbox_json: if trace.sandbox.is_null() {
            String::new()
        } else {
            trace.sandbox.to_string()
        },
        effects_json: result
            .and_then(|r| r.effects_observed.as_ref())
            .and_then(|e| serde_json::to_string(e).ok())
            .unwrap_or_default(),
        verifier_json: result
            .and_then(|r| r.verifier.as_ref())
            .and_then(|v| serde_json::to_string(v).ok())
            .unwrap_or_default(),
        children: trace.children,
    }
}
