"""The Python client against a real `toolgate local`."""

import hashlib
import json
import pathlib
import subprocess
import sys

import grpc
import pytest

from toolgate import (
    Client,
    InvalidArgument,
    NotFound,
    Phase,
    PermissionDenied,
    ToolgateError,
    Unauthenticated,
    WaitTimeout,
)

from conftest import AGENT, REVIEWER, ROOT


def test_view_is_ready_for_a_model_sdk(server):
    with Client(server, token=AGENT) as tg:
        view = tg.view("read the serializer source file", format="openai", max_tools=4, explain=True)
    assert view.tools and all(t["type"] == "function" for t in view.tools)
    names = [t["function"]["name"] for t in view.tools]
    assert "file__read" in names, names
    assert view.hidden, "explain lists what the model does not see, with reasons"
    assert all(h.code and h.reason for h in view.hidden)
    read = view.tool("file__read")
    assert read is not None and read.name == "file.read" and read.digest.startswith("sha256:")


def test_the_responses_api_shape_is_flat(server):
    with Client(server, token=AGENT) as tg:
        view = tg.view("read the serializer source file", format="openai-responses", max_tools=4)
    assert view.tools and all(t["type"] == "function" and "function" not in t for t in view.tools)
    assert "file__read" in [t["name"] for t in view.tools]
    assert all(isinstance(t["parameters"], dict) for t in view.tools)


def test_a_skill_teaches_and_its_script_runs_as_its_tool(server):
    with Client(server, token=AGENT) as tg:
        view = tg.view("the serializer test is failing, fix it", max_tools=16)
        offered = [s for s in view.skills if s.name == "fix-failing-test"]
        assert offered and offered[0].reason, view.skills
        skill = tg.skill("fix-failing-test")
        assert skill.instructions.startswith("# Fixing a failing test")
        assert skill.tools == ("fix-failing-test.locate-test",)
        call = tg.propose("fix-failing-test.locate-test", {"source": "src/serializer.ts"},
                          action_type="search", task="find the serializer's test")
        done = tg.wait(call.id)
        assert done.phase == "Succeeded", done.conditions
        # The watch's last event carries the call as it ended: what GetCall says.
        events = list(tg.watch(call.id))
        assert [e.call is not None for e in events] == [False] * (len(events) - 1) + [True]
        assert events[-1].call == tg.get(call.id) == done
        with pytest.raises(NotFound) as missing:
            tg.skill("no-such-skill")
        assert missing.value.code == grpc.StatusCode.NOT_FOUND


def test_a_delegation_hands_a_subagent_only_its_allowed_tools(server):
    import time

    tg = Client(server, token=AGENT)
    parent = tg.propose("review.delegate", {"question": "is the serializer fix right?"},
                        action_type="subagent_delegate", task="ask the reviewer")
    for _ in range(100):
        if tg.get(parent.id).phase == "Running":
            break
        time.sleep(0.05)
    handed = tg.delegation_token(parent.id)
    assert handed.handoff["args"]["question"] == "is the serializer fix right?"
    with Client(server, token=handed.token) as sub:
        names = {t.name for t in sub.view("read the code", max_tools=32, explain=True).exposed}
        assert names <= {"file.read", "code.search", "git.diff"}, names
        assert "file.read" in names
        read = sub.wait(sub.propose("file.read", {"path": "src/serializer.ts"}, action_type="read",
                                    task="read what was fixed").id)
        assert read.phase == "Succeeded", read.conditions
        refused = sub.propose("file.write", {"path": "x", "content": "y"}, action_type="write",
                              task="not the reviewer's to do")
        assert refused.phase == "Denied", refused
        sub.complete_delegation("the fix is right", {"verdict": "approve"}, tokens_used=12)
    done = tg.wait(parent.id)
    assert done.phase == "Succeeded", done.conditions
    assert done.output_preview == "the fix is right"
    assert len(tg.explain(parent).children) == 2


def test_a_call_runs_and_its_artifact_matches_its_hash(server):
    tg = Client(server, token=AGENT)
    call = tg.propose("file.read", {"path": "src/serializer.ts"}, action_type="read", task="read the serializer")
    assert call.decision == "allow"
    done = tg.wait(call.id)
    assert done.phase == "Succeeded", done.conditions
    assert "formatDate" in done.output_preview
    events = list(tg.watch(call.id))
    assert events[-1].phase is Phase.SUCCEEDED and events[-1].terminal
    assert done.artifacts, done
    stdout = next((a for a in done.artifacts if a.kind == "stdout"), done.artifacts[0])
    data = b"".join(tg.artifact(call, stdout.id))
    assert "sha256:" + hashlib.sha256(data).hexdigest() == stdout.content_hash
    assert stdout.size_bytes == len(data)
    explained = tg.explain(call.id)
    assert explained.call.id == call.id and explained.sandbox_policy == "read-only"
    assert [e.type for e in explained.events][:1] == ["ToolCallRequested"]


