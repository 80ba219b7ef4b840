//! Requests checked the same way by both backends: what a proposal must hold, and how names and
//! namespaces are chosen.

use jiff::Timestamp;
use toolgate_crds::{ActionType, CallIntent, ToolCallSpec, ToolRef};
use toolgate_proto::v1 as pb;

use crate::auth::Caller;
use crate::error::ApiError;
use crate::validate::{Checked, parse_action_type};
pub use crate::validate::{is_digest, page_size};

/// A proposal whose fields passed their checks.
#[derive(Debug, Clone)]
pub struct Proposal {
    /// Namespace of the call.
    pub namespace: String,
    /// The tool as requested.
    pub tool: String,
    /// Args (a JSON object).
    pub args: serde_json::Value,
    /// The intent; its action type is [`Proposal::action_type`]'s, or the tool's when the
    /// proposal names none ([`Proposal::into_spec`]).
    pub intent: CallIntent,
    /// The action type the proposal names, if it names one.
    pub action_type: Option<ActionType>,
    /// The pinned digest, if the caller gave one.
    pub tool_digest: Option<String>,
    /// Idempotency key.
    pub idempotency_key: Option<String>,
    /// Dry run.
    pub dry_run: bool,
    /// Session.
    pub session_id: Option<String>,
}

impl Proposal {
    /// Check a ProposeCall request; every error names its field.
    pub fn validate(caller: &Caller, req: &pb::ProposeCallRequest) -> Result<Proposal, ApiError> {
        req.check()?;
        let namespace = namespace_of(caller, &req.namespace)?;
        let args: serde_json::Value = serde_json::from_str(&req.args_json)
            .map_err(|e| ApiError::field("args_json", format!("expected a JSON object: {e}")))?;
        if !args.is_object() {
            return Err(ApiError::field(
                "args_json",
                format!(
                    "expected a JSON object, got {}",
                    toolgate_core::args::short_json(&args)
                ),
            ));
        }
        let intent = req.intent.clone().unwrap_or_default();
        let action_type = if intent.action_type.is_empty() {
            None
        } else {
            Some(parse_action_type(&intent.action_type)?)
        };
        Ok(Proposal {
            namespace,
            tool: req.tool.clone(),
            args,
            intent: CallIntent {
                user_goal: intent.user_goal,
                current_task: intent.current_task,
                action_type: action_type.unwrap_or(ActionType::Read),
                target: None,
                expected_effects: None,
                rationale_summary: intent.rationale_summary,
                evidence_refs: intent.evidence_refs,
                confidence_percent: None,
            },
            action_type,
            tool_digest: (!req.tool_digest.is_empty()).then(|| req.tool_digest.clone()),
            idempotency_key: (!req.idempotency_key.is_empty()).then(|| req.idempotency_key.clone()),
            dry_run: req.dry_run,
            session_id: (!req.session_id.is_empty()).then(|| req.session_id.clone()),
        })
    }

