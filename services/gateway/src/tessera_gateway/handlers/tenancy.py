"""Routes owned by the tenancy service: tenants, projects, users, roles, keys, quotas, clusters.

Each handler forwards to ``rpc.tenancy.<operation>`` with every path parameter in ``scope``
(keys ``tenant``, ``project``, ``user``, ``key``, ``cluster``, ``pool``, ``name``), the validated
body, and for lists the page (``limit``, ``after``). Routes under ``/v1/tenants/{tenant}`` are
guarded by :func:`~tessera_gateway.guards.tenant_visible`; routes that create platform-wide
objects or set a tenant's quota by :func:`~tessera_gateway.guards.platform_admin`.
"""

from __future__ import annotations

from typing import Any

from litestar import Response, Router, delete, get, post, put
from litestar.di import NamedDependency
from litestar.params import JSONBody
from litestar.types import Guard

from tessera_contracts.api.common import Page
from tessera_contracts.api.tenancy import (
    ClusterView,
    CreateProject,
    CreateTenant,
    CreateUser,
    DefineNodePool,
    DefinePriorityClass,
    IssuedKey,
    IssueKey,
    KeyView,
    PriorityClassView,
    ProjectView,
    QuotaView,
    RegisterCluster,
    RoleGrant,
    SetQuota,
    TenantView,
    UserView,
)
from tessera_contracts.rbac import Principal
from tessera_gateway.forward import Forwarder
from tessera_gateway.guards import json_body, platform_admin, strict_body, tenant_visible
from tessera_gateway.openapi import READ_ERRORS, WRITE_ERRORS, problem_responses
from tessera_gateway.params import (
    After,
    ClusterSlug,
    KeyId,
    Limit,
    PoolSlug,
    PriorityClassSlug,
    ProjectSlug,
    TenantSlug,
    UserId,
    page_of,
)

SERVICE = "tenancy"


def _read() -> dict[str, Any]:
    return {"responses": problem_responses(*READ_ERRORS)}


def _write(*guards: Guard) -> dict[str, Any]:
    return {
        "responses": problem_responses(*WRITE_ERRORS),
        "guards": [*guards, json_body, strict_body],
    }


# -- /v1: the caller, tenants, clusters, priority classes ---------------------------------------


@get("/me", operation_id="whoami", **_read())
async def whoami(read: NamedDependency[Forwarder]) -> Response[Principal]:
    """The authenticated caller: id, tenant, kind and role bindings."""
    return await read(SERVICE, "whoami")


@get("/tenants", operation_id="list_tenants", **_read())
async def list_tenants(
    read: NamedDependency[Forwarder], limit: Limit = 50, after: After = None
) -> Response[Page[TenantView]]:
    """The tenants the caller can see (all of them for a platform admin)."""
    return await read(SERVICE, "list_tenants", page=page_of(limit, after))


@post("/tenants", operation_id="create_tenant", status_code=201, **_write(platform_admin))
async def create_tenant(write: NamedDependency[Forwarder], data: JSONBody[CreateTenant]) -> Response[TenantView]:
    """Create a tenant (platform admin)."""
    return await write(SERVICE, "create_tenant", data)


@get("/clusters", operation_id="list_clusters", **_read())
async def list_clusters(
    read: NamedDependency[Forwarder], limit: Limit = 50, after: After = None
) -> Response[Page[ClusterView]]:
    """The registered clusters and their node pools."""
    return await read(SERVICE, "list_clusters", page=page_of(limit, after))


@post("/clusters", operation_id="register_cluster", status_code=201, **_write(platform_admin))
async def register_cluster(write: NamedDependency[Forwarder], data: JSONBody[RegisterCluster]) -> Response[ClusterView]:
    """Register a cluster (platform admin)."""
    return await write(SERVICE, "register_cluster", data)


@get("/clusters/{cluster:str}", operation_id="get_cluster", **_read())
async def get_cluster(read: NamedDependency[Forwarder], cluster: ClusterSlug) -> Response[ClusterView]:
    """One cluster with its node pools."""
    return await read(SERVICE, "get_cluster", scope={"cluster": cluster})


