"""Tenancy commands and queries over NATS (``rpc.tenancy.<operation>``).

Commands load the aggregate from the log, decide with :mod:`tessera_tenancy.domain`, append with
optimistic concurrency and answer (see :mod:`~tessera_tenancy.handlers.base`). Queries read the
projection as the app role, scoped to one tenant (:mod:`tessera_tenancy.reads`). Every operation
authorises with :func:`tessera_contracts.rbac.authorize`; the gateway's guards are only a first
filter. One module per group of operations.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import asyncpg
import msgspec

from tessera_contracts.api import tenancy as api
from tessera_runtime.eventlog import EventLog
from tessera_runtime.projector import Projector
from tessera_runtime.rpc import Call, RpcServer
from tessera_tenancy.handlers.base import Health, domain_errors
from tessera_tenancy.handlers.identity import IdentityOps
from tessera_tenancy.handlers.platform import PlatformOps
from tessera_tenancy.handlers.quotas import QuotaOps
from tessera_tenancy.handlers.tenants import TenantOps

__all__ = ["Health", "TenancyHandlers"]


class TenancyHandlers(IdentityOps, TenantOps, QuotaOps, PlatformOps):
    """Every operation of the tenancy service.

    Args:
        log: the event log.
        pool: Postgres pool holding ``proj_tenancy``.
        projector: this process's tenancy projector (followed in the background).
        pepper: the API-key pepper (:func:`tessera_tenancy.keys.load_pepper`).
        clock: the current time, UTC (injected for tests).
    """

    def __init__(
        self,
        log: EventLog,
        pool: asyncpg.Pool,
        projector: Projector,
        pepper: bytes,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        visibility_timeout_s: float = 2.0,
    ) -> None:
        super().__init__(log, pool, projector, pepper, clock, visibility_timeout_s)
        self._key_use_recorded = {}

    def register(self, server: RpcServer) -> None:
        """Register every operation on ``server``."""
        ops: list[tuple[str, type[msgspec.Struct] | None, Callable[..., Awaitable[Any]]]] = [
            ("health", None, self.health),
            ("whoami", None, self.whoami),
            ("verify_key", api.VerifyKey, self.verify_key),
            ("bootstrap", api.Bootstrap, self.bootstrap),
            ("create_tenant", api.CreateTenant, self.create_tenant),
            ("list_tenants", None, self.list_tenants),
            ("get_tenant", None, self.get_tenant),
            ("create_project", api.CreateProject, self.create_project),
            ("list_projects", None, self.list_projects),
            ("get_project", None, self.get_project),
            ("create_user", api.CreateUser, self.create_user),
            ("list_users", None, self.list_users),
            ("get_user", None, self.get_user),
            ("grant_role", api.RoleGrant, self.grant_role),
            ("revoke_role", api.RoleGrant, self.revoke_role),
            ("issue_key", api.IssueKey, self.issue_key),
            ("list_keys", None, self.list_keys),
            ("revoke_key", None, self.revoke_key),
            ("set_quota", api.SetQuota, self.set_quota),
            ("get_quota", None, self.get_quota),
            ("list_quotas", None, self.list_quotas),
            ("register_cluster", api.RegisterCluster, self.register_cluster),
            ("list_clusters", None, self.list_clusters),
            ("get_cluster", None, self.get_cluster),
            ("define_node_pool", api.DefineNodePool, self.define_node_pool),
            ("define_priority_class", api.DefinePriorityClass, self.define_priority_class),
            ("list_priority_classes", None, self.list_priority_classes),
        ]
        for name, body, handler in ops:
            server.operation(name, body)(_guarded(handler))


def _guarded(handler: Callable[..., Awaitable[Any]]) -> Callable[[Call, Any], Awaitable[Any]]:
    async def run(call: Call, body: Any) -> Any:
        with domain_errors():
            return await handler(call, body)

    return run
