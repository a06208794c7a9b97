"""Forwarding one HTTP request to its owning service over NATS request/reply.

A route handler gets a :class:`Forwarder` (a per-request dependency: ``read`` for queries,
``write`` for commands) and calls it with the service, the operation, the validated body, the
scope (path parameters) and the page. The reply body goes back byte for byte with the route's
success status; a service problem goes back with its own status as problem+json. A ``write``
declares the ``Idempotency-Key`` header (so Litestar validates and documents it on exactly the
write routes) and, when it is sent, goes through the idempotency store.
"""

from __future__ import annotations

from typing import Any

import msgspec
from litestar import Request, Response
from litestar.datastructures import State

from tessera_contracts.api.common import PageRequest
from tessera_gateway import idempotency
from tessera_gateway.context import Gateway
from tessera_gateway.guards import principal_of
from tessera_gateway.idempotency import Answer
from tessera_gateway.observability import request_id
from tessera_gateway.params import IdempotencyKey
from tessera_gateway.problems import PROBLEM_MEDIA_TYPE, encode_problem, retry_headers
from tessera_runtime.rpc import RpcError, call

JSON = "application/json"
REPLAYED_HEADER = "Idempotency-Replayed"


class Forwarder:
    """Sends the current request's command or query to a service and turns the reply into a response."""

    def __init__(self, request: Request[Any, Any, Any], gateway: Gateway, idempotency_key: str | None = None) -> None:
        self._request = request
        self._gateway = gateway
        self._idempotency_key = idempotency_key

    async def __call__(
        self,
        service: str,
        operation: str,
        body: msgspec.Struct | None = None,
        *,
        scope: dict[str, str] | None = None,
        page: PageRequest | None = None,
    ) -> Response[Any]:
        """Call ``service.operation`` as the authenticated caller.

        Returns:
            The reply body (JSON, the route's declared success status), or the service's problem
            (problem+json, its status; ``Retry-After`` on 503/504). With ``Idempotency-Key`` on a
            write, possibly a stored answer with ``Idempotency-Replayed: true``.

        Raises:
            GatewayProblem: 409/422/503 from the idempotency store.
        """
        request = self._request
        if self._idempotency_key is None:
            return self._respond(await self._answer(service, operation, body, scope, page), replayed=False)
        key = idempotency.entry_key(principal_of(request).id, request.method, request.url.path, self._idempotency_key)
        answer, replayed = await self._gateway.idempotency.run(
            key, idempotency.fingerprint(body), lambda: self._answer(service, operation, body, scope, page)
        )
        return self._respond(answer, replayed=replayed)

    async def _answer(
        self,
        service: str,
        operation: str,
        body: msgspec.Struct | None,
        scope: dict[str, str] | None,
        page: PageRequest | None,
    ) -> Answer:
        try:
            raw = await call(
                self._gateway.nc,
                service,
                operation,
                body,
                principal=principal_of(self._request),
                scope=scope,
                page=page,
                correlation_id=request_id(self._request.scope),
                timeout_s=self._gateway.settings.rpc_timeout_s,
            )
        except RpcError as exc:
            return Answer(status=exc.problem.status, body=encode_problem(exc.problem), media_type=PROBLEM_MEDIA_TYPE)
        return Answer(status=self._request.route_handler.status_code, body=bytes(raw), media_type=JSON)

    @staticmethod
    def _respond(answer: Answer, *, replayed: bool) -> Response[Any]:
        headers = retry_headers(answer.status)
        if replayed:
            headers[REPLAYED_HEADER] = "true"
        return Response(content=answer.body, status_code=answer.status, media_type=answer.media_type, headers=headers)


def provide_read(request: Request[Any, Any, Any], state: State) -> Forwarder:
    """Litestar dependency ``read``: a :class:`Forwarder` for a query."""
    return Forwarder(request, Gateway.of(state))


def provide_write(request: Request[Any, Any, Any], state: State, idempotency_key: IdempotencyKey = None) -> Forwarder:
    """Litestar dependency ``write``: a :class:`Forwarder` for a command, honouring ``Idempotency-Key``."""
    return Forwarder(request, Gateway.of(state), idempotency_key)
