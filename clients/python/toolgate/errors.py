"""What the server refused, as exceptions a caller can catch by kind."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

import grpc
from google.rpc import error_details_pb2
from grpc_status import rpc_status

if TYPE_CHECKING:
    from .types import Call


class ToolgateError(Exception):
    """What the server refused, and why.

    ``code`` is the gRPC status (``grpc.StatusCode``), ``reason`` the server's stable reason code
    (``approval-self``, ``idempotency-key-reused``, …) and ``field`` the request field at fault
    for bad input (``intent.action_type``). Catch a subclass for one kind of refusal."""

    def __init__(
        self, code: grpc.StatusCode, message: str, reason: str = "", field: str = ""
    ) -> None:
        super().__init__(
            f"{reason or code.name}: {message}" + (f" (field {field})" if field else "")
        )
        self.code = code
        self.message = message
        self.reason = reason
        self.field = field


class InvalidArgument(ToolgateError):
    """Bad input: ``field`` names where, the message what was expected."""


class NotFound(ToolgateError):
    """No such call, tool, skill or artifact that the caller may see."""


class PermissionDenied(ToolgateError):
    """The caller may not do this (``reason`` says why: ``approval-self``, ``not-an-approver``)."""


class Unauthenticated(ToolgateError):
    """The token is missing, unknown or expired."""


class FailedPrecondition(ToolgateError):
    """The call is not in a state that allows this (approving an ended call)."""


class AlreadyExists(ToolgateError):
    """An idempotency key already names another call."""


class ResourceExhausted(ToolgateError):
    """A budget or rate limit is spent."""


class Unavailable(ToolgateError):
    """The server cannot be reached (or refused the connection: TLS, a client certificate)."""


class DeadlineExceeded(ToolgateError):
    """The request took longer than the client's ``timeout``."""


class WaitTimeout(TimeoutError):
    """``wait(timeout=…)`` ran out before the call ended; the call goes on. ``call`` is the call
    as it was then."""

    def __init__(self, call: "Call", timeout: float) -> None:
        super().__init__(f"the call did not end within {timeout:g} s; it goes on")
        self.call = call
        self.timeout = timeout


_BY_CODE: dict[grpc.StatusCode, type[ToolgateError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgument,
    grpc.StatusCode.NOT_FOUND: NotFound,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDenied,
    grpc.StatusCode.UNAUTHENTICATED: Unauthenticated,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPrecondition,
    grpc.StatusCode.ALREADY_EXISTS: AlreadyExists,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhausted,
    grpc.StatusCode.UNAVAILABLE: Unavailable,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceeded,
}


def error_of(code: grpc.StatusCode, message: str, status: Optional[object]) -> ToolgateError:
    """The error for a refusal: its kind by ``code``, its reason and field from the status
    details (``google.rpc.ErrorInfo``, ``google.rpc.BadRequest``) when the server sent them."""
    reason, field = "", ""
    for detail in getattr(status, "details", ()):
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            reason = info.reason
            field = field or info.metadata.get("field", "")
        elif detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            bad = error_details_pb2.BadRequest()
            detail.Unpack(bad)
            if bad.field_violations:
                field = bad.field_violations[0].field
    return _BY_CODE.get(code, ToolgateError)(code, message, reason, field)


def from_rpc(err: grpc.RpcError) -> ToolgateError:
    """The error a failed call raised (``grpc.RpcError`` of a blocking call, or
    ``grpc.aio.AioRpcError``: both carry the code, details and trailing metadata)."""
    code = err.code() if hasattr(err, "code") else grpc.StatusCode.UNKNOWN
    message = (err.details() if hasattr(err, "details") else str(err)) or ""
    status = rpc_status.from_call(err) if hasattr(err, "trailing_metadata") else None
    return error_of(code, message, status)
