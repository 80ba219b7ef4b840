//! Requests checked the same way by both backends: what a proposal must hold, and how names and
//! namespaces are chosen.

use jiff::Timestamp;
use toolgate_crds::{ActionType, CallIntent, ToolCallSpec, ToolRef};
use toolgate_proto::v1 as pb;

use crate::auth::Caller;
use crate::error::ApiError;

/// A proposal whose fields passed their checks.
#[derive(Debug, Clone)]
pub struct Proposal {
    /// Namespace of the call.
    pub namespace: String,
    /// The tool as requested.
    pub tool: String,
    /// Args (a JSON object).
    pub args: serde_json::Value,
    /// The intent.
    pub intent: CallIntent,
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
        let namespace = namespace_of(caller, &req.namespace)?;
        if req.tool.is_empty() {
            return Err(ApiError::field("tool", "expected a tool name, got nothing"));
        }
        let args: serde_json::Value = serde_json::from_str(&req.args_json)
            .map_err(|e| ApiError::field("args_json", format!("expected a JSON object: {e}")))?;
        if !args.is_object() {
            return Err(ApiError::field(
                "args_json",
                format!(
                    "expected a JSON object, got {}",
                    toolgate_core::lint::short_json(&args)
                ),
            ));
        }
        let intent = req
            .intent
            .clone()
            .ok_or_else(|| ApiError::field("intent", "expected the call's intent, got nothing"))?;
        for (field, v) in [
            ("intent.user_goal", &intent.user_goal),
            ("intent.current_task", &intent.current_task),
            ("intent.rationale_summary", &intent.rationale_summary),
        ] {
            if v.trim().is_empty() || v.len() > 2048 {
                return Err(ApiError::field(
                    field,
                    format!("expected 1 to 2048 characters, got {}", v.len()),
                ));
            }
        }
        let action_type = parse_action_type(&intent.action_type)?;
        if !req.idempotency_key.is_empty()
            && (req.idempotency_key.len() > 253
                || !req
                    .idempotency_key
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "._:-".contains(c)))
        {
            return Err(ApiError::field(
                "idempotency_key",
                "expected 1 to 253 of A-Z a-z 0-9 . _ : -",
            ));
        }
        if !req.tool_digest.is_empty() && !is_digest(&req.tool_digest) {
            return Err(ApiError::field(
                "tool_digest",
                format!("expected sha256:<64 hex>, got {:?}", req.tool_digest),
            ));
        }
        Ok(Proposal {
            namespace,
            tool: req.tool.clone(),
            args,
            intent: CallIntent {
                user_goal: intent.user_goal,
                current_task: intent.current_task,
                action_type,
                target: None,
                expected_effects: None,
                rationale_summary: intent.rationale_summary,
                evidence_refs: intent.evidence_refs,
                confidence_percent: None,
            },
            tool_digest: (!req.tool_digest.is_empty()).then(|| req.tool_digest.clone()),
            idempotency_key: (!req.idempotency_key.is_empty()).then(|| req.idempotency_key.clone()),
            dry_run: req.dry_run,
            session_id: (!req.session_id.is_empty()).then(|| req.session_id.clone()),
        })
    }

    /// The call's spec: the principal is the authenticated caller, the version pinned.
    pub fn into_spec(
        self,
        caller: &Caller,
        tool_name: String,
        digest: Option<String>,
    ) -> ToolCallSpec {
        ToolCallSpec {
            tool_ref: ToolRef {
                name: tool_name,
                digest,
            },
            principal: caller.name().to_string(),
            principal_groups: caller.principal.groups.clone(),
            args: self.args,
            intent: self.intent,
            proposed_by: Default::default(),
            session_id: self.session_id,
            run_id: None,
            idempotency_key: self.idempotency_key,
            dry_run: self.dry_run,
        }
    }
}

pub fn namespace_of(caller: &Caller, requested: &str) -> Result<String, ApiError> {
    if !requested.is_empty() {
        return Ok(requested.to_string());
    }
    caller
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
        })
}

pub fn parse_action_type(s: &str) -> Result<ActionType, ApiError> {
    ActionType::ALL
        .into_iter()
        .find(|a| a.as_str() == s)
        .ok_or_else(|| {
            let all: Vec<&str> = ActionType::ALL.iter().map(|a| a.as_str()).collect();
            ApiError::field(
                "intent.action_type",
                format!("expected one of {}, got {s:?}", all.join(", ")),
            )
        })
}

pub fn is_digest(s: &str) -> bool {
    s.strip_prefix("sha256:").is_some_and(|h| {
        h.len() == 64
            && h.bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
    })
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

/// The page size a ListCalls request asks for (0 means 50; at most 500).
pub fn page_size(req: &pb::ListCallsRequest) -> Result<usize, ApiError> {
    match req.page_size {
        0 => Ok(50),
        n @ 1..=500 => Ok(n as usize),
        n => Err(ApiError::field(
            "page_size",
            format!("expected 1 to 500, got {n}"),
        )),
    }
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

#[cfg(test)]
mod properties {
    use super::*;
    use proptest::prelude::*;
    use toolgate_core::principal::Principal;

    fn caller() -> Caller {
        Caller {
            principal: Principal::new("system:serviceaccount:team-a:fixer"),
            approver_in: vec![],
        }
    }

    #[test]
    fn the_call_records_the_authenticated_principal_and_groups() {
        let caller = Caller {
            principal: Principal::new("alice@example.com").with_groups(["team-a-reviewers"]),
            approver_in: vec![],
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
        let spec = Proposal::validate(&caller, &req).expect("valid").into_spec(
            &caller,
            "test.echo".into(),
            None,
        );
        assert_eq!(spec.principal, "alice@example.com");
        assert_eq!(spec.principal_groups, vec!["team-a-reviewers".to_string()]);
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
