"""Users and service accounts, and their roles."""

from __future__ import annotations

from tessera_contracts.api import tenancy as api
from tessera_contracts.api.common import Page
from tessera_contracts.events import tenancy as ev
from tessera_contracts.rbac import PLATFORM_TENANT, Permission, Principal, RoleBinding
from tessera_contracts.registry import Event
from tessera_runtime.rpc import Call, allow
from tessera_tenancy import domain, reads
from tessera_tenancy.domain import Conflict, Invalid, NotFound
from tessera_tenancy.handlers.base import Base, History, is_self


class UserOps(Base):
    """Create, list and read users; grant and revoke roles."""

    async def create_user(self, call: Call, body: api.CreateUser) -> api.UserView:
        """Create a user or service account (tenant admin), optionally with a first role."""
        principal = call.require_principal()
        tenant = call.scope.get("tenant", "")
        allow(principal, Permission.TENANT_ADMIN, tenant)
        await self.require_tenant(tenant)
        binding = None
        if body.role is not None:
            binding = RoleBinding(role=body.role, tenant=tenant, project=body.project)
            await self.check_grant(principal, tenant, binding)
        elif body.project is not None:
            raise Invalid("project given without a role")
        principal_id = await self.create_principal(
            call, tenant, domain.new_principal_id(), body.name, body.kind, binding
        )
        return api.UserView(  # from what was appended: right even while the projection lags
            tenant=tenant,
            id=principal_id,
            name=body.name,
            kind=body.kind,
            roles=[binding] if binding else [],
            created_at=self.clock(),
        )

    async def create_principal(
        self, call: Call, tenant: str, principal_id: str, name: str, kind: str, binding: RoleBinding | None
    ) -> str:
        """Claim the name, then create the principal; returns its id.

        A claim whose principal was never created (a crash between the two appends) is taken
        over: the principal is created under the claimed id, so a name is never lost for good.

        Raises:
            Conflict: the name belongs to an existing principal of this tenant.
        """
        claim_ref = domain.username_ref(tenant, name)
        claim = ev.UsernameClaimed(tenant=tenant, name=name, principal_id=principal_id)
        try:
            await self.create(call, claim_ref, [claim], f"user name {name!r}")
        except Conflict:
            history, _ = await self.load(claim_ref)
            claimed = history[0][0]
            assert isinstance(claimed, ev.UsernameClaimed)
            principal_id = claimed.principal_id
            if await self.exists(domain.principal_ref(tenant, principal_id)):
                raise Conflict(f"user name {name!r} is taken in tenant {tenant}") from None
        events: list[Event] = [
            ev.PrincipalCreated(tenant=tenant, principal_id=principal_id, name=name, kind=kind)  # type: ignore[arg-type]
        ]
        if binding is not None:
            events.append(
                ev.RoleGranted(tenant=tenant, principal_id=principal_id, role=binding.role, project=binding.project)
            )
        await self.create(call, domain.principal_ref(tenant, principal_id), events, f"user name {name!r}")
        return principal_id

    async def check_grant(self, principal: Principal, tenant: str, binding: RoleBinding) -> None:
        """Whether ``principal`` may grant ``binding`` in ``tenant``.

        ``platform-admin`` exists only in the platform's own tenant, granted by a platform admin;
        ``tenant-admin`` is never narrowed to a project; a project must exist.
        """
        if binding.role == "platform-admin":
            allow(principal, Permission.PLATFORM_ADMIN)
            if tenant != PLATFORM_TENANT:
                raise Invalid(f"platform-admin is granted in {PLATFORM_TENANT} only")
            if binding.project is not None:
                raise Invalid("platform-admin cannot be bound to a project")
        if binding.role == "tenant-admin" and binding.project is not None:
            raise Invalid("tenant-admin cannot be bound to a project")
        if binding.project is not None:
            await self.require(domain.project_ref(tenant, binding.project), f"project {tenant}/{binding.project}")

    async def list_users(self, call: Call, body: None) -> Page[api.UserView]:
        """Users and service accounts of a tenant (tenant admin)."""
        tenant = call.scope.get("tenant", "")
        allow(call.require_principal(), Permission.TENANT_ADMIN, tenant)
        async with reads.scoped(self.pool, tenant) as conn:
            rows, cursor = await reads.page_of(
                conn, "SELECT * FROM principals WHERE tenant_id = $1 AND {after}", ("id",), call.page, tenant
            )
            return reads.page(await reads.users(conn, rows), cursor)

    async def get_user(self, call: Call, body: None) -> api.UserView:
        """One user (tenant admin, or the user itself)."""
        principal = call.require_principal()
        tenant, user = call.scope.get("tenant", ""), call.scope.get("user", "")
        if not is_self(principal, tenant, user):
            allow(principal, Permission.TENANT_ADMIN, tenant)
        return await self.user_view(tenant, user)

    async def user_view(self, tenant: str, user: str, visible: bool = True) -> api.UserView:
        """The user as the projection shows it.

        Raises:
            NotFound: not a user of ``tenant`` (404 whatever tenant it belongs to).
            RpcError: 503 when ``visible`` is False (a just-recorded change is not readable yet).
        """
        self.visible_or_unavailable(visible)
        async with reads.scoped(self.pool, tenant) as conn:
            rows = await conn.fetch("SELECT * FROM principals WHERE tenant_id = $1 AND id = $2", tenant, user)
            if not rows:
                raise NotFound(f"user {user} not found")
            return (await reads.users(conn, rows))[0]

    async def grant_role(self, call: Call, body: api.RoleGrant) -> api.UserView:
        """Grant a role (tenant admin; platform-admin only in ``_system`` by a platform admin). Idempotent."""
        return await self._change_role(call, body, domain.grant)

    async def revoke_role(self, call: Call, body: api.RoleGrant) -> api.UserView:
        """Revoke a role (tenant admin). Idempotent."""
        return await self._change_role(call, body, domain.revoke)

    async def _change_role(self, call: Call, body: api.RoleGrant, rule: domain.RoleRule) -> api.UserView:
        principal = call.require_principal()
        tenant, user = call.scope.get("tenant", ""), call.scope.get("user", "")
        allow(principal, Permission.TENANT_ADMIN, tenant)
        await self.check_grant(principal, tenant, RoleBinding(role=body.role, tenant=tenant, project=body.project))

        def decide(history: History) -> list[Event]:
            return rule(domain.principal_state(history), tenant, body)

        visible = await self.update(call, domain.principal_ref(tenant, user), decide)
        return await self.user_view(tenant, user, visible)
