"""Between the wire (the generated toolgate.v1 messages) and this package's types: requests
built and answers read once, for the blocking and the asyncio client alike."""

from __future__ import annotations

import json
import os
from typing import Any, Optional, Union

import grpc

from .types import (
    Artifact,
    Call,
    CallPage,
    Condition,
    DelegationToken,
    Event,
    Explanation,
    ExposedTool,
    HiddenTool,
    Phase,
    Reason,
    Skill,
    SkillRef,
    View,
)
from .v1 import toolgate_pb2 as pb

FORMATS = {
    "canonical": pb.VIEW_FORMAT_CANONICAL,
    "openai": pb.VIEW_FORMAT_OPENAI,
    "openai-responses": pb.VIEW_FORMAT_OPENAI_RESPONSES,
    "anthropic": pb.VIEW_FORMAT_ANTHROPIC,
    "mcp": pb.VIEW_FORMAT_MCP,
}

#: A call, or its id: every method that names one call takes either.
CallRef = Union[Call, str]


def call_id(call: CallRef) -> str:
    """The id of a call given as a :class:`Call` or as its id."""
    return call.id if isinstance(call, Call) else call


def target(server: str, tls: bool) -> tuple[str, bool]:
    """gRPC's ``host:port`` target from ``host:port`` or an ``http(s)://host:port`` URL, and
    whether the URL asks for TLS."""
    for scheme, secure in (("https://", True), ("http://", False)):
        if server.startswith(scheme):
            return server[len(scheme):].rstrip("/"), tls or secure
    if "://" in server:
        raise ValueError(
            f"server: expected host:port, http://host:port or https://host:port, got {server!r}"
        )
    return server, tls


def read_file(path: Optional[str]) -> Optional[bytes]:
    """A PEM file's bytes, or ``None`` for no file."""
    if not path:
        return None
    with open(path, "rb") as f:
        return f.read()


def connection(
    server: str, tls: bool, ca: Optional[str], client_cert: Optional[str], client_key: Optional[str]
) -> tuple[str, Any]:
    """The gRPC target and the TLS credentials (``None`` for plain text) a client connects with."""
    address, tls = target(server, tls)
    if not (tls or ca or client_cert):
        return address, None
    return address, grpc.ssl_channel_credentials(
        root_certificates=read_file(ca),
        private_key=read_file(client_key),
        certificate_chain=read_file(client_cert),
    )


def metadata(token: str, traceparent: Optional[str] = None) -> list[tuple[str, str]]:
    """A request's metadata: the bearer token, and the caller's trace context when it has one."""
    md = [("authorization", f"Bearer {token}")]
    if traceparent:
        md.append(("traceparent", traceparent))
    return md


def current_traceparent() -> Optional[str]:
    """The caller's trace context: the current OpenTelemetry span, or ``TRACEPARENT``."""
    try:
        from opentelemetry import propagate  # type: ignore[import-not-found,unused-ignore]

        carrier: dict[str, str] = {}
        propagate.inject(carrier)
        if carrier.get("traceparent"):
            return carrier["traceparent"]
    except ImportError:
        pass
    return os.environ.get("TRACEPARENT") or None


def view_request(
    intent: str, format: str, max_tools: int, action_type: str, namespace: str, explain: bool
) -> pb.GetToolViewRequest:
    if format not in FORMATS:
        raise ValueError(f"format: expected one of {', '.join(FORMATS)}, got {format!r}")
    return pb.GetToolViewRequest(
        namespace=namespace,
        intent=intent,
        format=FORMATS[format],
        max_tools=max_tools,
        action_type=action_type,
        explain=explain,
    )


def propose_request(
    tool: str,
    args: dict[str, Any],
    *,
    action_type: str,
    task: str,
    goal: str,
    rationale: str,
    evidence: list[str],
    tool_digest: str,
    idempotency_key: str,
    dry_run: bool,
    session_id: str,
    namespace: str,
) -> pb.ProposeCallRequest:
    return pb.ProposeCallRequest(
        namespace=namespace,
        tool=tool,
        tool_digest=tool_digest,
        args_json=json.dumps(args),
        intent=pb.Intent(
            user_goal=goal or task,
            current_task=task,
            action_type=action_type,
            rationale_summary=rationale or task,
            evidence_refs=evidence,
        ),
        idempotency_key=idempotency_key,
        dry_run=dry_run,
        session_id=session_id,
    )


