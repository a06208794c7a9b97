"""``GET /healthz``: liveness and readiness, without authentication."""

from __future__ import annotations

from litestar import get
from litestar.datastructures import State

from tessera_contracts import rpc
from tessera_gateway.context import Gateway
from tessera_gateway.openapi import problem_responses
from tessera_gateway.problems import GatewayProblem


@get("/healthz", operation_id="healthz", tags=["health"], responses=problem_responses(503), cache=False)
async def healthz(state: State) -> dict[str, str]:
    """``{"status": "ok"}`` while the gateway is connected to NATS; 503 problem otherwise."""
    if not Gateway.of(state).nc.is_connected:
        raise GatewayProblem(rpc.UNAVAILABLE, "not connected to NATS", retry_after=True)
    return {"status": "ok"}