    /// The call's spec: the principal is the authenticated caller, the version pinned, and the
    /// action type the proposal's or, when it names none, the tool's own when the tool declares
    /// exactly one (`tool_actions`: the registered tool's action types, `None` when no tool of
    /// that name is registered). A proposal that names none for a tool that does several things,
    /// or for no tool at all, is refused with the ones it could name.
    pub fn into_spec(
        mut self,
        caller: &Caller,
        tool_name: String,
        digest: Option<String>,
        tool_actions: Option<&[ActionType]>,
    ) -> Result<ToolCallSpec, ApiError> {
        if self.action_type.is_none() {
            self.intent.action_type = match tool_actions {
                Some([only]) => *only,
                Some(several) => {
                    return Err(ApiError::field(
                        "intent.action_type",
                        format!(
                            "expected one of {tool_name}'s action types ({}): it does more than one, so say which",
                            several
                                .iter()
                                .map(|a| a.as_str())
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                    ));
                }
                None => {
                    return Err(ApiError::field(
                        "intent.action_type",
                        format!(
                            "expected an action type (read, write, execute, …): no tool {tool_name:?} is registered to take one from"
                        ),
                    ));
                }
            };
        }
        Ok(ToolCallSpec {
            tool_ref: ToolRef {
                name: tool_name,
                digest,
            },
            principal: caller.name().to_string(),
            principal_groups: caller.principal.groups.clone(),
            args: self.args,
            intent: self.intent,
            proposed_by: if caller.delegation.is_some() {
                toolgate_crds::ProposedBy::Subagent
            } else {
                Default::default()
            },
            session_id: self.session_id,
            run_id: None,
            idempotency_key: self.idempotency_key,
            dry_run: self.dry_run,
            delegation: caller.delegation.clone(),
        })
    }
}

/// The namespace a request acts in: the one it names, or the caller's service-account namespace.
/// Either way a DNS label, so it is safe as a folder or an API path.
pub fn namespace_of(caller: &Caller, requested: &str) -> Result<String, ApiError> {
    // A subagent acts in its delegation's namespace only.
    if caller.delegation.is_some()
        && let Some(ns) = toolgate_core::delegation::namespace_of_principal(caller.name())
    {
        if !requested.is_empty() && requested != ns {
            return Err(ApiError::PermissionDenied {
                code: "delegation-namespace",
                message: format!(
                    "a subagent acts in its delegation's namespace {ns}, not {requested}"
                ),
            });
        }
        return Ok(ns.to_string());
    }
    if !requested.is_empty() {
        crate::validate::namespace("namespace", requested)?;
        return Ok(requested.to_string());
    }
    let ns = caller
        .principal
        .service_account()
        .map(|(ns, _)| ns.to_string())
        .ok_or_else(|| {
            ApiError::field(
                "namespace",
                format!(
                    "expected a namespace: {} is not a service account, so it has none by default",
                    caller.name()
                ),
            )
        })?;
    crate::validate::namespace("namespace", &ns)?;
    Ok(ns)
}

/// `call-20261130-081203-4f2a9c`: sorts by time, unique within the process and across restarts.
pub fn new_call_name(now: Timestamp) -> String {
    use sha2::{Digest, Sha256};
    static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let seq = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut h = Sha256::new();
    h.update(now.as_nanosecond().to_le_bytes());
    h.update(seq.to_le_bytes());
    h.update(std::process::id().to_le_bytes());
    let rand = hex::encode(&h.finalize()[..3]);
    // RFC 3339 in UTC: 2026-11-30T08:12:03…Z → 20261130-081203.
    let t = now.to_string();
    let digits = |r: std::ops::Range<usize>| -> String {
        t.get(r)
            .unwrap_or_default()
            .chars()
            .filter(char::is_ascii_digit)
            .collect()
    };
    format!("call-{}-{}-{rand}", digits(0..10), digits(11..19))
}

/// Bytes of calls one ListCalls page holds at most, whatever its size asks: well under the 4 MiB a
/// gRPC client accepts by default, so one large call never hides the others (pending approvals
/// among them) behind an oversized response.
pub const PAGE_BYTES: usize = 1 << 20;

/// A page of calls in list order. `calls` holds up to `size + 1` of them (one more tells whether
/// there is a next page); the page stops earlier when [`PAGE_BYTES`] would be exceeded, and a
/// call too large to fit alone is shown trimmed, so a page always moves forward.
pub fn page(calls: Vec<pb::Call>, size: usize) -> pb::ListCallsResponse {
    use prost::Message;
    let total = calls.len();
    let mut out = Vec::new();
    let mut bytes = 0usize;
    for call in calls.into_iter().take(size) {
        let len = call.encoded_len();
        if len > PAGE_BYTES && out.is_empty() {
            out.push(trimmed(call));
            break;
        }
        if bytes + len > PAGE_BYTES {
            break;
        }
        bytes += len;
        out.push(call);
    }
    let more = out.len() < total;
    pb::ListCallsResponse {
        next_page_token: if more {
            out.last().map(|c| c.id.clone()).unwrap_or_default()
        } else {
            String::new()
        },
        calls: out,
    }
}

/// A call cut down to what a list needs, for one too large to list whole (GetCall shows it all).
fn trimmed(mut call: pb::Call) -> pb::Call {
    const KEPT: usize = 1024;
    let cut = |s: &mut String| {
        if s.len() > KEPT {
            let mut end = KEPT;
            while !s.is_char_boundary(end) {
                end -= 1;
            }
            s.truncate(end);
            s.push_str("… (cut; GetCall shows it whole)");
        }
    };
    call.args_json.clear();
    call.status_json.clear();
    for s in [
        &mut call.tool,
        &mut call.principal,
        &mut call.output_preview,
        &mut call.idempotency_key,
    ] {
        cut(s);
    }
    call.conditions.truncate(16);
    for c in &mut call.conditions {
        cut(&mut c.message);
    }
    call.reasons.truncate(16);
    for r in &mut call.reasons {
        cut(&mut r.message);
    }
    call.artifacts.truncate(16);
    call
}

/// Whether a call passes a ListCalls request's filters.
pub fn list_filter_matches(
    req: &pb::ListCallsRequest,
    namespace: &str,
    phase: &str,
    tool: &str,
    principal: &str,
) -> bool {
    (req.namespace.is_empty() || namespace == req.namespace)
        && (req.phase.is_empty() || phase == req.phase)
        && (req.tool.is_empty() || tool == req.tool)
        && (req.principal.is_empty() || principal == req.principal)
}

/// A subagent's CompleteDelegation: the delegation it ends (the caller's own, from its token)
/// and its report, or why it is refused (not a subagent; `result_json` not JSON).
pub fn delegation_report(
    caller: &Caller,
    req: pb::CompleteDelegationRequest,
) -> Result<
    (
        &toolgate_crds::CallDelegation,
        toolgate_core::delegation::Report,
    ),
    ApiError,
> {
    let Some(delegation) = &caller.delegation else {
        return Err(ApiError::PermissionDenied {
            code: "not-a-subagent",
            message: "only a subagent acting with its delegation token ends a delegation".into(),
        });
    };
    let result = if req.result_json.is_empty() {
        None
    } else {
        Some(
            serde_json::from_str(&req.result_json)
                .map_err(|e| ApiError::field("result_json", format!("expected JSON: {e}")))?,
        )
    };
    Ok((
        delegation,
        toolgate_core::delegation::Report {
            summary: req.summary,
            result,
            failed: req.failed,
            tokens_used: (req.tokens_used > 0).then_some(req.tokens_used),
        },
    ))
}

#[cfg(test)]
mod properties {
    use super::*;
    use proptest::prelude::*;
    use toolgate_core::principal::Principal;