@put("/clusters/{cluster:str}/node-pools/{pool:str}", operation_id="define_node_pool", **_write(platform_admin))
async def define_node_pool(
    write: NamedDependency[Forwarder], cluster: ClusterSlug, pool: PoolSlug, data: JSONBody[DefineNodePool]
) -> Response[ClusterView]:
    """Create or replace a node pool of a cluster (platform admin)."""
    return await write(SERVICE, "define_node_pool", data, scope={"cluster": cluster, "pool": pool})


@get("/priority-classes", operation_id="list_priority_classes", **_read())
async def list_priority_classes(
    read: NamedDependency[Forwarder], limit: Limit = 50, after: After = None
) -> Response[Page[PriorityClassView]]:
    """The priority classes."""
    return await read(SERVICE, "list_priority_classes", page=page_of(limit, after))


@put("/priority-classes/{name:str}", operation_id="define_priority_class", **_write(platform_admin))
async def define_priority_class(
    write: NamedDependency[Forwarder], name: PriorityClassSlug, data: JSONBody[DefinePriorityClass]
) -> Response[PriorityClassView]:
    """Create or replace a priority class (platform admin)."""
    return await write(SERVICE, "define_priority_class", data, scope={"name": name})


# -- /v1/tenants/{tenant}: everything inside one tenant -----------------------------------------


@get("/", operation_id="get_tenant", **_read())
async def get_tenant(read: NamedDependency[Forwarder], tenant: TenantSlug) -> Response[TenantView]:
    """One tenant."""
    return await read(SERVICE, "get_tenant", scope={"tenant": tenant})


@get("/projects", operation_id="list_projects", **_read())
async def list_projects(
    read: NamedDependency[Forwarder], tenant: TenantSlug, limit: Limit = 50, after: After = None
) -> Response[Page[ProjectView]]:
    """The tenant's projects (those the caller can see)."""
    return await read(SERVICE, "list_projects", scope={"tenant": tenant}, page=page_of(limit, after))


@post("/projects", operation_id="create_project", status_code=201, **_write())
async def create_project(
    write: NamedDependency[Forwarder], tenant: TenantSlug, data: JSONBody[CreateProject]
) -> Response[ProjectView]:
    """Create a project in the tenant (tenant admin)."""
    return await write(SERVICE, "create_project", data, scope={"tenant": tenant})


@get("/projects/{project:str}", operation_id="get_project", **_read())
async def get_project(
    read: NamedDependency[Forwarder], tenant: TenantSlug, project: ProjectSlug
) -> Response[ProjectView]:
    """One project."""
    return await read(SERVICE, "get_project", scope={"tenant": tenant, "project": project})


@get("/users", operation_id="list_users", **_read())
async def list_users(
    read: NamedDependency[Forwarder], tenant: TenantSlug, limit: Limit = 50, after: After = None
) -> Response[Page[UserView]]:
    """The tenant's users and service accounts."""
    return await read(SERVICE, "list_users", scope={"tenant": tenant}, page=page_of(limit, after))


@post("/users", operation_id="create_user", status_code=201, **_write())
async def create_user(
    write: NamedDependency[Forwarder], tenant: TenantSlug, data: JSONBody[CreateUser]
) -> Response[UserView]:
    """Create a user or service account, optionally with a first role (tenant admin)."""
    return await write(SERVICE, "create_user", data, scope={"tenant": tenant})


@get("/users/{user:str}", operation_id="get_user", **_read())
async def get_user(read: NamedDependency[Forwarder], tenant: TenantSlug, user: UserId) -> Response[UserView]:
    """One user with its role bindings."""
    return await read(SERVICE, "get_user", scope={"tenant": tenant, "user": user})


@post("/users/{user:str}/roles", operation_id="grant_role", status_code=200, **_write())
async def grant_role(
    write: NamedDependency[Forwarder], tenant: TenantSlug, user: UserId, data: JSONBody[RoleGrant]
) -> Response[UserView]:
    """Grant a role in the tenant (or one project of it) to a user (tenant admin)."""
    return await write(SERVICE, "grant_role", data, scope={"tenant": tenant, "user": user})


@post("/users/{user:str}/roles/revoke", operation_id="revoke_role", status_code=200, **_write())
async def revoke_role(
    write: NamedDependency[Forwarder], tenant: TenantSlug, user: UserId, data: JSONBody[RoleGrant]
) -> Response[UserView]:
    """Revoke a role binding from a user (tenant admin)."""
    return await write(SERVICE, "revoke_role", data, scope={"tenant": tenant, "user": user})


