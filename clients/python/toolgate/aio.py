"""The asyncio client: the same requests as :class:`toolgate.Client`, awaited (``grpc.aio``), for
agent frameworks and MCP servers that run on an event loop."""

from __future__ import annotations

from typing import Any, AsyncIterator, Optional

import grpc
import grpc.aio

from . import _wire
from ._wire import CallRef, call_id
from .errors import DeadlineExceeded, WaitTimeout, from_rpc
from .types import Call, CallPage, DelegationToken, Event, Explanation, Phase, Skill, View
from .v1 import toolgate_pb2 as pb
from .v1 import toolgate_pb2_grpc as rpc


class AsyncClient:
    """An asyncio client of one toolgate server; arguments and answers as
    :class:`toolgate.Client`'s. Use it as an async context manager, or ``await close()``.

    .. code-block:: python

        async with AsyncClient("127.0.0.1:7070", token=token) as tg:
            call = await tg.propose("file.read", {"path": "README.md"}, task="read it")
            done = await tg.wait(call)
    """

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
            grpc.aio.secure_channel(address, creds) if creds else grpc.aio.insecure_channel(address)
        )
        self._stub = rpc.ToolgateStub(self._channel)

    async def close(self) -> None:
        """Close the connection."""
        await self._channel.close()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _metadata(self, traceparent: Optional[str] = None) -> list[tuple[str, str]]:
        return _wire.metadata(self._token, traceparent)

    async def _unary(self, method: Any, request: Any, traceparent: Optional[str] = None) -> Any:
        try:
            return await method(
                request, metadata=self._metadata(traceparent), timeout=self._timeout
            )
        except grpc.RpcError as e:
            raise from_rpc(e) from None

    async def view(
        self,
        intent: str,
        *,
        format: str = "openai",
        max_tools: int = 8,
        action_type: str = "",
        namespace: str = "",
        explain: bool = False,
    ) -> View:
        """The caller's tool view for ``intent`` (see :meth:`toolgate.Client.view`)."""
        return _wire.view_of(
            await self._unary(
                self._stub.GetToolView,
                _wire.view_request(intent, format, max_tools, action_type, namespace, explain),
            )
        )

    async def skill(self, name: str, *, namespace: str = "") -> Skill:
        """A skill's instructions (SKILL.md's body)."""
        return _wire.skill_of(
            await self._unary(
                self._stub.GetSkill, pb.GetSkillRequest(namespace=namespace, name=name)
            )
        )

    async def propose(
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
        """Propose a call; it comes back decided (see :meth:`toolgate.Client.propose`)."""
        return _wire.call_of(
            await self._unary(
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

    async def get(self, call: CallRef) -> Call:
        """The call as it is now."""
        return _wire.call_of(
            await self._unary(self._stub.GetCall, pb.GetCallRequest(id=call_id(call)))
        )

    async def list_calls(
        self,
        *,
        phase: str = "",
        tool: str = "",
        principal: str = "",
        namespace: str = "",
        page_size: int = 50,
        page_token: str = "",
    ) -> CallPage:
        """One page of the calls the caller may read (see :meth:`toolgate.Client.list_calls`)."""
        return _wire.page_of(
            await self._unary(
                self._stub.ListCalls,
                _wire.list_request(phase, tool, principal, namespace, page_size, page_token),
            )
        )

    async def calls(
        self, *, phase: str = "", tool: str = "", principal: str = "", namespace: str = ""
    ) -> AsyncIterator[Call]:
        """Every call the caller may read that matches, page after page."""
        token = ""
        while True:
            page = await self.list_calls(
                phase=phase, tool=tool, principal=principal, namespace=namespace, page_token=token
            )
            for c in page.calls:
                yield c
            token = page.next_page_token
            if not token:
                return

    async def watch(
        self, call: CallRef, *, timeout: Optional[float] = None
    ) -> AsyncIterator[Event]:
        """The call's events from its first, as they happen, until it ends (see
        :meth:`toolgate.Client.watch`)."""
        stream = self._stub.WatchCall(
            pb.WatchCallRequest(id=call_id(call)), metadata=self._metadata(), timeout=timeout
        )
        try:
            async for e in stream:
                yield _wire.event_of(e)
        except grpc.RpcError as e:
            raise from_rpc(e) from None
        finally:
            stream.cancel()

    async def wait(
        self, call: CallRef, *, timeout: Optional[float] = None, wait_approval: bool = False
    ) -> Call:
        """Follow the call until it ends, or until it waits for a person unless
        ``wait_approval`` (see :meth:`toolgate.Client.wait`)."""
        ident = call_id(call)
        try:
            async for e in self.watch(ident, timeout=timeout):
                if e.call is not None:
                    return e.call
                if e.phase.terminal:
                    break
                if e.phase is Phase.AWAITING_APPROVAL and not wait_approval:
                    now = await self.get(ident)
                    if now.waiting_for_approval:
                        return now
        except DeadlineExceeded:
            raise WaitTimeout(await self.get(ident), timeout or 0.0) from None
        return await self.get(ident)

    async def approve(
        self,
        call: CallRef,
        *,
        for_session: bool = False,
        ttl_seconds: int = 0,
        comment: str = "",
    ) -> Call:
        """Approve a call, bound to its args and tool digests (see
        :meth:`toolgate.Client.approve`)."""
        shown = call if isinstance(call, Call) else await self.get(call)
        return _wire.call_of(
            await self._unary(
                self._stub.ApproveCall,
                _wire.approve_request(shown, for_session, ttl_seconds, comment),
            )
        )

    async def deny(self, call: CallRef, *, comment: str = "") -> Call:
        """Deny a call that waits for approval."""
        return _wire.call_of(
            await self._unary(
                self._stub.DenyCall, pb.DenyCallRequest(id=call_id(call), comment=comment)
            )
        )

    async def cancel(self, call: CallRef, *, reason: str = "") -> Call:
        """Cancel a call (its proposer, or an approver of its namespace)."""
        return _wire.call_of(
            await self._unary(
                self._stub.CancelCall, pb.CancelCallRequest(id=call_id(call), reason=reason)
            )
        )

    async def explain(self, call: CallRef) -> Explanation:
        """Why the call went as it did: decision, approvals, sandbox, events."""
        return _wire.explanation_of(
            await self._unary(self._stub.ExplainCall, pb.ExplainCallRequest(id=call_id(call)))
        )

    async def artifact(self, call: CallRef, artifact_id: str) -> AsyncIterator[bytes]:
        """An artifact's bytes, as a stream of chunks."""
        stream = self._stub.GetArtifact(
            pb.GetArtifactRequest(call_id=call_id(call), artifact_id=artifact_id),
            metadata=self._metadata(),
        )
        try:
            async for chunk in stream:
                yield chunk.data
        except grpc.RpcError as e:
            raise from_rpc(e) from None

    async def delegation_token(self, call: CallRef) -> DelegationToken:
        """The token a running delegation hands its subagent, once."""
        return _wire.token_of(
            await self._unary(
                self._stub.GetDelegationToken, pb.GetDelegationTokenRequest(call_id=call_id(call))
            )
        )

    async def complete_delegation(
        self, summary: str, result: Any = None, *, failed: bool = False, tokens_used: int = 0
    ) -> Call:
        """End the caller's delegation (as its subagent) with a summary and a result."""
        return _wire.call_of(
            await self._unary(
                self._stub.CompleteDelegation,
                _wire.complete_request(summary, result, failed, tokens_used),
            )
        )
