"""Fixture `tenancy`: a real tenancy service (projector + RPC server) on the test's NATS and database."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import asyncpg
import msgspec
import pytest
from nats.aio.client import Client as NATS

from tessera_contracts.api import tenancy as api
from tessera_contracts.rbac import Principal
from tessera_runtime import rpc
from tessera_runtime.eventlog import EventLog
from tessera_runtime.projector import Projector
from tessera_tenancy.handlers import TenancyHandlers
from tessera_tenancy.projections import TENANCY

T = TypeVar("T")
PEPPER = bytes(range(32))


@dataclass
class Clock:
    """A settable clock (UTC)."""

    now: datetime = field(default_factory=lambda: datetime(2026, 11, 29, 12, 0, tzinfo=UTC))

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


@dataclass
class Tenancy:
    """Test handle on a running tenancy service."""

    nc: NATS
    pool: asyncpg.Pool
    log: EventLog
    clock: Clock
    projector: Projector
    admin: Principal
    admin_key: str

    async def call(
        self,
        op: str,
        body: msgspec.Struct | None = None,
        *,
        as_: Principal | None = None,
        result: type[T] | None = None,
        **scope: str,
    ) -> Any:
        raw = await rpc.call(self.nc, "tenancy", op, body, principal=as_, scope=scope)
        return msgspec.json.decode(raw, type=result) if result is not None else msgspec.json.decode(raw)

    async def principal(self, secret: str) -> Principal:
        return await self.call("verify_key", api.VerifyKey(secret=secret), result=Principal)

    async def user_with_key(self, tenant: str, name: str, role: str | None, project: str | None = None) -> Principal:
        user = await self.call(
            "create_user", api.CreateUser(name=name, role=role, project=project), as_=self.admin, result=api.UserView,
            tenant=tenant,
        )  # fmt: skip
        issued = await self.call(
            "issue_key", api.IssueKey(name="k"), as_=self.admin, result=api.IssuedKey, tenant=tenant, user=user.id
        )
        return await self.principal(issued.secret)


@pytest.fixture
async def tenancy(nc: NATS, log: EventLog, pool: asyncpg.Pool) -> AsyncIterator[Tenancy]:
    clock = Clock()
    projector = Projector(TENANCY, pool, log, idle_fetch_s=0.2)
    await projector.setup()
    stop = asyncio.Event()
    follower = asyncio.create_task(projector.run(stop))
    handlers = TenancyHandlers(log, pool, projector, PEPPER, clock=clock)
    server = rpc.RpcServer(nc, "tenancy")
    handlers.register(server)
    await server.start()
    try:
        issued = msgspec.json.decode(
            await rpc.call(nc, "tenancy", "bootstrap", api.Bootstrap(name="root")), type=api.IssuedKey
        )
        admin = msgspec.json.decode(
            await rpc.call(nc, "tenancy", "verify_key", api.VerifyKey(secret=issued.secret)), type=Principal
        )
        yield Tenancy(nc, pool, log, clock, projector, admin, issued.secret)
    finally:
        await server.stop()
        stop.set()
        await follower
