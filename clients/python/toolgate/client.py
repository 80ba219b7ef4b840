"""The blocking client: one method per request of toolgate's agent API (``toolgate.v1``)."""

from __future__ import annotations

from typing import Any, Iterator, Optional

import grpc

from . import _wire
from ._wire import CallRef, call_id
from .errors import DeadlineExceeded, WaitTimeout, from_rpc
from .types import Call, CallPage, DelegationToken, Event, Explanation, Phase, Skill, View
from .v1 import toolgate_pb2 as pb
from .v1 import toolgate_pb2_grpc as rpc


class Client:
    """A client of one toolgate server (``toolgate local`` or the operator's agent API).

    ``server`` is ``host:port``, or a URL as the command line takes it: ``http://host:port``, or
    ``https://host:port`` for TLS with the system's roots. TLS is also used when ``ca`` is given
    (or ``tls=True``), with ``client_cert``/``client_key`` for mutual TLS. ``timeout`` bounds
    each request, in seconds (a watch is bounded by its own ``timeout``).

    Every refusal raises a :class:`toolgate.ToolgateError` subclass carrying the server's stable
    reason code and, for bad input, the field at fault. Use it as a context manager, or
    :meth:`close` it."""

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
    ) -> None:
        if not token:
            raise ValueError("token: a bearer token from the server's tokens file is required")
        self._token = token
        self._timeout = timeout
        address, creds = _wire.connection(server, tls, ca, client_cert, client_key)
        self._channel = (
            grpc.secure_channel(address, creds) if creds else grpc.insecure_channel(address)
        )
        self._stub = rpc.ToolgateStub(self._channel)

    def close(self) -> None:
        """Close the connection."""
        self._channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _metadata(self, traceparent: Optional[str] = None) -> list[tuple[str, str]]:
        return _wire.metadata(self._token, traceparent)

    def _unary(self, method: Any, request: Any, traceparent: Optional[str] = None) -> Any:
        try:
            return method(request, metadata=self._metadata(traceparent), timeout=self._timeout)
        except grpc.RpcError as e:
            raise from_rpc(e) from None

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
        """The caller's tool view for ``intent``, in ``format`` (``openai``,
        ``openai-responses``, ``anthropic``, ``mcp``, ``canonical``): ``view.tools`` goes to the
        model as it is. ``explain`` also lists every hidden tool and why."""
        return _wire.view_of(
            self._unary(
                self._stub.GetToolView,
                _wire.view_request(intent, format, max_tools, action_type, namespace, explain),
            )
        )

    def skill(self, name: str, *, namespace: str = "") -> Skill:
        """A skill's instructions (SKILL.md's body)."""
        return _wire.skill_of(
            self._unary(self._stub.GetSkill, pb.GetSkillRequest(namespace=namespace, name=name))
        )

    def propose(
        self,
        tool: str,
        args: dict[str, Any],
        *,
        task: str,
        action_type: str = "",
        goal: str = "",
        rationale: str = "",
        evidence: Optional[list[str]] = None,
        tool_digest: str = "",
        idempotency_key: str = "",
        dry_run: bool = False,
        session_id: str = "",
        namespace: str = "",
        traceparent: Optional[str] = None,
    ) -> Call:
        """Propose a call of ``tool`` (its name, or the provider name the model used); it comes
        back decided: allowed (and starting), waiting for approval, or denied. ``action_type``
        left empty is the tool's own when it declares exactly one.

        The call's spans join the agent's trace: ``traceparent`` (W3C), else the current
        OpenTelemetry span when the ``opentelemetry`` package is installed, else the
        ``TRACEPARENT`` environment variable."""
        return _wire.call_of(
            self._unary(
                self._stub.ProposeCall,
                _wire.propose_request(
                    tool,
                    args,
                    action_type=action_type,
                    task=task,
                    goal=goal,
                    rationale=rationale,
                    evidence=evidence or [],
                    tool_digest=tool_digest,
                    idempotency_key=idempotency_key,
                    dry_run=dry_run,
                    session_id=session_id,
                    namespace=namespace,
                ),
                traceparent or _wire.current_traceparent(),
            )
        )

    def get(self, call: CallRef) -> Call:
        """The call as it is now."""
        return _wire.call_of(self._unary(self._stub.GetCall, pb.GetCallRequest(id=call_id(call))))

    def list_calls(
        self,
        *,
        phase: str = "",
        tool: str = "",
        principal: str = "",
        namespace: str = "",
        page_size: int = 50,
        page_token: str = "",
    ) -> CallPage:
        """One page of the calls the caller may read, newest first, filtered by ``phase``
        (a :class:`Phase` or its name), ``tool``, ``principal`` and ``namespace``. Pass
        ``page_token=page.next_page_token`` for the next; :meth:`calls` walks them all."""
        return _wire.page_of(
            self._unary(
                self._stub.ListCalls,
                _wire.list_request(phase, tool, principal, namespace, page_size, page_token),
            )
        )

    def calls(
        self, *, phase: str = "", tool: str = "", principal: str = "", namespace: str = ""
    ) -> Iterator[Call]:
        """Every call the caller may read that matches, page after page."""
        token = ""
        while True:
            page = self.list_calls(
                phase=phase, tool=tool, principal=principal, namespace=namespace, page_token=token
            )
            yield from page.calls
            token = page.next_page_token
            if not token:
                return

    def watch(self, call: CallRef, *, timeout: Optional[float] = None) -> Iterator[Event]:
        """The call's events from its first, as they happen, until it ends (the last one carries
        the call as it ended). ``timeout`` bounds the whole watch: past it,
        :class:`toolgate.DeadlineExceeded`."""
        stream = self._stub.WatchCall(
            pb.WatchCallRequest(id=call_id(call)), metadata=self._metadata(), timeout=timeout
        )
        try:
            for e in stream:
                yield _wire.event_of(e)
        except grpc.RpcError as e:
            raise from_rpc(e) from None
        finally:
            stream.cancel()

    def wait(
        self, call: CallRef, *, timeout: Optional[float] = None, wait_approval: bool = False
    ) -> Call:
        """Follow the call until it ends and return it as it ended. A call that waits for a
        person is returned at once (``call.waiting_for_approval``) unless ``wait_approval``.
        ``timeout`` (seconds) bounds the wait: past it, :class:`toolgate.WaitTimeout` with the
        call as it was then (the call goes on)."""
        ident = call_id(call)
        try:
            for e in self.watch(ident, timeout=timeout):
                if e.call is not None:
                    return e.call
                if e.phase.terminal:
                    break
                # The log replays from the first event: an AwaitingApproval may be history.
                if e.phase is Phase.AWAITING_APPROVAL and not wait_approval:
                    now = self.get(ident)
                    if now.waiting_for_approval:
                        return now
        except DeadlineExceeded:
            raise WaitTimeout(self.get(ident), timeout or 0.0) from None
        return self.get(ident)

    def approve(
        self,
        call: CallRef,
        *,
        for_session: bool = False,
        ttl_seconds: int = 0,
        comment: str = "",
    ) -> Call:
        """Approve a call, bound to its args and tool digests: given a :class:`Call`, exactly
        what it shows; given an id, what the call is now (read first)."""
        shown = call if isinstance(call, Call) else self.get(call)
        return _wire.call_of(
            self._unary(
                self._stub.ApproveCall,
                _wire.approve_request(shown, for_session, ttl_seconds, comment),
            )
        )

    def deny(self, call: CallRef, *, comment: str = "") -> Call:
        """Deny a call that waits for approval."""
        return _wire.call_of(
            self._unary(self._stub.DenyCall, pb.DenyCallRequest(id=call_id(call), comment=comment))
        )

    def cancel(self, call: CallRef, *, reason: str = "") -> Call:
        """Cancel a call (its proposer, or an approver of its namespace)."""
        return _wire.call_of(
            self._unary(self._stub.CancelCall, pb.CancelCallRequest(id=call_id(call), reason=reason))
        )

    def explain(self, call: CallRef) -> Explanation:
        """Why the call went as it did: decision, approvals, sandbox, events."""
        return _wire.explanation_of(
            self._unary(self._stub.ExplainCall, pb.ExplainCallRequest(id=call_id(call)))
        )

    def artifact(self, call: CallRef, artifact_id: str) -> Iterator[bytes]:
        """An artifact's bytes, as a stream of chunks (``b"".join(...)`` for all of it)."""
        stream = self._stub.GetArtifact(
            pb.GetArtifactRequest(call_id=call_id(call), artifact_id=artifact_id),
            metadata=self._metadata(),
        )
        try:
            for chunk in stream:
                yield chunk.data
        except grpc.RpcError as e:
            raise from_rpc(e) from None

    def delegation_token(self, call: CallRef) -> DelegationToken:
        """The token a running delegation (a call of a subagent tool) hands its subagent, once.
        Start the subagent with ``Client(server, token=handed.token)``; it sees and calls only
        what the delegation allows."""
        return _wire.token_of(
            self._unary(
                self._stub.GetDelegationToken, pb.GetDelegationTokenRequest(call_id=call_id(call))
            )
        )

    def complete_delegation(
        self, summary: str, result: Any = None, *, failed: bool = False, tokens_used: int = 0
    ) -> Call:
        """End the caller's delegation (as its subagent) with a summary and a result."""
        return _wire.call_of(
            self._unary(
                self._stub.CompleteDelegation,
                _wire.complete_request(summary, result, failed, tokens_used),
            )
        )
