"""toolgate's agent API from Python: get a governed tool view, propose calls, follow them,
approve them, read their artifacts — blocking (:class:`Client`) or on asyncio
(:class:`AsyncClient`).

.. code-block:: python

    from toolgate import Client
    with Client("127.0.0.1:7070", token=os.environ["TOOLGATE_TOKEN"]) as tg:
        tools = tg.view("fix the failing serializer test", format="openai").tools  # to the model
        call = tg.propose("file.read", {"path": "src/serializer.ts"}, task="read the serializer")
        done = tg.wait(call, timeout=60)   # or: for event in tg.watch(call): ...
        print(done.phase, done.output_preview)

Every refusal is a :class:`ToolgateError` (a subclass per kind: :class:`InvalidArgument`,
:class:`PermissionDenied`, …) carrying the server's stable reason code (``approval-self``,
``args-invalid``, …) and, for bad input, the field at fault.
"""

from .aio import AsyncClient
from .client import Client
from .errors import (
    AlreadyExists,
    DeadlineExceeded,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    ResourceExhausted,
    ToolgateError,
    Unauthenticated,
    Unavailable,
    WaitTimeout,
)
from .types import (
    TERMINAL,
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

__all__ = [
    "AlreadyExists",
    "Artifact",
    "AsyncClient",
    "Call",
    "CallPage",
    "Client",
    "Condition",
    "DeadlineExceeded",
    "DelegationToken",
    "Event",
    "Explanation",
    "ExposedTool",
    "FailedPrecondition",
    "HiddenTool",
    "InvalidArgument",
    "NotFound",
    "PermissionDenied",
    "Phase",
    "Reason",
    "ResourceExhausted",
    "Skill",
    "SkillRef",
    "TERMINAL",
    "ToolgateError",
    "Unauthenticated",
    "Unavailable",
    "View",
    "WaitTimeout",
]