def approve_request(
    call: Call, for_session: bool, ttl_seconds: int, comment: str
) -> pb.ApproveCallRequest:
    return pb.ApproveCallRequest(
        id=call.id,
        args_digest=call.args_digest,
        tool_digest=call.tool_digest,
        for_session=for_session,
        ttl_seconds=ttl_seconds,
        comment=comment,
    )


def list_request(
    phase: str, tool: str, principal: str, namespace: str, page_size: int, page_token: str
) -> pb.ListCallsRequest:
    return pb.ListCallsRequest(
        phase=str(phase),
        tool=tool,
        principal=principal,
        namespace=namespace,
        page_size=page_size,
        page_token=page_token,
    )


def complete_request(
    summary: str, result: Any, failed: bool, tokens_used: int
) -> pb.CompleteDelegationRequest:
    return pb.CompleteDelegationRequest(
        summary=summary,
        result_json="" if result is None else json.dumps(result),
        failed=failed,
        tokens_used=tokens_used,
    )


def call_of(c: pb.Call) -> Call:
    return Call(
        id=c.id,
        namespace=c.namespace,
        tool=c.tool,
        phase=Phase.parse(c.phase),
        decision=c.decision,
        risk_tier=c.risk_tier,
        args_digest=c.args_digest,
        tool_digest=c.tool_digest,
        output_preview=c.output_preview,
        exit_code=c.exit_code if c.HasField("exit_code") else None,
        principal=c.principal,
        created_at=c.created_at,
        dry_run=c.dry_run,
        parent_call=c.parent_call,
        reasons=tuple(Reason(code=r.code, message=r.message) for r in c.reasons),
        conditions=tuple(
            Condition(
                type=x.type,
                status=x.status,
                reason=x.reason,
                message=x.message,
                last_transition_time=x.last_transition_time,
            )
            for x in c.conditions
        ),
        artifacts=tuple(
            Artifact(
                id=a.artifact_id,
                kind=a.kind,
                content_hash=a.content_hash,
                size_bytes=a.size_bytes,
                uri=a.uri,
            )
            for a in c.artifacts
        ),
        status=json.loads(c.status_json) if c.status_json else {},
    )


def event_of(e: pb.CallEvent) -> Event:
    return Event(
        type=e.type,
        status=e.status,
        reason=e.reason,
        message=e.message,
        phase=Phase.parse(e.phase),
        sequence=e.sequence,
        time=e.time,
        terminal=e.terminal,
        call=call_of(e.call) if e.HasField("call") else None,
    )


def view_of(v: pb.ToolView) -> View:
    return View(
        tools=json.loads(v.payload_json) if v.payload_json else [],
        exposed=tuple(
            ExposedTool(
                name=t.name,
                provider_name=t.provider_name,
                digest=t.digest,
                risk_tier=t.risk_tier,
                needs_approval=t.needs_approval,
                reason=t.reason,
                grant=t.grant,
                confirmation=t.confirmation,
            )
            for t in v.exposed
        ),
        hidden=tuple(HiddenTool(name=h.name, code=h.code, reason=h.reason) for h in v.hidden),
        skills=tuple(
            SkillRef(name=k.name, description=k.description, reason=k.reason, tools=tuple(k.tools))
            for k in v.skills
        ),
    )


def skill_of(k: pb.Skill) -> Skill:
    return Skill(
        name=k.name,
        description=k.description,
        instructions=k.instructions,
        instructions_digest=k.instructions_digest,
        tools=tuple(k.tools),
    )


def page_of(r: pb.ListCallsResponse) -> CallPage:
    return CallPage(calls=tuple(call_of(c) for c in r.calls), next_page_token=r.next_page_token)


def token_of(d: pb.DelegationToken) -> DelegationToken:
    return DelegationToken(
        token=d.token, handoff=json.loads(d.handoff_json or "{}"), expires_at=d.expires_at
    )


def _split(text: str) -> tuple[str, ...]:
    return tuple(p.strip() for p in text.split(",") if p.strip())


def explanation_of(e: pb.Explanation) -> Explanation:
    def obj(text: str) -> dict[str, Any]:
        value = json.loads(text) if text else {}
        return value if isinstance(value, dict) else {"value": value}

    return Explanation(
        call=call_of(e.call),
        view=view_of(e.view) if e.HasField("view") else None,
        events=tuple(event_of(x) for x in e.events),
        approvals=_split(e.approval),
        approvers=_split(e.approver),
        sandbox_policy=e.sandbox_policy,
        credential_binding=e.credential_binding,
        sandbox=obj(e.sandbox_json),
        effects=obj(e.effects_json),
        verifier=obj(e.verifier_json),
        children=tuple(e.children),
    )
