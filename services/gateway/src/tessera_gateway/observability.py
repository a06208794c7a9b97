"""Request ids, the access log and the server span, around every HTTP request.

:class:`RequestLog` wraps the whole Litestar application (not one route), so unknown routes and
405s get an ``X-Request-Id`` and a log line too. The id is the client's ``X-Request-Id`` when it
is sane (1-128 of ``[A-Za-z0-9._:-]``), else a fresh one; it is the ``correlation_id`` of every
RPC the request makes. The log line holds method, path, route, status, milliseconds, principal id
and request id: never headers, so never the API key.
"""

from __future__ import annotations

import re
import time
import uuid
from typing import Any

from litestar.enums import ScopeType
from litestar.types import ASGIApp, Message, Receive, Scope, Send
from opentelemetry import trace
from opentelemetry.trace import SpanKind

from tessera_contracts.rbac import Principal
from tessera_runtime import logs, tracing

REQUEST_ID_HEADER = "X-Request-Id"
_STATE_KEY = "tessera.request_id"
_SANE_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
_tracer = trace.get_tracer("tessera.gateway")


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return bytes(value).decode("latin-1")
    return None


def request_id(scope: Scope | dict[str, Any]) -> str:
    """The id of the request in ``scope``: chosen once (client's or new), then remembered in the scope."""
    state: dict[str, Any] = scope.setdefault("state", {})
    rid = state.get(_STATE_KEY)
    if not isinstance(rid, str):
        given = _header(scope, b"x-request-id")  # type: ignore[arg-type]
        rid = given if given is not None and _SANE_ID.match(given) else uuid.uuid4().hex
        state[_STATE_KEY] = rid
    return rid


class RequestLog:
    """ASGI wrapper: request id in and out, one server span and one access log line per HTTP request."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self._log = logs.get("http")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve one connection; non-HTTP scopes pass straight through."""
        if scope["type"] != ScopeType.HTTP:
            await self.app(scope, receive, send)
            return
        rid = request_id(scope)
        rid_header = (b"x-request-id", rid.encode("ascii"))
        status = 500
        started = time.perf_counter()

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message["headers"] = [*message.get("headers", ()), rid_header]
            await send(message)

        traceparent = _header(scope, b"traceparent")
        carrier = {tracing.TRACEPARENT: traceparent} if traceparent else None
        method = scope.get("method", "")
        with (
            tracing.continued_from(carrier),
            _tracer.start_as_current_span(f"HTTP {method}", kind=SpanKind.SERVER) as span,
        ):
            try:
                await self.app(scope, receive, send_with_id)
            finally:
                route = str(scope.get("path_template") or "")
                user = scope.get("user")
                span.set_attribute("http.request.method", method)
                span.set_attribute("http.response.status_code", status)
                if route:
                    span.update_name(f"{method} {route}")
                    span.set_attribute("http.route", route)
                self._log.info(
                    "http.request",
                    method=method,
                    path=scope.get("path", ""),
                    route=route or None,
                    status=status,
                    ms=round((time.perf_counter() - started) * 1000, 2),
                    principal=user.id if isinstance(user, Principal) else None,
                    request_id=rid,
                )
