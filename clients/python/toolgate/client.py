"""A thin, typed layer over the generated toolgate.v1 stubs."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any, Iterator, Optional

import grpc
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from .v1 import toolgate_pb2 as pb
from .v1 import toolgate_pb2_grpc as rpc

#: Phases after which a call changes no more.
TERMINAL = ("Succeeded", "Failed", "Denied", "Cancelled")

_FORMATS = {
    "canonical": pb.VIEW_FORMAT_CANONICAL,
    "openai": pb.VIEW_FORMAT_OPENAI,
    "openai-responses": pb.VIEW_FORMAT_OPENAI_RESPONSES,
    "anthropic": pb.VIEW_FORMAT_ANTHROPIC,
    "mcp": pb.VIEW_FORMAT_MCP,
}


class ToolgateError(Exception):
    """What the server refused, and why.

    ``code`` is the gRPC status (``grpc.StatusCode``), ``reason`` the server's stable reason code
    (``approval-self``, ``idempotency-key-reused``, …) and ``field`` the request field at fault
    for bad input (``intent.action_type``)."""

    def __init__(self, code: grpc.StatusCode, message: str, reason: str = "", field: str = ""):
        super().__init__(f"{reason or code.name}: {message}" + (f" (field {field})" if field else ""))
        self.code = code
        self.message = message
        self.reason = reason
        self.field = field

    @classmethod
    def from_rpc(cls, err: grpc.RpcError) -> "ToolgateError":
        reason, fieldpath = "", ""
        status = rpc_status.from_call(err) if hasattr(err, "trailing_metadata") else None
        if status is not None:
            for detail in status.details:
                if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
                    info = error_details_pb2.ErrorInfo()
                    detail.Unpack(info)
                    reason = info.reason
                    fieldpath = fieldpath or info.metadata.get("field", "")
                elif detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
                    bad = error_details_pb2.BadRequest()
                    detail.Unpack(bad)
                    if bad.field_violations:
                        fieldpath = bad.field_violations[0].field
        return cls(err.code(), err.details() or "", reason, fieldpath)


def _current_traceparent() -> Optional[str]:
    """The caller's trace context: the current OpenTelemetry span, or ``TRACEPARENT``."""
    try:
        from opentelemetry import propagate  # type: ignore[import-not-found]

        carrier: dict = {}
        propagate.inject(carrier)
        if carrier.get("traceparent"):
            return carrier["traceparent"]
    except ImportError:
        pass
    return os.environ.get("TRACEPARENT") or None


@dataclass
class Call:
    """A call as the server records it."""

    id: str
    namespace: str
    tool: str
    phase: str
    decision: str
    risk_tier: str
    args_digest: str
    tool_digest: str
    output_preview: str
    exit_code: Optional[int]
    reasons: list = field(default_factory=list)
    conditions: list = field(default_factory=list)
    artifacts: list = field(default_factory=list)
    status: dict = field(default_factory=dict)

    @property
    def done(self) -> bool:
        return self.phase in TERMINAL

    @classmethod
    def from_pb(cls, c: pb.Call) -> "Call":
        return cls(
            id=c.id,
            namespace=c.namespace,
            tool=c.tool,
            phase=c.phase,
            decision=c.decision,
            risk_tier=c.risk_tier,
            args_digest=c.args_digest,
            tool_digest=c.tool_digest,
            output_preview=c.output_preview,
            exit_code=c.exit_code if c.HasField("exit_code") else None,
            reasons=[{"code": r.code, "message": r.message} for r in c.reasons],
            conditions=[
                {"type": x.type, "status": x.status, "reason": x.reason, "message": x.message}
                for x in c.conditions
            ],
            status=json.loads(c.status_json) if c.status_json else {},
            artifacts=[
                {"id": a.artifact_id, "kind": a.kind, "content_hash": a.content_hash,
                 "size_bytes": a.size_bytes}
                for a in c.artifacts
            ],
        )


@dataclass
class Event:
    """One step of a call's causal chain."""

    type: str
    reason: str
    message: str
    phase: str
    # On the last event only: the call as it ended.
    call: Optional[Call] = None

    @classmethod
    def from_pb(cls, e: pb.CallEvent) -> "Event":
        end = Call.from_pb(e.call) if e.HasField("call") else None
        return cls(type=e.type, reason=e.reason, message=e.message, phase=e.phase, call=end)


@dataclass
class View:
    """The tools a model may see for one intent: ``tools`` is the payload in the requested
    provider format, ready for the model SDK; ``exposed`` and ``hidden`` say what and why;
    ``skills`` the skills the intent matches (instructions to read with ``Client.skill``)."""

    tools: Any
    exposed: list
    hidden: list
    skills: list = field(default_factory=list)


