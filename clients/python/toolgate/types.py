"""What the server answers, as typed values: calls, their events, views, skills, artifacts."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Optional


class Phase(str, enum.Enum):
    """Where a call is in its life. A ``str`` enum: ``call.phase == "Succeeded"`` holds too."""

    PENDING = "Pending"
    AWAITING_APPROVAL = "AwaitingApproval"
    AUTHORIZED = "Authorized"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    DENIED = "Denied"
    CANCELLED = "Cancelled"
    #: A phase this client does not know (a newer server's).
    UNKNOWN = "Unknown"

    @classmethod
    def parse(cls, text: str) -> "Phase":
        """The phase named ``text``; :attr:`UNKNOWN` for one this client does not know."""
        try:
            return cls(text)
        except ValueError:
            return cls.UNKNOWN

    @property
    def terminal(self) -> bool:
        """Whether a call in this phase changes no more."""
        return self in TERMINAL

    def __str__(self) -> str:
        return self.value


#: Phases after which a call changes no more.
TERMINAL = frozenset({Phase.SUCCEEDED, Phase.FAILED, Phase.DENIED, Phase.CANCELLED})


@dataclass(frozen=True)
class Reason:
    """One reason of a decision: a stable ``code`` (``grant-matched``) and what it means."""

    code: str
    message: str


@dataclass(frozen=True)
class Condition:
    """One step of a call's causal chain, as its status records it (``PolicyChecked``, …)."""

    type: str
    status: str
    reason: str
    message: str
    last_transition_time: str = ""


@dataclass(frozen=True)
class Artifact:
    """A call's stored output (``stdout``, ``stderr``, a declared output file), fetched with
    ``Client.artifact(call.id, artifact.id)``; ``content_hash`` is ``sha256:<hex>`` of its bytes."""

    id: str
    kind: str
    content_hash: str
    size_bytes: int
    uri: str = ""


@dataclass(frozen=True)
class Call:
    """A call as the server records it. ``status`` is the whole status in the ToolCall object's
    JSON form (the same on both runtimes); the fields above it are the parts agents read."""

    id: str
    namespace: str
    tool: str
    phase: Phase
    decision: str
    risk_tier: str
    args_digest: str
    tool_digest: str
    output_preview: str
    exit_code: Optional[int]
    principal: str = ""
    created_at: str = ""
    dry_run: bool = False
    parent_call: str = ""
    reasons: tuple[Reason, ...] = ()
    conditions: tuple[Condition, ...] = ()
    artifacts: tuple[Artifact, ...] = ()
    status: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @property
    def done(self) -> bool:
        """Whether the call has ended (succeeded, failed, denied or cancelled)."""
        return self.phase in TERMINAL

    @property
    def waiting_for_approval(self) -> bool:
        """Whether the call waits for a person (``toolgate approve <id>``)."""
        return self.phase is Phase.AWAITING_APPROVAL

    def condition(self, type: str) -> Optional[Condition]:
        """The condition of this ``type`` (``SandboxPrepared``), if the call has reached it."""
        return next((c for c in self.conditions if c.type == type), None)


@dataclass(frozen=True)
class Event:
    """One step of a call's causal chain as it happened. The last one (``terminal``) carries the
    call as it ended in ``call``."""

    type: str
    status: str
    reason: str
    message: str
    phase: Phase
    sequence: int = 0
    time: str = ""
    terminal: bool = False
    call: Optional[Call] = None


@dataclass(frozen=True)
class ExposedTool:
    """A tool the view shows the model, with the grant that allows it and whether a call of it
    waits for a person."""

    name: str
    provider_name: str
    digest: str
    risk_tier: str
    needs_approval: bool
    reason: str
    grant: str
    confirmation: str = ""


@dataclass(frozen=True)
class HiddenTool:
    """A tool the view does not show, with a stable ``code`` saying why (``explain=True``)."""

    name: str
    code: str
    reason: str


@dataclass(frozen=True)
class SkillRef:
    """A skill the intent matches: instructions to read with ``Client.skill(name)``."""

    name: str
    description: str
    reason: str
    tools: tuple[str, ...] = ()


@dataclass(frozen=True)
class View:
    """The tools a model may see for one intent. ``tools`` is the payload in the requested
    provider format, ready for the model SDK; ``exposed`` and ``hidden`` say what and why;
    ``skills`` the skills the intent matches."""

    tools: list[dict[str, Any]]
    exposed: tuple[ExposedTool, ...]
    hidden: tuple[HiddenTool, ...] = ()
    skills: tuple[SkillRef, ...] = ()

    def tool(self, provider_name: str) -> Optional[ExposedTool]:
        """The exposed tool a model named (its provider name, ``file__read``), or its
        canonical name (``file.read``)."""
        return next(
            (t for t in self.exposed if provider_name in (t.provider_name, t.name)), None
        )


@dataclass(frozen=True)
class Skill:
    """A skill's instructions: what to do, not a permission. Its scripts run only as ``tools``,
    when a grant allows them."""

    name: str
    description: str
    instructions: str
    instructions_digest: str
    tools: tuple[str, ...] = ()


@dataclass(frozen=True)
class Explanation:
    """Why a call went as it did: the call, the view its principal gets for its intent now, its
    events, every approval given (and by whom), the sandbox and credential used (by name, never
    value) and how the sandbox was resolved."""

    call: Call
    view: Optional[View]
    events: tuple[Event, ...]
    approvals: tuple[str, ...]
    approvers: tuple[str, ...]
    sandbox_policy: str
    credential_binding: str
    sandbox: dict[str, Any]
    effects: dict[str, Any]
    verifier: dict[str, Any]
    children: tuple[str, ...] = ()


@dataclass(frozen=True)
class DelegationToken:
    """What a running delegation hands its subagent: the token to act with and the handoff
    (args, the parent's intent) the delegation tool's context policy allows."""

    token: str
    handoff: dict[str, Any]
    expires_at: str


@dataclass(frozen=True)
class CallPage:
    """One page of ``list_calls``; ``next_page_token`` is empty on the last."""

    calls: tuple[Call, ...]
    next_page_token: str