    fn caller() -> Caller {
        Caller {
            principal: Principal::new("system:serviceaccount:team-a:fixer"),
            approver_in: vec![],
            reader_in: vec![],
            delegation: None,
        }
    }

    #[test]
    fn the_call_records_the_authenticated_principal_and_groups() {
        let caller = Caller {
            principal: Principal::new("alice@example.com").with_groups(["team-a-reviewers"]),
            approver_in: vec![],
            reader_in: vec![],
            delegation: None,
        };
        let req = pb::ProposeCallRequest {
            namespace: "team-a".into(),
            tool: "test.echo".into(),
            args_json: "{}".into(),
            intent: Some(pb::Intent {
                user_goal: "g".into(),
                current_task: "t".into(),
                action_type: "execute".into(),
                rationale_summary: "r".into(),
                evidence_refs: vec![],
            }),
            ..Default::default()
        };
        let spec = Proposal::validate(&caller, &req)
            .expect("valid")
            .into_spec(&caller, "test.echo".into(), None, None)
            .expect("an action type named");
        assert_eq!(spec.principal, "alice@example.com");
        assert_eq!(spec.principal_groups, vec!["team-a-reviewers".to_string()]);
    }

    #[test]
    fn an_action_type_left_out_is_the_tools_when_it_does_one_thing() {
        let caller = Caller {
            principal: Principal::new("system:serviceaccount:team-a:fixer"),
            approver_in: vec![],
            reader_in: vec![],
            delegation: None,
        };
        let req = pb::ProposeCallRequest {
            namespace: "team-a".into(),
            tool: "file.read".into(),
            args_json: "{}".into(),
            intent: Some(pb::Intent {
                user_goal: "fix the docs".into(),
                current_task: "read the README".into(),
                rationale_summary: "the README is what changes".into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        let proposal = || Proposal::validate(&caller, &req).expect("valid without one");
        let spec = proposal()
            .into_spec(&caller, "file.read".into(), None, Some(&[ActionType::Read]))
            .expect("taken from the tool");
        assert_eq!(spec.intent.action_type, ActionType::Read);
        let several = proposal()
            .into_spec(
                &caller,
                "file.patch".into(),
                None,
                Some(&[ActionType::Read, ActionType::Patch]),
            )
            .expect_err("ambiguous");
        let (code, field) = (several.code(), several.to_string());
        assert_eq!(code, "invalid-argument");
        assert!(
            field.contains("intent.action_type") && field.contains("read, patch"),
            "{field}"
        );
        let unknown = proposal()
            .into_spec(&caller, "no.such".into(), None, None)
            .expect_err("nothing to take it from");
        assert!(
            unknown.to_string().contains("no tool \"no.such\""),
            "{unknown}"
        );
    }

    #[test]
    fn pages_keep_to_their_byte_budget_and_always_move_forward() {
        use prost::Message;
        let call = |i: usize, bytes: usize| pb::Call {
            id: format!("call-{i:04}"),
            args_json: "a".repeat(bytes),
            ..Default::default()
        };
        let all: Vec<pb::Call> = (0..30).map(|i| call(i, 200 * 1024)).collect();
        let mut from = 0;
        let mut pages = 0;
        while from < all.len() {
            let p = page(all[from..].iter().take(51).cloned().collect(), 50);
            let bytes: usize = p.calls.iter().map(Message::encoded_len).sum();
            assert!(bytes <= PAGE_BYTES, "{bytes}");
            assert!(!p.calls.is_empty());
            from += p.calls.len();
            pages += 1;
            if p.next_page_token.is_empty() {
                break;
            }
            assert_eq!(p.next_page_token, all[from - 1].id);
        }
        assert_eq!(from, 30);
        assert!(pages > 1);
        let giant = page(vec![call(0, 5 << 20), call(1, 10)], 50);
        assert_eq!(giant.calls.len(), 1);
        assert!(giant.calls[0].encoded_len() < PAGE_BYTES);
        assert_eq!(giant.next_page_token, "call-0000");
    }

    proptest! {
        /// Any request: a proposal or an error that names a field, never a panic.
        #[test]
        fn proposals_never_panic_and_errors_name_a_field(
            tool in "\\PC{0,20}",
            args in "\\PC{0,60}|\\{\"[a-z]{1,5}\": ?[0-9a-z\"]{1,8}\\}",
            action in "[a-z_]{0,14}",
            goal in "\\PC{0,30}",
            key in "\\PC{0,20}",
            digest in "(sha256:[a-f0-9]{64})?|\\PC{0,20}",
            namespace in "[a-z-]{0,10}",
        ) {
            let req = pb::ProposeCallRequest {
                namespace,
                tool,
                tool_digest: digest,
                args_json: args,
                intent: Some(pb::Intent {
                    user_goal: goal.clone(),
                    current_task: goal.clone(),
                    action_type: action,
                    rationale_summary: goal,
                    evidence_refs: vec![],
                }),
                idempotency_key: key,
                dry_run: false,
                session_id: String::new(),
            };
            match Proposal::validate(&caller(), &req) {
                Ok(p) => {
                    prop_assert!(p.args.is_object());
                    prop_assert!(!p.tool.is_empty());
                }
                Err(ApiError::InvalidArgument { field, message }) => {
                    prop_assert!(!field.is_empty() && !message.is_empty());
                }
                Err(other) => prop_assert!(false, "unexpected error kind: {other}"),
            }
        }
    }
}