def test_an_approval_needing_call_waits_for_a_human(server):
    agent, alice = Client(server, token=AGENT), Client(server, token=REVIEWER)
    call = agent.propose("test.gated", {"msg": "approved from python"}, action_type="execute", task="say it")
    assert call.phase == "AwaitingApproval"
    assert agent.wait(call.id).phase == "AwaitingApproval"
    with pytest.raises(PermissionDenied) as own:
        agent.approve(call)
    assert own.value.reason == "approval-self"
    assert own.value.code == grpc.StatusCode.PERMISSION_DENIED
    # A watch with a deadline ends with the call as it was; the call goes on.
    with pytest.raises(WaitTimeout) as waited:
        agent.wait(call, timeout=0.5, wait_approval=True)
    assert waited.value.call.waiting_for_approval
    # By id: what the call shows now is what is approved.
    alice.approve(call.id, comment="fine")
    done = agent.wait(call.id)
    assert done.phase == "Succeeded", done.conditions
    assert done.output_preview.strip() == "approved from python"


def test_bad_input_names_the_field(server):
    tg = Client(server, token=AGENT)
    with pytest.raises(InvalidArgument) as e:
        tg.propose("file.read", {"path": "x"}, action_type="rm", task="t")
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert e.value.field == "intent.action_type", e.value
    with pytest.raises(ValueError):
        tg.view("x", format="yaml")
    with pytest.raises(Unauthenticated) as unknown:
        Client(server, token="not-a-token").get("c-1")
    assert unknown.value.code == grpc.StatusCode.UNAUTHENTICATED
    assert isinstance(unknown.value, ToolgateError)


def test_the_example_agent_loop(server):
    out = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "agent_loop.py"), "--server", server, "--token", AGENT],
        capture_output=True, text=True, timeout=120,
    )
    assert out.returncode == 0, out.stderr
    transcript = json.loads(out.stdout)
    # The scripted model asked for a tool; toolgate ran it governed and the result went back.
    assert transcript[-1]["role"] == "tool"
    assert "formatDate" in transcript[-1]["content"]


def test_tls_with_the_servers_ca(tls_server):
    addr, ca = tls_server
    with Client(addr, token=AGENT, ca=ca) as tg:
        call = tg.propose("file.read", {"path": "src/serializer.ts"}, action_type="read", task="over TLS")
        assert tg.wait(call.id).phase == "Succeeded"
    # Plain text is refused: the token never crosses in clear.
    with pytest.raises(ToolgateError) as e:
        Client(addr, token=AGENT, timeout=5).get(call.id)
    assert e.value.code == grpc.StatusCode.UNAVAILABLE


def test_mutual_tls_with_a_client_certificate(mtls_server):
    addr, ca, cert, key = mtls_server
    with Client(addr, token=AGENT, ca=ca, client_cert=cert, client_key=key) as tg:
        call = tg.propose("file.read", {"path": "src/serializer.ts"}, action_type="read", task="over mTLS")
        assert tg.wait(call.id).phase == "Succeeded"
    # Without a certificate the server refuses the connection.
    with pytest.raises(ToolgateError) as e:
        Client(addr, token=AGENT, ca=ca, timeout=5).get(call.id)
    assert e.value.code == grpc.StatusCode.UNAVAILABLE


def test_a_call_joins_the_agents_trace(server, monkeypatch):
    trace = "4bf92f3577b34da6a3ce929d0e0e4736"
    with Client(server, token=AGENT) as tg:
        call = tg.propose("test.traceparent", {}, action_type="execute", task="traced",
                          traceparent=f"00-{trace}-00f067aa0ba902b7-01")
        done = tg.wait(call.id)
        assert done.phase == "Succeeded", done
        # The tool's process got the call's context: the agent's trace, the call's own span.
        assert f"00-{trace}-" in done.output_preview and "00f067aa0ba902b7" not in done.output_preview
        # From the environment, as a process started by a traced agent gets it.
        monkeypatch.setenv("TRACEPARENT", "00-5bf92f3577b34da6a3ce929d0e0e4737-00f067aa0ba902b7-01")
        call = tg.propose("test.traceparent", {}, action_type="execute", task="traced by env")
        assert "00-5bf92f3577b34da6a3ce929d0e0e4737-" in tg.wait(call.id).output_preview


def test_the_server_is_taken_with_or_without_a_scheme(server):
    # The form the command line takes (`http://host:port`) and the bare `host:port` reach the same server.
    for target in (server, f"http://{server}", f"http://{server}/"):
        with Client(target, token=AGENT) as tg:
            assert tg.view("read a source file", format="openai").tools, target
    with pytest.raises(ValueError, match="server: expected host:port"):
        Client(f"ftp://{server}", token=AGENT)


def test_calls_are_listed_filtered_and_paged(server):
    with Client(server, token=AGENT) as tg:
        made = [tg.propose("file.read", {"path": "src/serializer.ts"}, task=f"list {i}") for i in range(3)]
        for c in made:
            assert tg.wait(c).phase is Phase.SUCCEEDED
        page = tg.list_calls(tool="file.read", page_size=2)
        assert len(page.calls) == 2 and page.next_page_token
        assert all(c.tool == "file.read" for c in page.calls)
        every = list(tg.calls(tool="file.read", phase=Phase.SUCCEEDED))
        assert {c.id for c in made} <= {c.id for c in every}
        assert all(c.phase is Phase.SUCCEEDED for c in every)


def test_a_denied_call_by_id(server):
    agent, alice = Client(server, token=AGENT), Client(server, token=REVIEWER)
    call = agent.propose("test.gated", {"msg": "never"}, task="say it")
    assert call.waiting_for_approval
    denied = alice.deny(call.id, comment="not today")
    assert denied.phase is Phase.DENIED and denied.done
