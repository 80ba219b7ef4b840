//! Kubernetes-shaped call state (ToolCallSpec and ToolCallStatus) as API messages. Both backends
//! keep a call in that shape, so they answer with the same messages.

use toolgate_core::call_state::phase_name;
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
    }
}


/// The causal-chain order of condition types, for events derived from conditions.
pub fn chain_position(kind: &str) -> usize {
    toolgate_crds::conditions::CALL_CHAIN
        .iter()
        .position(|k| *k == kind)
        .unwrap_or(toolgate_crds::conditions::CALL_CHAIN.len())
}
