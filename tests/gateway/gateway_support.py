"""Gateway test support: a fake tenancy responder on the real NATS, fixed keys and principals.

The fake answers ``verify_key`` for a few fixed secrets and a handful of operations from an
in-memory dict (``issue_key`` makes a new random secret each time, kept in ``issued_secrets``);
it records every call so tests can assert what reached the service (and what did not).
Operations it does not register (``list_clusters``, ``register_cluster``, ...) have no
responder, which the gateway must answer with 503.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from nats.aio.client import Client as NATS

from tessera_contracts import rpc
from tessera_contracts.api.common import Page
from tessera_contracts.api.tenancy import (
    CreateProject,
    CreateTenant,
    IssuedKey,
    IssueKey,
    KeyView,
    ProjectView,
    TenantView,
    UserView,
    VerifyKey,
)
from tessera_contracts.rbac import Principal, RoleBinding
from tessera_runtime.rpc import Call, RpcError, RpcServer

ADMIN_KEY = "tsk_admin_0123456789abcdef"
ACME_KEY = "tsk_acme_0123456789abcdef"
ADMIN = Principal(
    id="u_a1",
    tenant="_system",
    name="admin",
    kind="user",
    roles=(RoleBinding(role="platform-admin", tenant="_system"),),
    key_id="k_a1",
)
ACME_ADMIN = Principal(
    id="u_ac1",
    tenant="acme",
    name="ada@acme.example",
    kind="user",
    roles=(RoleBinding(role="tenant-admin", tenant="acme"),),
    key_id="k_ac1",
)
PRINCIPALS = {ADMIN_KEY: ADMIN, ACME_KEY: ACME_ADMIN}
NOW = datetime(2025, 1, 1, tzinfo=UTC)


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@dataclass
class Seen:
    operation: str
    call: Call
    body: Any


@dataclass
class FakeTenancy:
    """An in-memory stand-in for the tenancy service, answering on ``rpc.tenancy.*``."""

    nc: NATS
    slow_s: float = 0.6
    tenants: dict[str, TenantView] = field(default_factory=dict)
    seen: list[Seen] = field(default_factory=list)
    hold: asyncio.Event | None = None  # when set, create_project waits for it
    entered: asyncio.Event = field(default_factory=asyncio.Event)
    issued_secrets: list[str] = field(default_factory=list)
    server: RpcServer | None = None

    def calls(self, operation: str) -> list[Seen]:
        return [s for s in self.seen if s.operation == operation]

    async def start(self) -> None:
        for name in ("acme", "globex"):
            self.tenants[name] = TenantView(tenant=name, display_name=name.title(), created_at=NOW)
        server = RpcServer(self.nc, "tenancy")

        def record(operation: str, body_type: type[Any] | None = None) -> Callable[[Any], Any]:
            def wrap(fn: Callable[[Call, Any], Awaitable[Any]]) -> Any:
                async def handler(call: Call, body: Any) -> Any:
                    self.seen.append(Seen(operation, call, body))
                    return await fn(call, body)

                return server.operation(operation, body_type)(handler)

            return wrap

        @record("verify_key", VerifyKey)
        async def verify_key(call: Call, body: VerifyKey) -> Principal:
            principal = PRINCIPALS.get(body.secret)
            if principal is None:
                raise RpcError(rpc.UNAUTHENTICATED, "unknown, revoked or expired key")
            return principal

        @record("whoami")
        async def whoami(call: Call, body: None) -> Principal:
            return call.require_principal()

        @record("list_tenants")
        async def list_tenants(call: Call, body: None) -> Page[TenantView]:
            items = sorted(self.tenants.values(), key=lambda t: t.tenant)[: call.page.limit]
            return Page(items=items, next=None)

        @record("create_tenant", CreateTenant)
        async def create_tenant(call: Call, body: CreateTenant) -> TenantView:
            if body.tenant in self.tenants:
                raise RpcError(rpc.CONFLICT, f"tenant {body.tenant!r} exists")
            view = TenantView(tenant=body.tenant, display_name=body.display_name, created_at=NOW)
            self.tenants[body.tenant] = view
            return view

        @record("get_tenant")
        async def get_tenant(call: Call, body: None) -> TenantView:
            view = self.tenants.get(call.scope["tenant"])
            if view is None:
                raise RpcError(rpc.NOT_FOUND, f"tenant {call.scope['tenant']!r} not found")
            return view

        @record("create_project", CreateProject)
        async def create_project(call: Call, body: CreateProject) -> ProjectView:
            self.entered.set()
            if self.hold is not None:
                await self.hold.wait()
            return ProjectView(
                tenant=call.scope["tenant"], project=body.project, display_name=body.display_name, created_at=NOW
            )

        @record("list_users")
        async def list_users(call: Call, body: None) -> Page[UserView]:
            return Page(items=[], next=None)

        @record("issue_key", IssueKey)
        async def issue_key(call: Call, body: IssueKey) -> IssuedKey:
            key_id = f"k_{secrets.token_hex(4)}"
            secret = f"tsk_{key_id[2:]}_{secrets.token_hex(16)}"
            self.issued_secrets.append(secret)
            view = KeyView(
                tenant=call.scope["tenant"],
                key_id=key_id,
                user_id=call.scope["user"],
                name=body.name,
                prefix=secret[:12],
                created_at=NOW,
                expires_at=body.expires_at,
                revoked_at=None,
                last_used_at=None,
            )
            return IssuedKey(key=view, secret=secret)

        @record("get_project")
        async def get_project(call: Call, body: None) -> ProjectView:
            await asyncio.sleep(self.slow_s)  # slower than the gateway's timeout in the timeout test
            return ProjectView(
                tenant=call.scope["tenant"], project=call.scope["project"], display_name="P", created_at=NOW
            )

        await server.start()
        self.server = server

    async def stop(self) -> None:
        if self.server is not None:
            await self.server.stop()
            self.server = None


def assert_problem(response: Any, status: int, code: str) -> dict[str, Any]:
    """Check an RFC 9457 answer (media type, stable type, title, status, code) and return its body."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json"), response.headers
    body: dict[str, Any] = response.json()
    assert body["type"] == f"https://tessera.dev/problems/{code}"
    assert body["code"] == code
    assert body["status"] == status
    assert body["title"]
    assert isinstance(body.get("detail", ""), str)
    return body
