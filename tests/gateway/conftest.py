"""Gateway fixtures: the fake tenancy responder (``gateway_support``) and the real app in-process.

The app is served through ``httpx.ASGITransport``, on the test's own event loop.
``litestar.testing.AsyncTestClient`` is not usable here: it runs the app on another event loop in
a portal thread and blocks the caller's loop meanwhile, so the NATS connection (and the fake
service on it, which lives on the test loop) could not answer.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx
import nats.js.errors
import pytest
from gateway_support import FakeTenancy
from nats.aio.client import Client as NATS

from tessera_gateway.app import create_app
from tessera_gateway.settings import GatewaySettings


@pytest.fixture
async def fake(nc: NATS) -> AsyncIterator[FakeTenancy]:
    service = FakeTenancy(nc)
    await service.start()
    yield service
    if service.hold is not None:
        service.hold.set()
    await service.stop()


ClientFactory = Callable[..., Awaitable[httpx.AsyncClient]]


@pytest.fixture
async def make_client(nc: NATS, servers: Any) -> AsyncIterator[ClientFactory]:
    """Build a gateway app (own idempotency bucket) and an in-process client for it."""
    stack = contextlib.AsyncExitStack()
    buckets: list[str] = []

    async def make(connection: NATS | None = None, **overrides: Any) -> httpx.AsyncClient:
        bucket = f"TEST_IDEMPOTENCY_{uuid.uuid4().hex[:10]}"
        settings = GatewaySettings(
            **{"nats_url": servers.nats_url, "rpc_timeout_s": 2.0, "idempotency_bucket": bucket, **overrides}
        )
        buckets.append(settings.idempotency_bucket)
        app = await create_app(connection or nc, settings)
        transport = httpx.ASGITransport(app=app)
        return await stack.enter_async_context(httpx.AsyncClient(transport=transport, base_url="http://gateway.test"))

    yield make
    await stack.aclose()
    js = nc.jetstream()
    for bucket in buckets:
        with contextlib.suppress(nats.js.errors.NotFoundError):
            await js.delete_key_value(bucket)


@pytest.fixture
async def client(make_client: ClientFactory, fake: FakeTenancy) -> httpx.AsyncClient:
    return await make_client()
