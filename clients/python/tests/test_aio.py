"""The asyncio client against a real `toolgate local`: the same flows as the blocking one."""

import asyncio
import hashlib

import grpc
import pytest

from toolgate import AsyncClient, InvalidArgument, PermissionDenied, Phase, WaitTimeout

from conftest import AGENT, REVIEWER


def test_a_call_runs_watched_and_its_artifact_matches_its_hash(server):
    async def flow():
        async with AsyncClient(server, token=AGENT) as tg:
            view = await tg.view("read the serializer source file", max_tools=4)
            tool = view.tool("file__read")
            assert tool is not None
            call = await tg.propose("file.read", {"path": "src/serializer.ts"},
                                    task="read the serializer", tool_digest=tool.digest)
            events = [e async for e in tg.watch(call)]
            assert events[-1].terminal and events[-1].call is not None
            done = events[-1].call
            assert done.phase is Phase.SUCCEEDED, done.conditions
            assert "formatDate" in done.output_preview
            stdout = next((a for a in done.artifacts if a.kind == "stdout"), done.artifacts[0])
            data = b"".join([chunk async for chunk in tg.artifact(done, stdout.id)])
            assert "sha256:" + hashlib.sha256(data).hexdigest() == stdout.content_hash
            assert (await tg.get(call.id)) == done
            assert (await tg.explain(call)).call.id == call.id
            listed = [c async for c in tg.calls(tool="file.read")]
            assert call.id in {c.id for c in listed}

    asyncio.run(flow())


def test_an_approval_a_timeout_and_refusals(server):
    async def flow():
        async with AsyncClient(server, token=AGENT) as agent, \
                AsyncClient(server, token=REVIEWER) as alice:
            call = await agent.propose("test.gated", {"msg": "approved from asyncio"}, task="say it")
            assert call.waiting_for_approval
            assert (await agent.wait(call)).waiting_for_approval
            with pytest.raises(WaitTimeout) as waited:
                await agent.wait(call, timeout=0.5, wait_approval=True)
            assert waited.value.call.id == call.id
            with pytest.raises(PermissionDenied) as own:
                await agent.approve(call)
            assert own.value.reason == "approval-self"
            # Both wait for the end at once: the approval lets it run.
            done, _ = await asyncio.gather(
                agent.wait(call, wait_approval=True, timeout=60),
                alice.approve(call.id, comment="fine"),
            )
            assert done.phase is Phase.SUCCEEDED, done.conditions
            assert done.output_preview.strip() == "approved from asyncio"
            with pytest.raises(InvalidArgument) as bad:
                await agent.propose("file.read", {"path": "x"}, action_type="rm", task="t")
            assert bad.value.field == "intent.action_type"
            assert bad.value.code == grpc.StatusCode.INVALID_ARGUMENT

    asyncio.run(flow())
