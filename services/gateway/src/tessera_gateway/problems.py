"""Every error the gateway answers is an RFC 9457 problem (``application/problem+json``).

The body is :class:`tessera_contracts.rpc.Problem`: a stable ``type``
(``https://tessera.dev/problems/<code>``), ``title``, ``status``, ``code``, ``detail`` and, for
validation errors, ``errors``. Sources of errors and how they map:

- :class:`GatewayProblem`, raised by the gateway's own code (auth, guards, idempotency);
- :class:`tessera_runtime.rpc.RpcError`, a service's problem (returned with its own status) or
  no answer (503 / 504, with ``Retry-After``);
- Litestar's :class:`~litestar.exceptions.HTTPException` family (unknown route 404, 405,
  validation 400, body too large 413, ...), mapped by status; a body nested too deeply to
  decode (``RecursionError`` from msgspec) is a 400;
- a NATS client error (connection closed or draining): 503 with ``Retry-After``;
- anything else: a 500 that names the request id, logged with its traceback, no details out.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum
from typing import Any

import msgspec
import nats.errors
from litestar import Request, Response
from litestar.exceptions import HTTPException, ValidationException
from litestar.types import ExceptionHandlersMap

from tessera_contracts import rpc
from tessera_gateway.observability import request_id
from tessera_runtime import logs
from tessera_runtime.rpc import RpcError

PROBLEM_MEDIA_TYPE = "application/problem+json"

_BY_STATUS: dict[int, tuple[str, int]] = {
    status: (code, status)
    for code, status in (
        rpc.INVALID,
        rpc.UNAUTHENTICATED,
        rpc.FORBIDDEN,
        rpc.NOT_FOUND,
        rpc.METHOD_NOT_ALLOWED,
        rpc.NOT_ACCEPTABLE,
        rpc.CONFLICT,
        rpc.GONE,
        rpc.PAYLOAD_TOO_LARGE,
        rpc.UNSUPPORTED_MEDIA_TYPE,
        rpc.UNPROCESSABLE,
        rpc.TOO_MANY,
        rpc.INTERNAL,
        rpc.UNAVAILABLE,
        rpc.TIMEOUT,
    )
}
RETRY_AFTER_S = 1
_encoder = msgspec.json.Encoder()
_log = logs.get("gateway")


def make_problem(kind: tuple[str, int], detail: str = "", errors: list[dict[str, str]] | None = None) -> rpc.Problem:
    """A :class:`~tessera_contracts.rpc.Problem` for one of the contracts' codes (HTTP-only ones included)."""
    return rpc.problem(kind, detail, errors)


def kind_for_status(status: int) -> tuple[str, int]:
    """The problem code for an HTTP status: the exact one when known, else ``invalid-request`` or ``internal``."""
    if status in _BY_STATUS:
        return _BY_STATUS[status]
    return (rpc.INTERNAL[0], status) if status >= 500 else (rpc.INVALID[0], status)


class GatewayProblem(Exception):
    """A problem the gateway itself answers, with optional extra response headers.

    ``retry_after`` adds ``Retry-After`` (seconds), for answers a client should retry later.
    """

    def __init__(
        self,
        kind: tuple[str, int],
        detail: str = "",
        *,
        errors: list[dict[str, str]] | None = None,
        headers: Mapping[str, str] | None = None,
        retry_after: bool = False,
    ) -> None:
        super().__init__(detail or kind[0])
        self.problem = make_problem(kind, detail, errors)
        self.headers = dict(headers or {})
        if retry_after:
            self.headers["Retry-After"] = str(RETRY_AFTER_S)


def retry_headers(status: int) -> dict[str, str]:
    """``Retry-After`` for service-unavailable and timeout answers, else nothing."""
    return {"Retry-After": str(RETRY_AFTER_S)} if status in (503, 504) else {}


def problem_response(problem: rpc.Problem, headers: Mapping[str, str] | None = None) -> Response[bytes]:
    """The HTTP response for ``problem``: its status, problem+json, ``Retry-After`` when it is 503/504."""
    all_headers = {**retry_headers(problem.status), **(headers or {})}
    return Response(
        content=_encoder.encode(problem), status_code=problem.status, media_type=PROBLEM_MEDIA_TYPE, headers=all_headers
    )


def encode_problem(problem: rpc.Problem) -> bytes:
    """``problem`` as JSON bytes."""
    return _encoder.encode(problem)


def _on_gateway_problem(_: Request[Any, Any, Any], exc: GatewayProblem) -> Response[bytes]:
    return problem_response(exc.problem, exc.headers)


def _on_rpc_error(_: Request[Any, Any, Any], exc: RpcError) -> Response[bytes]:
    return problem_response(exc.problem)


def _text(value: Any) -> str:
    return str(value.value) if isinstance(value, Enum) else str(value)


def _validation_errors(extra: Any) -> list[dict[str, str]] | None:
    """Litestar's ``[{"message", "key", "source"}, ...]`` as strings (``source``: body, path, query, header)."""
    if not isinstance(extra, list):
        return None
    return [{str(k): _text(v) for k, v in item.items()} for item in extra if isinstance(item, dict)] or None


def _on_http_exception(request: Request[Any, Any, Any], exc: HTTPException) -> Response[bytes]:
    status = exc.status_code
    kind = kind_for_status(status)
    if status >= 500:
        _log.error("http.error", status=status, request_id=request_id(request.scope), error=exc.detail)
        detail = f"request id {request_id(request.scope)}"
    elif status == 404 and exc.detail == "Not Found":
        detail = f"no route {request.method} {request.url.path}"
    elif status == 405:
        detail = f"{request.method} is not allowed on {request.url.path}"
    elif status == 413:
        detail = f"the request body is larger than {request.app.request_max_body_size} bytes"
    else:
        detail = exc.detail
    errors = _validation_errors(exc.extra) if isinstance(exc, ValidationException) else None
    return problem_response(make_problem(kind, detail, errors), exc.headers)


def _on_nats_error(request: Request[Any, Any, Any], exc: nats.errors.Error) -> Response[bytes]:
    _log.warning("nats.unavailable", request_id=request_id(request.scope), error=repr(exc))
    return problem_response(make_problem(rpc.UNAVAILABLE, "the message bus is unavailable"))


def _on_recursion(request: Request[Any, Any, Any], exc: RecursionError) -> Response[bytes]:
    if "deserializ" in str(exc):  # msgspec decoding a hostile, deeply nested body
        return problem_response(make_problem(rpc.INVALID, "the JSON body is nested too deeply"))
    return _on_unexpected(request, exc)


def _on_unexpected(request: Request[Any, Any, Any], exc: Exception) -> Response[bytes]:
    rid = request_id(request.scope)
    _log.error("http.unhandled", request_id=rid, error=repr(exc), exc_info=exc)
    return problem_response(make_problem(rpc.INTERNAL, f"request id {rid}"))


EXCEPTION_HANDLERS: ExceptionHandlersMap = {
    GatewayProblem: _on_gateway_problem,
    RpcError: _on_rpc_error,
    nats.errors.Error: _on_nats_error,
    RecursionError: _on_recursion,
    HTTPException: _on_http_exception,
    Exception: _on_unexpected,
}
