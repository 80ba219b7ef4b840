//! Every field of every request, checked before a backend sees it: identifiers have the
//! Kubernetes shape they stand for (a namespace or call id becomes a folder, a store key or an
//! API path), every string has a bound, enums are known values. A rejection is an
//! InvalidArgument naming the field, what was expected and what came.

use toolgate_core::lifecycle::phase_name;
use toolgate_core::names::{
    LABEL_RULE, MAX_SUBDOMAIN, SUBDOMAIN_RULE, is_dns_label, is_dns_subdomain,
};
use toolgate_crds::ActionType;
use toolgate_proto::v1 as pb;

use crate::error::ApiError;

/// Longest free text of an intent (goal, task, rationale) or a view's intent.
pub const MAX_INTENT_TEXT: usize = 2048;
/// Longest comment of an approval or denial, or reason of a cancellation.
pub const MAX_COMMENT: usize = 1024;
/// Most evidence references of one intent, and the longest one.
pub const MAX_EVIDENCE_REFS: usize = 32;
/// Longest evidence reference.
pub const MAX_EVIDENCE_REF: usize = 1024;
/// Longest principal name in a filter (Kubernetes user names are free-form).
pub const MAX_PRINCIPAL: usize = 512;
/// Most tools a view may ask for.
pub const MAX_VIEW_TOOLS: u32 = 1000;
/// Longest page token (a call id: `namespace/name`).
pub const MAX_PAGE_TOKEN: usize = 63 + 1 + MAX_SUBDOMAIN;

/// What a got value looks like in a message: quoted, cut, never megabytes.
pub fn shown(s: &str) -> String {
    const SHOWN: usize = 80;
    if s.len() <= SHOWN {
        return format!("{s:?}");
    }
    let mut end = SHOWN;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{:?}… ({} bytes)", &s[..end], s.len())
}

/// A namespace: a DNS label.
pub fn namespace(field: &str, s: &str) -> Result<(), ApiError> {
    if is_dns_label(s) {
        return Ok(());
    }
    Err(ApiError::field(
        field,
        format!("expected {LABEL_RULE}, got {}", shown(s)),
    ))
}

/// A namespace or nothing (the caller's default).
pub fn optional_namespace(field: &str, s: &str) -> Result<(), ApiError> {
    if s.is_empty() {
        Ok(())
    } else {
        namespace(field, s)
    }
}

/// A call id: its name, or `namespace/name` (how the operator's API spells it).
pub fn call_id(field: &str, s: &str) -> Result<(), ApiError> {
    let ok = match s.split_once('/') {
        Some((ns, name)) => is_dns_label(ns) && is_dns_subdomain(name),
        None => is_dns_subdomain(s),
    };
    if ok {
        return Ok(());
    }
    Err(ApiError::field(
        field,
        format!(
            "expected a call id (a name that is {SUBDOMAIN_RULE}, optionally after `<namespace>/`), got {}",
            shown(s)
        ),
    ))
}

/// A tool as a request names it: its object name, canonical name or provider name (which may
/// hold '_' and capitals), at most 253 of `A-Z a-z 0-9 . _ -`, starting with a letter or digit.
pub fn tool_name(field: &str, s: &str) -> Result<(), ApiError> {
    let ok = !s.is_empty()
        && s.len() <= MAX_SUBDOMAIN
        && s.bytes().next().is_some_and(|b| b.is_ascii_alphanumeric())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
    if ok {
        return Ok(());
    }
    Err(ApiError::field(
        field,
        format!(
            "expected a tool name (1 to 253 of A-Z a-z 0-9 . _ -, starting with a letter or digit), got {}",
            shown(s)
        ),
    ))
}

/// A tool name or nothing (a filter).
pub fn optional_tool_name(field: &str, s: &str) -> Result<(), ApiError> {
    if s.is_empty() {
        Ok(())
    } else {
        tool_name(field, s)
    }
}