@get("/users/{user:str}/keys", operation_id="list_keys", **_read())
async def list_keys(
    read: NamedDependency[Forwarder], tenant: TenantSlug, user: UserId, limit: Limit = 50, after: After = None
) -> Response[Page[KeyView]]:
    """A user's API keys, without secrets (the user itself, or a tenant admin)."""
    return await read(SERVICE, "list_keys", scope={"tenant": tenant, "user": user}, page=page_of(limit, after))


@post("/users/{user:str}/keys", operation_id="issue_key", status_code=201, **_write())
async def issue_key(
    write: NamedDependency[Forwarder], tenant: TenantSlug, user: UserId, data: JSONBody[IssueKey]
) -> Response[IssuedKey]:
    """Issue an API key for a user; its `secret` is shown once, in this answer only.

    Never again, not even to a retry with the same `Idempotency-Key`: the replayed answer has
    `"secret": null` (stored answers never hold a secret). A client that lost the answer revokes
    the key and issues another.
    """
    return await write(SERVICE, "issue_key", data, scope={"tenant": tenant, "user": user})


@delete("/keys/{key:str}", operation_id="revoke_key", status_code=200, **_write())
async def revoke_key(write: NamedDependency[Forwarder], tenant: TenantSlug, key: KeyId) -> Response[KeyView]:
    """Revoke an API key; it is refused from then on."""
    return await write(SERVICE, "revoke_key", scope={"tenant": tenant, "key": key})


@get("/quota", operation_id="get_tenant_quota", **_read())
async def get_tenant_quota(read: NamedDependency[Forwarder], tenant: TenantSlug) -> Response[QuotaView]:
    """The tenant's quota."""
    return await read(SERVICE, "get_quota", scope={"tenant": tenant})


@put("/quota", operation_id="set_tenant_quota", **_write(platform_admin))
async def set_tenant_quota(
    write: NamedDependency[Forwarder], tenant: TenantSlug, data: JSONBody[SetQuota]
) -> Response[QuotaView]:
    """Set the tenant's quota (platform admin)."""
    return await write(SERVICE, "set_quota", data, scope={"tenant": tenant})


@get("/quotas", operation_id="list_quotas", **_read())
async def list_quotas(
    read: NamedDependency[Forwarder], tenant: TenantSlug, limit: Limit = 50, after: After = None
) -> Response[Page[QuotaView]]:
    """The tenant's quota and its projects' quotas."""
    return await read(SERVICE, "list_quotas", scope={"tenant": tenant}, page=page_of(limit, after))


@get("/projects/{project:str}/quota", operation_id="get_project_quota", **_read())
async def get_project_quota(
    read: NamedDependency[Forwarder], tenant: TenantSlug, project: ProjectSlug
) -> Response[QuotaView]:
    """A project's quota."""
    return await read(SERVICE, "get_quota", scope={"tenant": tenant, "project": project})


@put("/projects/{project:str}/quota", operation_id="set_project_quota", **_write())
async def set_project_quota(
    write: NamedDependency[Forwarder], tenant: TenantSlug, project: ProjectSlug, data: JSONBody[SetQuota]
) -> Response[QuotaView]:
    """Set a project's quota within the tenant's (tenant admin)."""
    return await write(SERVICE, "set_quota", data, scope={"tenant": tenant, "project": project})


def router() -> Router:
    """The tenancy routes, relative to ``/v1``."""
    in_tenant = Router(
        path="/tenants/{tenant:str}",
        guards=[tenant_visible],
        route_handlers=[
            get_tenant,
            list_projects,
            create_project,
            get_project,
            list_users,
            create_user,
            get_user,
            grant_role,
            revoke_role,
            list_keys,
            issue_key,
            revoke_key,
            get_tenant_quota,
            set_tenant_quota,
            list_quotas,
            get_project_quota,
            set_project_quota,
        ],
    )
    return Router(
        path="/",
        tags=["tenancy"],
        route_handlers=[
            whoami,
            list_tenants,
            create_tenant,
            list_clusters,
            register_cluster,
            get_cluster,
            define_node_pool,
            list_priority_classes,
            define_priority_class,
            in_tenant,
        ],
    )
