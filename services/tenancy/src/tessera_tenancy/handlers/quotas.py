"""Quotas of tenants and projects."""

from __future__ import annotations

import json

from tessera_contracts.api import tenancy as api
from tessera_contracts.api.common import Page
from tessera_contracts.events import tenancy as ev
from tessera_contracts.rbac import Permission
from tessera_contracts.registry import Event
from tessera_runtime.rpc import Call, allow
from tessera_tenancy import domain, reads
from tessera_tenancy.domain import NotFound
from tessera_tenancy.handlers.base import Base, History
from tessera_tenancy.handlers.tenants import bound_projects


def latest_quota(history: History) -> ev.QuotaSet | None:
    """The quota an aggregate's events leave in force (the last ``QuotaSet``)."""
    return next((e for e, _ in reversed(history) if isinstance(e, ev.QuotaSet)), None)


class QuotaOps(Base):
    """Set, read and list quotas."""

    async def set_quota(self, call: Call, body: api.SetQuota) -> api.QuotaView:
        """Replace a tenant's quota (platform admin) or a project's (tenant admin).

        The rules of :func:`tessera_tenancy.domain.check_quota` and
        :func:`~tessera_tenancy.domain.check_tenant_covers_projects` hold at decision time
        (a tenant and one of its projects changed at the same instant are checked against each
        other's last recorded state).
        """
        principal = call.require_principal()
        tenant, project = call.scope.get("tenant", ""), call.scope.get("project")
        if project is None:
            allow(principal, Permission.PLATFORM_ADMIN)
            await self.require_tenant(tenant)
        else:
            allow(principal, Permission.TENANT_ADMIN, tenant)
            await self.require(domain.project_ref(tenant, project), f"project {tenant}/{project}")
        tenant_history, _ = await self.load(domain.quota_ref(tenant, None))
        domain.check_quota(body, latest_quota(tenant_history), project)
        if project is None:
            domain.check_tenant_covers_projects(body, await self._project_nominals(tenant))
        event = domain.quota_event(tenant, project, body)

        def decide(history: History) -> list[Event]:
            return [event]

        visible = await self.update(call, domain.quota_ref(tenant, project), decide)
        self.visible_or_unavailable(visible)
        return await self._quota(tenant, project)

    async def _project_nominals(self, tenant: str) -> dict[str, dict[str, int]]:
        async with reads.scoped(self.pool, tenant) as conn:
            rows = await conn.fetch("SELECT project, gpus FROM quotas WHERE tenant_id = $1 AND project <> ''", tenant)
        return {r["project"]: {g["gpu_model"]: g["nominal_milli"] for g in json.loads(r["gpus"])} for r in rows}

    async def get_quota(self, call: Call, body: None) -> api.QuotaView:
        """A tenant's or a project's quota (any role that can read it)."""
        tenant, project = call.scope.get("tenant", ""), call.scope.get("project")
        permission = Permission.PROJECT_READ if project else Permission.TENANT_READ
        allow(call.require_principal(), permission, tenant, project)
        return await self._quota(tenant, project)

    async def _quota(self, tenant: str, project: str | None) -> api.QuotaView:
        async with reads.scoped(self.pool, tenant) as conn:
            row = await conn.fetchrow(
                "SELECT * FROM quotas WHERE tenant_id = $1 AND project = $2", tenant, project or ""
            )
        if row is None:
            raise NotFound(f"no quota is set for {tenant}{'/' + project if project else ''}")
        return reads.quota_view(row)

    async def list_quotas(self, call: Call, body: None) -> Page[api.QuotaView]:
        """The tenant's quota and its projects' quotas; one bound to projects sees only theirs."""
        principal = call.require_principal()
        tenant = call.scope.get("tenant", "")
        allow(principal, Permission.TENANT_READ, tenant)
        only = bound_projects(principal, tenant)
        async with reads.scoped(self.pool, tenant) as conn:
            rows, cursor = await reads.page_of(
                conn,
                "SELECT * FROM quotas WHERE tenant_id = $1"
                " AND ($2::text[] IS NULL OR project = '' OR project = ANY($2)) AND {after}",
                ("project",),
                call.page,
                tenant,
                only,
            )
        return reads.page([reads.quota_view(r) for r in rows], cursor)
