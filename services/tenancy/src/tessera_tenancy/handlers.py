"""Tenancy commands and queries over NATS (``rpc.tenancy.<operation>``).

Commands load the aggregate from the log, decide with :mod:`tessera_tenancy.domain`, append with
optimistic concurrency, wait until this process's projector has applied what they appended
(read-your-writes for the caller) and answer with the view. Queries read the projection as the
app role, scoped to one tenant (:mod:`tessera_tenancy.reads`). Every operation authorises with
:func:`tessera_contracts.rbac.authorize`; the gateway's guards are only a first filter.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime

import asyncpg
import msgspec

from tessera_contracts import codec, rpc
from tessera_contracts.api import tenancy as api
from tessera_contracts.api.common import Page
from tessera_contracts.envelope import envelope
from tessera_contracts.events import tenancy as ev
from tessera_contracts.rbac import PLATFORM_TENANT, Decision, Permission, Principal, RoleBinding, authorize
from tessera_contracts.registry import Event
from tessera_contracts.subjects import AggregateRef, InvalidSubject
from tessera_runtime.errors import ConcurrencyConflict
from tessera_runtime.eventlog import EventLog
from tessera_runtime.projector import Projector
from tessera_runtime.rpc import Call, RpcError, RpcServer
from tessera_tenancy import domain, keys, reads
from tessera_tenancy.domain import Conflict, Invalid, NotFound

SOURCE = "tessera/tenancy"
USE_RESOLUTION_S = 300.0
"""An API key's ``last_used_at`` is recorded at most this often (seconds), not on every request."""


class Health(msgspec.Struct, frozen=True):
    """Answer of the ``health`` operation."""

    status: str = "ok"


@contextmanager
def domain_errors() -> Iterator[None]:
    """Map domain errors to problems: not found 404, conflict 409, invalid 422, bad cursor 400."""
    try:
        yield
    except NotFound as exc:
        raise RpcError(rpc.NOT_FOUND, str(exc)) from None
    except Conflict as exc:
        raise RpcError(rpc.CONFLICT, str(exc)) from None
    except Invalid as exc:
        raise RpcError(rpc.UNPROCESSABLE, str(exc)) from None
    except (reads.BadCursor, InvalidSubject) as exc:
        raise RpcError(rpc.INVALID, str(exc)) from None


def allow(principal: Principal, permission: Permission, tenant: str | None = None, project: str | None = None) -> None:
    """Raise 404 or 403 unless ``authorize`` allows."""
    decision = authorize(principal, permission, tenant, project)
    if decision == Decision.NOT_FOUND:
        what = f"project {tenant}/{project}" if project else f"tenant {tenant}"
        raise RpcError(rpc.NOT_FOUND, f"{what} not found")
    if decision == Decision.FORBIDDEN:
        raise RpcError(rpc.FORBIDDEN, f"{permission.value} is not granted to you")


def is_self(principal: Principal, tenant: str, user: str) -> bool:
    """The caller acts on itself."""
    return principal.tenant == tenant and principal.id == user