@dataclass
class Skill:
    """A skill's instructions: what to do, not a permission. Its scripts run only as ``tools``,
    when a grant allows them."""

    name: str
    description: str
    instructions: str
    instructions_digest: str
    tools: list


def _target(server: str, tls: bool) -> "tuple[str, bool]":
    """gRPC's ``host:port`` target from ``host:port`` or an ``http(s)://host:port`` URL, and
    whether the URL asks for TLS."""
    for scheme, secure in (("https://", True), ("http://", False)):
        if server.startswith(scheme):
            return server[len(scheme):].rstrip("/"), tls or secure
    if "://" in server:
        raise ValueError(f"server: expected host:port, http://host:port or https://host:port, got {server!r}")
    return server, tls


class Client:
    """A client of one toolgate server (``toolgate local`` or the operator's agent API).

    ``server`` is ``host:port``, or a URL as the command line takes it: ``http://host:port``, or
    ``https://host:port`` for TLS with the system's roots. TLS is also used when ``ca`` is given
    (or ``tls=True``), with ``client_cert``/``client_key`` for mutual TLS."""

    def __init__(
        self,
        server: str = "127.0.0.1:7070",
        token: Optional[str] = None,
        *,
        tls: bool = False,
        ca: Optional[str] = None,
        client_cert: Optional[str] = None,
        client_key: Optional[str] = None,
        timeout: float = 30.0,
    ):
        if not token:
            raise ValueError("token: a bearer token from the server's tokens file is required")
        self._token = token
        self._timeout = timeout
        server, tls = _target(server, tls)
        if tls or ca or client_cert:
            read = lambda p: open(p, "rb").read() if p else None  # noqa: E731
            creds = grpc.ssl_channel_credentials(
                root_certificates=read(ca),
                private_key=read(client_key),
                certificate_chain=read(client_cert),
            )
            self._channel = grpc.secure_channel(server, creds)
        else:
            self._channel = grpc.insecure_channel(server)
        self._stub = rpc.ToolgateStub(self._channel)

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _md(self):
        return [("authorization", f"Bearer {self._token}")]

    def _unary(self, method, request, extra_md=()):
        try:
            return method(request, metadata=self._md() + list(extra_md), timeout=self._timeout)
        except grpc.RpcError as e:
            raise ToolgateError.from_rpc(e) from None

    def view(
        self,
        intent: str,
        *,
        format: str = "openai",
        max_tools: int = 8,
        action_type: str = "",
        namespace: str = "",
        explain: bool = False,
    ) -> View:
        """The caller's tool view for ``intent``, in ``format`` (openai, openai-responses, anthropic, mcp,
        canonical)."""
        if format not in _FORMATS:
            raise ValueError(f"format: expected one of {', '.join(_FORMATS)}, got {format!r}")
        v = self._unary(
            self._stub.GetToolView,
            pb.GetToolViewRequest(
                namespace=namespace,
                intent=intent,
                format=_FORMATS[format],
                max_tools=max_tools,
                action_type=action_type,
                explain=explain,
            ),
        )
        return View(
            tools=json.loads(v.payload_json) if v.payload_json else [],
            exposed=[
                {"name": t.name, "provider_name": t.provider_name, "digest": t.digest,
                 "risk_tier": t.risk_tier, "needs_approval": t.needs_approval,
                 "confirmation": t.confirmation, "reason": t.reason, "grant": t.grant}
                for t in v.exposed
            ],
            hidden=[{"name": h.name, "code": h.code, "reason": h.reason} for h in v.hidden],
            skills=[{"name": k.name, "description": k.description, "reason": k.reason,
                     "tools": list(k.tools)} for k in v.skills],
        )

    def skill(self, name: str, *, namespace: str = "") -> Skill:
        """A skill's instructions (SKILL.md's body)."""
        k = self._unary(self._stub.GetSkill, pb.GetSkillRequest(namespace=namespace, name=name))
        return Skill(name=k.name, description=k.description, instructions=k.instructions,
                     instructions_digest=k.instructions_digest, tools=list(k.tools))

    def propose(
        self,
        tool: str,
        args: dict,
        *,
        action_type: str,
        task: str,
        goal: str = "",
        rationale: str = "",
        tool_digest: str = "",
        idempotency_key: str = "",
        dry_run: bool = False,
        session_id: str = "",
        namespace: str = "",
        traceparent: Optional[str] = None,
    ) -> Call:
        """Propose a call; it comes back decided (allowed, waiting for approval, or denied).

        The call's spans join the agent's trace: ``traceparent`` (W3C), else the current
        OpenTelemetry span when the ``opentelemetry`` package is installed, else the
        ``TRACEPARENT`` environment variable."""
        tp = traceparent or _current_traceparent()
        c = self._unary(
            self._stub.ProposeCall,
            pb.ProposeCallRequest(
                namespace=namespace,
                tool=tool,
                tool_digest=tool_digest,
                args_json=json.dumps(args),
                intent=pb.Intent(
                    user_goal=goal or task,
                    current_task=task,
                    action_type=action_type,
                    rationale_summary=rationale or task,
                ),
                idempotency_key=idempotency_key,
                dry_run=dry_run,
                session_id=session_id,
            ),
            [("traceparent", tp)] if tp else (),
        )
        return Call.from_pb(c)

    def get(self, call_id: str) -> Call:
        return Call.from_pb(self._unary(self._stub.GetCall, pb.GetCallRequest(id=call_id)))

    def watch(self, call_id: str) -> Iterator[Event]:
        """The call's events as they happen, until it ends."""
        try:
            for e in self._stub.WatchCall(
                pb.WatchCallRequest(id=call_id), metadata=self._md()
            ):
                yield Event.from_pb(e)
        except grpc.RpcError as e:
            raise ToolgateError.from_rpc(e) from None

    def wait(self, call_id: str) -> Call:
        """Follow the call to its end, or until it waits for a human, and return it."""
        for e in self.watch(call_id):
            if e.call is not None:
                return e.call
            if e.phase in TERMINAL:
                break
            # The log replays from the start: an AwaitingApproval event may be history.
            if e.phase == "AwaitingApproval":
                now = self.get(call_id)
                if now.phase == "AwaitingApproval":
                    return now
        return self.get(call_id)

    def approve(
        self,
        call: Call,
        *,
        for_session: bool = False,
        ttl_seconds: int = 0,
        comment: str = "",
    ) -> Call:
        """Approve exactly what ``call`` shows (its args and tool digests)."""
        return Call.from_pb(
            self._unary(
                self._stub.ApproveCall,
                pb.ApproveCallRequest(
                    id=call.id,
                    args_digest=call.args_digest,
                    tool_digest=call.tool_digest,
                    for_session=for_session,
                    ttl_seconds=ttl_seconds,
                    comment=comment,
                ),
            )
        )

    def deny(self, call_id: str, comment: str = "") -> Call:
        return Call.from_pb(
            self._unary(self._stub.DenyCall, pb.DenyCallRequest(id=call_id, comment=comment))
        )

    def delegation_token(self, call_id: str) -> dict:
        """The token a running delegation (a call of a subagent tool) hands its subagent, once:
        ``{"token", "handoff", "expires_at"}``. Start the subagent with ``Client(server,
        token=...)``; it sees and calls only what the delegation allows."""
        d = self._unary(self._stub.GetDelegationToken, pb.GetDelegationTokenRequest(call_id=call_id))
        return {"token": d.token, "handoff": json.loads(d.handoff_json or "{}"), "expires_at": d.expires_at}

    def complete_delegation(self, summary: str, result=None, *, failed: bool = False,
                            tokens_used: int = 0) -> Call:
        """End the caller's delegation (as its subagent) with a summary and a result."""
        return Call.from_pb(self._unary(self._stub.CompleteDelegation, pb.CompleteDelegationRequest(
            summary=summary, result_json="" if result is None else json.dumps(result),
            failed=failed, tokens_used=tokens_used)))

    def cancel(self, call_id: str) -> Call:
        return Call.from_pb(self._unary(self._stub.CancelCall, pb.CancelCallRequest(id=call_id)))

    def explain(self, call_id: str) -> dict:
        """Why the call went as it did: decision, approvals, sandbox, events (as a dict)."""
        from google.protobuf.json_format import MessageToDict

        e = self._unary(self._stub.ExplainCall, pb.ExplainCallRequest(id=call_id))
        return MessageToDict(e, preserving_proto_field_name=True)

    def artifact(self, call_id: str, artifact_id: str) -> Iterator[bytes]:
        """An artifact's bytes, as a stream of chunks."""
        try:
            for chunk in self._stub.GetArtifact(
                pb.GetArtifactRequest(call_id=call_id, artifact_id=artifact_id),
                metadata=self._md(),
            ):
                yield chunk.data
        except grpc.RpcError as e:
            raise ToolgateError.from_rpc(e) from None