/// An idempotency key or session id: empty, or 1 to 253 of `A-Z a-z 0-9 . _ : -`.
pub fn key(field: &str, s: &str) -> Result<(), ApiError> {
    if s.is_empty()
        || (s.len() <= MAX_SUBDOMAIN
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._:-".contains(&b)))
    {
        return Ok(());
    }
    Err(ApiError::field(
        field,
        format!("expected 1 to 253 of A-Z a-z 0-9 . _ : -, got {}", shown(s)),
    ))
}

/// An artifact id (`stdout`, `stderr`, `effects`): 1 to 253 of `a-z A-Z 0-9 . _ -`, no `..`.
pub fn artifact_id(field: &str, s: &str) -> Result<(), ApiError> {
    tool_name(field, s).map_err(|_| {
        ApiError::field(
            field,
            format!(
                "expected an artifact id (1 to 253 of A-Z a-z 0-9 . _ -, starting with a letter or digit), got {}",
                shown(s)
            ),
        )
    })
}

/// A digest: empty, or `sha256:` and 64 lowercase hex digits.
pub fn optional_digest(field: &str, s: &str) -> Result<(), ApiError> {
    if s.is_empty() || is_digest(s) {
        return Ok(());
    }
    Err(ApiError::field(
        field,
        format!("expected sha256:<64 lowercase hex>, got {}", shown(s)),
    ))
}

/// Free text a person wrote: at most `max` bytes, no control characters but newline and tab
/// (an escape sequence in a comment would repaint a reviewer's terminal), and nothing that hides
/// or reorders text (a bidirectional override shows an approver a different intent than the one
/// a model reads; tag characters carry text no screen shows).
pub fn text(field: &str, s: &str, max: usize) -> Result<(), ApiError> {
    if s.len() > max {
        return Err(ApiError::field(
            field,
            format!("expected at most {max} bytes, got {}", s.len()),
        ));
    }
    if let Some(c) = s
        .chars()
        .find(|c| c.is_control() && *c != '\n' && *c != '\t')
    {
        return Err(ApiError::field(
            field,
            format!(
                "expected text without control characters, got U+{:04X}",
                u32::from(c)
            ),
        ));
    }
    if let Some((c, kind)) = toolgate_core::text::find_hidden(s) {
        return Err(ApiError::field(
            field,
            format!(
                "expected text without characters that hide or reorder it, got U+{:04X} ({kind})",
                u32::from(c)
            ),
        ));
    }
    Ok(())
}

/// Free text that must say something: 1 to `max` bytes, not only whitespace.
pub fn required_text(field: &str, s: &str, max: usize) -> Result<(), ApiError> {
    if s.trim().is_empty() {
        return Err(ApiError::field(
            field,
            format!("expected 1 to {max} bytes of text, got nothing"),
        ));
    }
    text(field, s, max)
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

/// A request whose fields are checked before a backend sees it.
pub trait Checked {
    /// Every field, or the first one that is wrong.
    fn check(&self) -> Result<(), ApiError>;
}

impl Checked for pb::GetToolViewRequest {
    fn check(&self) -> Result<(), ApiError> {
        optional_namespace("namespace", &self.namespace)?;
        text("intent", &self.intent, MAX_INTENT_TEXT)?;
        if !self.action_type.is_empty() {
            parse_action_type(&self.action_type).map_err(|e| rename(e, "action_type"))?;
        }
        if pb::ViewFormat::try_from(self.format).is_err() {
            return Err(ApiError::field(
                "format",
                format!("expected a ViewFormat (0 to 4), got {}", self.format),
            ));
        }
        if self.max_tools > MAX_VIEW_TOOLS {
            return Err(ApiError::field(
                "max_tools",
                format!("expected at most {MAX_VIEW_TOOLS}, got {}", self.max_tools),
            ));
        }
        Ok(())
    }
}

impl Checked for pb::GetDelegationTokenRequest {
    fn check(&self) -> Result<(), ApiError> {
        call_id("call_id", &self.call_id)
    }
}

impl Checked for pb::CompleteDelegationRequest {
    fn check(&self) -> Result<(), ApiError> {
        text(
            "summary",
            &self.summary,
            toolgate_core::delegation::MAX_SUMMARY_BYTES,
        )?;
        let max = toolgate_core::args::ArgsLimits::default().max_bytes;
        if self.result_json.len() > max {
            return Err(ApiError::field(
                "result_json",
                format!(
                    "expected at most {max} bytes of JSON, got {}",
                    self.result_json.len()
                ),
            ));
        }
        Ok(())
    }
}

impl Checked for pb::GetSkillRequest {
    fn check(&self) -> Result<(), ApiError> {
        optional_namespace("namespace", &self.namespace)?;
        namespace("name", &self.name)
    }
}

impl Checked for pb::ProposeCallRequest {
    fn check(&self) -> Result<(), ApiError> {
        optional_namespace("namespace", &self.namespace)?;
        tool_name("tool", &self.tool)?;
        optional_digest("tool_digest", &self.tool_digest)?;
        let max_args = toolgate_core::args::ArgsLimits::default().max_bytes;
        if self.args_json.len() > max_args {
            return Err(ApiError::field(
                "args_json",
                format!(
                    "expected at most {max_args} bytes of JSON, got {}",
                    self.args_json.len()
                ),
            ));
        }
        key("idempotency_key", &self.idempotency_key)?;
        key("session_id", &self.session_id)?;
        let Some(intent) = &self.intent else {
            return Err(ApiError::field(
                "intent",
                "expected the call's intent, got nothing",
            ));
        };
        required_text("intent.user_goal", &intent.user_goal, MAX_INTENT_TEXT)?;
        required_text("intent.current_task", &intent.current_task, MAX_INTENT_TEXT)?;
        required_text(
            "intent.rationale_summary",
            &intent.rationale_summary,
            MAX_INTENT_TEXT,
        )?;
        if intent.evidence_refs.len() > MAX_EVIDENCE_REFS {
            return Err(ApiError::field(
                "intent.evidence_refs",
                format!(
                    "expected at most {MAX_EVIDENCE_REFS} references, got {}",
                    intent.evidence_refs.len()
                ),
            ));
        }
        for (i, r) in intent.evidence_refs.iter().enumerate() {
            required_text(&format!("intent.evidence_refs[{i}]"), r, MAX_EVIDENCE_REF)?;
        }
        // Empty: the tool's own, when it declares one (`Proposal::into_spec`).
        if !intent.action_type.is_empty() {
            parse_action_type(&intent.action_type)?;
        }
        Ok(())
    }
}

impl Checked for pb::GetCallRequest {
    fn check(&self) -> Result<(), ApiError> {
        call_id("id", &self.id)
    }
}

impl Checked for pb::WatchCallRequest {
    fn check(&self) -> Result<(), ApiError> {
        call_id("id", &self.id)
    }
}

impl Checked for pb::ExplainCallRequest {
    fn check(&self) -> Result<(), ApiError> {
        call_id("id", &self.id)
    }
}

impl Checked for pb::ListCallsRequest {
    fn check(&self) -> Result<(), ApiError> {
        optional_namespace("namespace", &self.namespace)?;
        let phases = toolgate_core::lifecycle::PHASES.map(|p| phase_name(Some(p)));
        if !self.phase.is_empty() && !phases.contains(&self.phase.as_str()) {
            return Err(ApiError::field(
                "phase",
                format!(
                    "expected one of {}, got {}",
                    phases.join(", "),
                    shown(&self.phase)
                ),
            ));
        }
        optional_tool_name("tool", &self.tool)?;
        text("principal", &self.principal, MAX_PRINCIPAL)?;
        page_size(self)?;
        if !self.page_token.is_empty() {
            call_id("page_token", &self.page_token).map_err(|_| {
                ApiError::field(
                    "page_token",
                    format!(
                        "expected the next_page_token of an earlier ListCalls response, got {}",
                        shown(&self.page_token)
                    ),
                )
            })?;
        }
        Ok(())
    }
}

impl Checked for pb::CancelCallRequest {
    fn check(&self) -> Result<(), ApiError> {
        call_id("id", &self.id)?;
        text("reason", &self.reason, MAX_COMMENT)
    }
}

impl Checked for pb::ApproveCallRequest {
    fn check(&self) -> Result<(), ApiError> {
        call_id("id", &self.id)?;
        for (field, d) in [
            ("args_digest", &self.args_digest),
            ("tool_digest", &self.tool_digest),
        ] {
            if d.is_empty() {
                return Err(ApiError::field(
                    field,
                    "expected the digest the approver was shown (GetCall returns it), got nothing",
                ));
            }
            optional_digest(field, d)?;
        }
        if self.ttl_seconds > 86_400 {
            return Err(ApiError::field(
                "ttl_seconds",
                format!("expected at most 86400, got {}", self.ttl_seconds),
            ));
        }
        text("comment", &self.comment, MAX_COMMENT)
    }
}

impl Checked for pb::DenyCallRequest {
    fn check(&self) -> Result<(), ApiError> {
        call_id("id", &self.id)?;
        text("comment", &self.comment, MAX_COMMENT)
    }
}

impl Checked for pb::GetArtifactRequest {
    fn check(&self) -> Result<(), ApiError> {
        call_id("call_id", &self.call_id)?;
        artifact_id("artifact_id", &self.artifact_id)
    }
}

/// The same error about another field.
fn rename(e: ApiError, to: &str) -> ApiError {
    match e {
        ApiError::InvalidArgument { message, .. } => ApiError::field(to, message),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field_of(r: Result<(), ApiError>) -> String {
        match r {
            Err(ApiError::InvalidArgument { field, .. }) => field,
            other => panic!("expected InvalidArgument, got {other:?}"),
        }
    }

    #[test]
    fn identifiers_that_would_be_paths_are_refused() {
        for bad in [
            "/tmp/x/absns",
            "../../../../tmp/x/dotdot",
            "team-a/../team-b",
            "team\0a",
            "Team-A",
            "",
        ] {
            assert_eq!(
                field_of(namespace("namespace", bad)),
                "namespace",
                "{bad:?}"
            );
        }
        for bad in ["../x", "a/b/c", "/abs", "team-a/..", ".", "x\0"] {
            assert_eq!(field_of(call_id("id", bad)), "id", "{bad:?}");
        }
        call_id("id", "call-20261201-082600-4f2a9c").expect("a local id");
        call_id("id", "team-a/fix-serializer-3").expect("a cluster id");
        tool_name("tool", "file_read").expect("a provider name");
        tool_name("tool", "file.read").expect("an object name");
        assert_eq!(field_of(tool_name("tool", &"a".repeat(1 << 20))), "tool");
        assert_eq!(field_of(tool_name("tool", "../x")), "tool");
    }

    #[test]
    fn a_huge_value_is_not_echoed() {
        let Err(ApiError::InvalidArgument { message, .. }) =
            tool_name("tool", &"x".repeat(1 << 20))
        else {
            panic!("refused")
        };
        assert!(message.len() < 400, "{}", message.len());
        assert!(message.contains("1048576 bytes"), "{message}");
    }

    #[test]
    fn list_filters_and_tokens_are_checked() {
        let req = |f: fn(&mut pb::ListCallsRequest)| {
            let mut r = pb::ListCallsRequest::default();
            f(&mut r);
            r.check()
        };
        assert_eq!(field_of(req(|r| r.phase = "Exploded".into())), "phase");
        assert_eq!(
            field_of(req(|r| r.page_token = "%%garbage%%".into())),
            "page_token"
        );
        req(|r| {
            r.phase = "AwaitingApproval".into();
            r.page_token = "call-20261201-082600-4f2a9c".into();
        })
        .expect("valid");
    }

    #[test]
    fn text_has_a_bound_and_no_escape_sequences() {
        assert_eq!(
            field_of(text("comment", &"x".repeat(MAX_COMMENT + 1), MAX_COMMENT)),
            "comment"
        );
        assert_eq!(
            field_of(text("comment", "ok\u{1b}[2J", MAX_COMMENT)),
            "comment"
        );
        text("comment", "line one\nline two\tindented", MAX_COMMENT).expect("valid");
        for hidden in ["fix exe.\u{202E}txt", "go\u{E0049}\u{E0047}", "a\u{2066}b"] {
            assert_eq!(
                field_of(text("intent.user_goal", hidden, MAX_INTENT_TEXT)),
                "intent.user_goal",
                "{hidden:?}"
            );
        }
        text("intent.user_goal", "ship it ❤️ — 中文", MAX_INTENT_TEXT).expect("valid");
    }
}