class TenancyHandlers:
    """The operations of the tenancy service.

    Args:
        log: the event log.
        pool: Postgres pool holding ``proj_tenancy``.
        projector: this process's tenancy projector (followed in the background).
        pepper: the API-key pepper (:func:`tessera_tenancy.keys.load_pepper`).
        clock: returns the current time, UTC (injected for tests).
    """

    def __init__(
        self,
        log: EventLog,
        pool: asyncpg.Pool,
        projector: Projector,
        pepper: bytes,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.log = log
        self.pool = pool
        self.projector = projector
        self.pepper = pepper
        self.clock = clock
        self._key_use_recorded: dict[str, float] = {}

    # -- plumbing -------------------------------------------------------------------------------

    async def _exists(self, ref: AggregateRef) -> bool:
        return bool(await self.log.last_sequence(ref.subject) > 0)

    async def _load(self, ref: AggregateRef) -> tuple[list[tuple[Event, datetime]], int]:
        stored, last = await self.log.load(ref.subject)
        return [(codec.payload(e.envelope), e.envelope.time) for e in stored], last

    async def _append(self, call: Call, ref: AggregateRef, events: Sequence[Event], expected: int | None) -> int:
        """Append and wait for the projection; returns the last sequence (0 when nothing to append).

        Raises:
            Conflict: the aggregate changed since it was read (or exists, when ``expected`` is 0).
        """
        if not events:
            return 0
        now = self.clock()
        envs = [
            envelope(
                e,
                subject=ref.subject,
                source=SOURCE,
                tenant=ref.tenant,
                time=now,
                correlation_id=call.correlation_id,
            )
            for e in events
        ]
        try:
            acks = await self.log.append(ref.subject, envs, expected)
        except ConcurrencyConflict:
            raise Conflict(f"{ref.aggregate} {ref.id} already exists or changed meanwhile; retry") from None
        last: int = acks[-1].seq
        await self.projector.wait_until(last)
        return last

    async def _require(self, ref: AggregateRef, what: str) -> None:
        if not await self._exists(ref):
            raise NotFound(f"{what} not found")

    # -- registration ---------------------------------------------------------------------------

    def register(self, server: RpcServer) -> None:
        """Register every operation on ``server``."""
        ops: list[tuple[str, type[msgspec.Struct] | None, Callable[..., object]]] = [
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
            server.operation(name, body)(self._guarded(handler))  # type: ignore[arg-type]

    @staticmethod
    def _guarded(handler: Callable[..., object]) -> Callable[..., object]:
        async def run(call: Call, body: object) -> object:
            with domain_errors():
                return await handler(call, body)  # type: ignore[misc]

        return run

    # -- identity -------------------------------------------------------------------------------

    async def health(self, call: Call, body: None) -> Health:
        """Liveness for ``tessera status``."""
        return Health()

    async def whoami(self, call: Call, body: None) -> Principal:
        """The caller as the gateway authenticated it."""
        principal: Principal = call.require_principal()
        return principal

    async def verify_key(self, call: Call, body: api.VerifyKey) -> Principal:
        """Check a presented API key; answer the principal it stands for.

        Raises 401 for a malformed, unknown, revoked or expired key (never echoing the key).
        """
        key_id = keys.key_id_of(body.secret)
        if key_id is None:
            raise RpcError(rpc.UNAUTHENTICATED, "malformed API key")
        async with reads.scoped(self.pool, reads.ALL) as conn:
            row = await conn.fetchrow("SELECT * FROM api_keys WHERE key_id = $1", key_id)
            if row is None or not keys.matches(self.pepper, body.secret, row["digest"]):
                raise RpcError(rpc.UNAUTHENTICATED, "unknown API key")
            now = self.clock()
            if row["revoked_at"] is not None:
                raise RpcError(rpc.UNAUTHENTICATED, "API key revoked")
            if row["expires_at"] is not None and row["expires_at"] <= now:
                raise RpcError(rpc.UNAUTHENTICATED, "API key expired")
            user = await conn.fetchrow("SELECT * FROM principals WHERE id = $1", row["principal_id"])
            if user is None:
                raise RpcError(rpc.UNAUTHENTICATED, "the key's user no longer exists")
            roles = await reads.roles_of(conn, [user["id"]])
        await self._record_use(call, row["tenant_id"], key_id, now)
        return Principal(
            id=user["id"],
            tenant=user["tenant_id"],
            name=user["name"],
            kind=user["kind"],
            roles=tuple(roles[user["id"]]),
            key_id=key_id,
        )

    async def _record_use(self, call: Call, tenant: str, key_id: str, now: datetime) -> None:
        last = self._key_use_recorded.get(key_id)
        if last is not None and now.timestamp() - last < USE_RESOLUTION_S:
            return
        self._key_use_recorded[key_id] = now.timestamp()
        ref = domain.key_ref(tenant, key_id)
        env = envelope(
            ev.ApiKeyUsed(tenant=tenant, key_id=key_id, at=now),
            subject=ref.subject,
            source=SOURCE,
            tenant=tenant,
            time=now,
            correlation_id=call.correlation_id,
        )
        await self.log.append(ref.subject, [env], None)

    async def bootstrap(self, call: Call, body: api.Bootstrap) -> api.IssuedKey:
        """Create the first platform admin and its key, once.

        Raises 409 when the platform was bootstrapped already.
        """
        principal_id = f"u_{secrets.token_hex(8)}"
        if await self._exists(domain.BOOTSTRAP_REF):
            raise Conflict("the platform is already bootstrapped; use an admin key")
        await self._append(call, domain.BOOTSTRAP_REF, [ev.PlatformBootstrapped(principal_id=principal_id)], 0)
        await self._create_principal(
            call,
            PLATFORM_TENANT,
            principal_id,
            body.name,
            "user",
            RoleBinding(role="platform-admin", tenant=PLATFORM_TENANT),
        )
        return await self._issue(call, PLATFORM_TENANT, principal_id, "bootstrap", None)

    # -- tenants and projects -------------------------------------------------------------------

    async def create_tenant(self, call: Call, body: api.CreateTenant) -> api.TenantView:
        """Create a tenant (platform admin). 409 if the slug is taken."""
        allow(call.require_principal(), Permission.PLATFORM_ADMIN)
        event = ev.TenantCreated(tenant=body.tenant, display_name=body.display_name)
        await self._append(call, domain.tenant_ref(body.tenant), [event], 0)
        return await self.get_tenant(call, None, tenant=body.tenant)

    async def list_tenants(self, call: Call, body: None) -> Page[api.TenantView]:
        """Every tenant for a platform admin; the caller's own tenant for everyone else."""
        principal = call.require_principal()
        scope = reads.ALL if principal.is_platform_admin else principal.tenant
        async with reads.scoped(self.pool, scope) as conn:
            rows, cursor = await reads.page_of(conn, "SELECT * FROM tenants WHERE {after}", ("tenant_id",), call.page)
        return reads.page([reads.tenant_view(r) for r in rows], cursor)

    async def get_tenant(self, call: Call, body: None, tenant: str | None = None) -> api.TenantView:
        """One tenant (any role in it)."""
        tenant = tenant or call.scope.get("tenant", "")
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
        await self._require(domain.tenant_ref(tenant), f"tenant {tenant}")
        event = ev.ProjectCreated(tenant=tenant, project=body.project, display_name=body.display_name)
        await self._append(call, domain.project_ref(tenant, body.project), [event], 0)
        return await self._project(tenant, body.project)

    async def list_projects(self, call: Call, body: None) -> Page[api.ProjectView]:
        """Projects of a tenant; a principal bound to projects only sees those."""
        principal = call.require_principal()
        tenant = call.scope.get("tenant", "")
        allow(principal, Permission.TENANT_READ, tenant)
        bound = {b.project for b in principal.roles if b.tenant == tenant}
        only = None if (None in bound or principal.is_platform_admin) else sorted(p for p in bound if p)
        async with reads.scoped(self.pool, tenant) as conn:
            rows, cursor = await reads.page_of(
                conn,
                "SELECT * FROM projects WHERE tenant_id = $1 AND ($2::text[] IS NULL OR project = ANY($2)) AND {after}",
                ("project",),
                call.page,
                tenant,
                only,
            )
        return reads.page([reads.project_view(r) for r in rows], cursor)

    async def get_project(self, call: Call, body: None) -> api.ProjectView:
        """One project (any role in it or its tenant)."""
        tenant, project = call.scope.get("tenant", ""), call.scope.get("project", "")
        allow(call.require_principal(), Permission.PROJECT_READ, tenant, project)
        return await self._project(tenant, project)

    async def _project(self, tenant: str, project: str) -> api.ProjectView:
        async with reads.scoped(self.pool, tenant) as conn:
            row = await conn.fetchrow("SELECT * FROM projects WHERE tenant_id = $1 AND project = $2", tenant, project)
        if row is None:
            raise NotFound(f"project {tenant}/{project} not found")
        return reads.project_view(row)

    # -- users and roles ------------------------------------------------------------------------

    async def create_user(self, call: Call, body: api.CreateUser) -> api.UserView:
        """Create a user or service account (tenant admin), optionally with a first role."""
        principal = call.require_principal()
        tenant = call.scope.get("tenant", "")
        allow(principal, Permission.TENANT_ADMIN, tenant)
        await self._require(domain.tenant_ref(tenant), f"tenant {tenant}")
        binding = None
        if body.role is not None:
            binding = RoleBinding(role=body.role, tenant=tenant, project=body.project)
            await self._check_grant(principal, tenant, binding)
        elif body.project is not None:
            raise Invalid("project given without a role")
        principal_id = f"u_{secrets.token_hex(8)}"
        await self._create_principal(call, tenant, principal_id, body.name, body.kind, binding)
        return await self._user(tenant, principal_id)

    async def _create_principal(
        self, call: Call, tenant: str, principal_id: str, name: str, kind: str, binding: RoleBinding | None
    ) -> None:
        claim = ev.UsernameClaimed(tenant=tenant, name=name, principal_id=principal_id)
        try:
            await self._append(call, domain.username_ref(tenant, name), [claim], 0)
        except Conflict:
            raise Conflict(f"user name {name!r} is taken in tenant {tenant}") from None
        events: list[Event] = [ev.PrincipalCreated(tenant=tenant, principal_id=principal_id, name=name, kind=kind)]  # type: ignore[arg-type]
        if binding is not None:
            events.append(
                ev.RoleGranted(tenant=tenant, principal_id=principal_id, role=binding.role, project=binding.project)
            )
        await self._append(call, domain.principal_ref(tenant, principal_id), events, 0)

    async def _check_grant(self, principal: Principal, tenant: str, binding: RoleBinding) -> None:
        if binding.role == "platform-admin":
            allow(principal, Permission.PLATFORM_ADMIN)
            if binding.project is not None:
                raise Invalid("platform-admin cannot be bound to a project")
        if binding.role == "tenant-admin" and binding.project is not None:
            raise Invalid("tenant-admin cannot be bound to a project")
        if binding.project is not None:
            await self._require(domain.project_ref(tenant, binding.project), f"project {tenant}/{binding.project}")

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
        return await self._user(tenant, user)

    async def _user(self, tenant: str, user: str) -> api.UserView:
        async with reads.scoped(self.pool, tenant) as conn:
            rows = await conn.fetch("SELECT * FROM principals WHERE tenant_id = $1 AND id = $2", tenant, user)
            if not rows:
                raise NotFound(f"user {user} not found")
            return (await reads.users(conn, rows))[0]

    async def grant_role(self, call: Call, body: api.RoleGrant) -> api.UserView:
        """Grant a role (tenant admin; platform-admin only by a platform admin). Idempotent."""
        return await self._change_role(call, body, domain.grant)

    async def revoke_role(self, call: Call, body: api.RoleGrant) -> api.UserView:
        """Revoke a role (tenant admin). Idempotent."""
        return await self._change_role(call, body, domain.revoke)

    async def _change_role(
        self,
        call: Call,
        body: api.RoleGrant,
        decide: Callable[[domain.PrincipalState, str, api.RoleGrant], list[Event]],
    ) -> api.UserView:
        principal = call.require_principal()
        tenant, user = call.scope.get("tenant", ""), call.scope.get("user", "")
        allow(principal, Permission.TENANT_ADMIN, tenant)
        await self._check_grant(principal, tenant, RoleBinding(role=body.role, tenant=tenant, project=body.project))
        ref = domain.principal_ref(tenant, user)
        history, last = await self._load(ref)
        await self._append(call, ref, decide(domain.principal_state(history), tenant, body), last)
        return await self._user(tenant, user)

    # -- API keys -------------------------------------------------------------------------------

    async def issue_key(self, call: Call, body: api.IssueKey) -> api.IssuedKey:
        """Issue a key for a user (tenant admin, or the user itself). The secret is in this answer only."""
        principal = call.require_principal()
        tenant, user = call.scope.get("tenant", ""), call.scope.get("user", "")
        if not is_self(principal, tenant, user):
            allow(principal, Permission.TENANT_ADMIN, tenant)
        if body.expires_at is not None and body.expires_at <= self.clock():
            raise Invalid("expires_at is in the past")
        await self._require(domain.principal_ref(tenant, user), f"user {user}")
        return await self._issue(call, tenant, user, body.name, body.expires_at)

    async def _issue(self, call: Call, tenant: str, user: str, name: str, expires_at: datetime | None) -> api.IssuedKey:
        key_id, secret = keys.new_key()
        event = ev.ApiKeyIssued(
            tenant=tenant,
            key_id=key_id,
            principal_id=user,
            name=name,
            prefix=secret[: keys.PREFIX_LENGTH],
            digest=keys.digest(self.pepper, secret),
            expires_at=expires_at,
        )
        await self._append(call, domain.key_ref(tenant, key_id), [event], 0)
        return api.IssuedKey(key=await self._key(tenant, key_id), secret=secret)

    async def list_keys(self, call: Call, body: None) -> Page[api.KeyView]:
        """Keys of a user (tenant admin, or the user itself), without secrets."""
        principal = call.require_principal()
        tenant, user = call.scope.get("tenant", ""), call.scope.get("user", "")
        if not is_self(principal, tenant, user):
            allow(principal, Permission.TENANT_ADMIN, tenant)
        async with reads.scoped(self.pool, tenant) as conn:
            rows, cursor = await reads.page_of(
                conn,
                "SELECT * FROM api_keys WHERE tenant_id = $1 AND principal_id = $2 AND {after}",
                ("key_id",),
                call.page,
                tenant,
                user,
            )
        return reads.page([reads.key_view(r) for r in rows], cursor)

    async def revoke_key(self, call: Call, body: None) -> api.KeyView:
        """Revoke a key (tenant admin, or its owner). Idempotent."""
        principal = call.require_principal()
        tenant, key_id = call.scope.get("tenant", ""), call.scope.get("key", "")
        allow(principal, Permission.TENANT_READ, tenant)
        ref = domain.key_ref(tenant, key_id)
        history, last = await self._load(ref)
        state = domain.key_state(history)
        if state.issued is None:
            raise NotFound(f"key {key_id} not found")
        if not is_self(principal, tenant, state.issued.principal_id):
            allow(principal, Permission.TENANT_ADMIN, tenant)
        if state.revoked_at is None:
            await self._append(call, ref, [ev.ApiKeyRevoked(tenant=tenant, key_id=key_id)], last)
        return await self._key(tenant, key_id)

    async def _key(self, tenant: str, key_id: str) -> api.KeyView:
        async with reads.scoped(self.pool, tenant) as conn:
            row = await conn.fetchrow("SELECT * FROM api_keys WHERE key_id = $1", key_id)
        if row is None:
            raise NotFound(f"key {key_id} not found")
        return reads.key_view(row)

    # -- quotas ---------------------------------------------------------------------------------

    async def set_quota(self, call: Call, body: api.SetQuota) -> api.QuotaView:
        """Replace a tenant's quota (platform admin) or a project's (tenant admin)."""
        principal = call.require_principal()
        tenant, project = call.scope.get("tenant", ""), call.scope.get("project")
        if project is None:
            allow(principal, Permission.PLATFORM_ADMIN)
            await self._require(domain.tenant_ref(tenant), f"tenant {tenant}")
        else:
            allow(principal, Permission.TENANT_ADMIN, tenant)
            await self._require(domain.project_ref(tenant, project), f"project {tenant}/{project}")
        tenant_history, _ = await self._load(domain.quota_ref(tenant, None))
        tenant_quota = next((e for e, _ in reversed(tenant_history) if isinstance(e, ev.QuotaSet)), None)
        domain.check_quota(body, tenant_quota, project)
        await self._append(call, domain.quota_ref(tenant, project), [domain.quota_event(tenant, project, body)], None)
        return await self._quota(tenant, project)

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
        """The tenant's quota and its projects' quotas."""
        tenant = call.scope.get("tenant", "")
        allow(call.require_principal(), Permission.TENANT_READ, tenant)
        async with reads.scoped(self.pool, tenant) as conn:
            rows, cursor = await reads.page_of(
                conn, "SELECT * FROM quotas WHERE tenant_id = $1 AND {after}", ("project",), call.page, tenant
            )
        return reads.page([reads.quota_view(r) for r in rows], cursor)

    # -- clusters and priority classes (platform-wide) ------------------------------------------

    async def register_cluster(self, call: Call, body: api.RegisterCluster) -> api.ClusterView:
        """Register a cluster (platform admin). 409 if the name is taken."""
        allow(call.require_principal(), Permission.PLATFORM_ADMIN)
        event = ev.ClusterRegistered(cluster=body.cluster, region=body.region, provider=body.provider)
        await self._append(call, domain.cluster_ref(body.cluster), [event], 0)
        return await self._cluster(body.cluster)

    async def list_clusters(self, call: Call, body: None) -> Page[api.ClusterView]:
        """Every cluster (any authenticated caller: work is submitted to them)."""
        call.require_principal()
        async with reads.scoped(self.pool, PLATFORM_TENANT) as conn:
            rows, cursor = await reads.page_of(conn, "SELECT * FROM clusters WHERE {after}", ("cluster",), call.page)
            return reads.page(await reads.clusters(conn, rows), cursor)

    async def get_cluster(self, call: Call, body: None) -> api.ClusterView:
        """One cluster with its node pools."""
        call.require_principal()
        return await self._cluster(call.scope.get("cluster", ""))

    async def _cluster(self, cluster: str) -> api.ClusterView:
        async with reads.scoped(self.pool, PLATFORM_TENANT) as conn:
            rows = await conn.fetch("SELECT * FROM clusters WHERE cluster = $1", cluster)
            if not rows:
                raise NotFound(f"cluster {cluster} not found")
            return (await reads.clusters(conn, rows))[0]

    async def define_node_pool(self, call: Call, body: api.DefineNodePool) -> api.ClusterView:
        """Define or redefine a node pool of a cluster (platform admin)."""
        allow(call.require_principal(), Permission.PLATFORM_ADMIN)
        cluster, pool = call.scope.get("cluster", ""), call.scope.get("pool", "")
        ref = domain.cluster_ref(cluster)
        await self._require(ref, f"cluster {cluster}")
        event = ev.NodePoolDefined(cluster=cluster, pool=pool, gpu_model=body.gpu_model, labels=dict(body.labels))
        await self._append(call, ref, [event], None)
        return await self._cluster(cluster)

    async def define_priority_class(self, call: Call, body: api.DefinePriorityClass) -> api.PriorityClassView:
        """Define or redefine a priority class (platform admin)."""
        allow(call.require_principal(), Permission.PLATFORM_ADMIN)
        name = call.scope.get("name", "")
        event = ev.PriorityClassDefined(
            name=name, value=body.value, preemptible=body.preemptible, description=body.description
        )
        await self._append(call, domain.priority_class_ref(name), [event], None)
        return api.PriorityClassView(
            name=name, value=body.value, preemptible=body.preemptible, description=body.description
        )

    async def list_priority_classes(self, call: Call, body: None) -> Page[api.PriorityClassView]:
        """Every priority class, by name."""
        call.require_principal()
        async with reads.scoped(self.pool, PLATFORM_TENANT) as conn:
            rows, cursor = await reads.page_of(
                conn, "SELECT * FROM priority_classes WHERE {after}", ("name",), call.page
            )
        return reads.page(
            [
                api.PriorityClassView(
                    name=r["name"], value=r["value"], preemptible=r["preemptible"], description=r["description"]
                )
                for r in rows
            ],
            cursor,
        )
