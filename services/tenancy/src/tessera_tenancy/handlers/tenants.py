"""Tenants and their projects."""

from __future__ import annotations

from tessera_contracts.api import tenancy as api
from tessera_contracts.api.common import Page
from tessera_contracts.events import tenancy as ev
from tessera_contracts.rbac import Permission, Principal
from tessera_runtime.rpc import Call, allow
from tessera_tenancy import domain, reads
from tessera_tenancy.domain import NotFound
from tessera_tenancy.handlers.base import Base


def bound_projects(principal: Principal, tenant: str) -> list[str] | None:
    """The projects a principal is confined to in ``tenant``; None when it sees all of them."""
    if principal.is_platform_admin:
        return None
    bound = {b.project for b in principal.roles if b.tenant == tenant}
    return None if None in bound else sorted(p for p in bound if p)


class TenantOps(Base):
    """Create, list and read tenants and projects."""

    async def create_tenant(self, call: Call, body: api.CreateTenant) -> api.TenantView:
        """Create a tenant (platform admin). 409 if the slug is taken."""
        allow(call.require_principal(), Permission.PLATFORM_ADMIN)
        event = ev.TenantCreated(tenant=body.tenant, display_name=body.display_name)
        await self.create(call, domain.tenant_ref(body.tenant), [event], f"tenant {body.tenant}")
        return api.TenantView(tenant=body.tenant, display_name=body.display_name, created_at=self.clock())

    async def list_tenants(self, call: Call, body: None) -> Page[api.TenantView]:
        """Every tenant for a platform admin; the caller's own tenant for everyone else."""
        principal = call.require_principal()
        if principal.is_platform_admin:
            async with reads.platform_wide(self.pool) as conn:
                rows, cursor = await reads.page_of(
                    conn, "SELECT * FROM tenants WHERE {after}", ("tenant_id",), call.page
                )
        else:
            async with reads.scoped(self.pool, principal.tenant) as conn:
                rows, cursor = await reads.page_of(
                    conn, "SELECT * FROM tenants WHERE {after}", ("tenant_id",), call.page
                )
        return reads.page([reads.tenant_view(r) for r in rows], cursor)

    async def get_tenant(self, call: Call, body: None) -> api.TenantView:
        """One tenant (any role in it)."""
        tenant = call.scope.get("tenant", "")
        allow(call.require_principal(), Permission.TENANT_READ, tenant)
        async with reads.scoped(self.pool, tenant) as conn:
            row = await conn.fetchrow("SELECT * FROM tenants WHERE tenant_id = $1", tenant)
        if row is None:
            raise NotFound(f"tenant {tenant} not found")
        return reads.tenant_view(row)

    async def create_project(self, call: Call, body: api.CreateProject) -> api.ProjectView:
        """Create a project in a tenant (tenant admin). 409 if the slug is taken there."""
        tenant = call.scope.get("tenant", "")
        allow(call.require_principal(), Permission.TENANT_ADMIN, tenant)
        await self.require_tenant(tenant)
        event = ev.ProjectCreated(tenant=tenant, project=body.project, display_name=body.display_name)
        await self.create(call, domain.project_ref(tenant, body.project), [event], f"project {tenant}/{body.project}")
        return api.ProjectView(
            tenant=tenant, project=body.project, display_name=body.display_name, created_at=self.clock()
        )

    async def list_projects(self, call: Call, body: None) -> Page[api.ProjectView]:
        """Projects of a tenant; a principal bound to projects only sees those."""
        principal = call.require_principal()
        tenant = call.scope.get("tenant", "")
        allow(principal, Permission.TENANT_READ, tenant)
        async with reads.scoped(self.pool, tenant) as conn:
            rows, cursor = await reads.page_of(
                conn,
                "SELECT * FROM projects WHERE tenant_id = $1 AND ($2::text[] IS NULL OR project = ANY($2)) AND {after}",
                ("project",),
                call.page,
                tenant,
                bound_projects(principal, tenant),
            )
        return reads.page([reads.project_view(r) for r in rows], cursor)

    async def get_project(self, call: Call, body: None) -> api.ProjectView:
        """One project (any role in it or its tenant)."""
        tenant, project = call.scope.get("tenant", ""), call.scope.get("project", "")
        allow(call.require_principal(), Permission.PROJECT_READ, tenant, project)
        async with reads.scoped(self.pool, tenant) as conn:
            row = await conn.fetchrow("SELECT * FROM projects WHERE tenant_id = $1 AND project = $2", tenant, project)
        if row is None:
            raise NotFound(f"project {tenant}/{project} not found")
        return reads.project_view(row)
