"""Role x endpoint x (own tenant, other tenant), through the real gateway and the real tenancy service.

The expectations are written out by hand (not computed with ``rbac.authorize``), so a change of
policy or a guard that slipped shows up here. Every route of the OpenAPI document must appear in
the table: a new endpoint without a row fails ``test_the_matrix_covers_every_endpoint``.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from tessera_contracts.api import tenancy as api
from tessera_contracts.rbac import Principal
from tests.scheduler.service.test_matrix import CASES as SCHEDULER_CASES
from tests.scheduler.service.test_matrix import TEMPLATES as SCHEDULER_TEMPLATES
from tests.support.tenancy import Tenancy

ROLES = ("platform-admin", "tenant-admin", "member", "viewer", "project-member", "project-viewer")
OWN, OTHER = "acme", "globex"
counter = itertools.count()


@dataclass
class World:
    """What the matrix acts on: keys per role (all in acme, but the platform admin), targets per tenant."""

    keys: dict[str, str]
    target_user: dict[str, str]
    tenancy: Tenancy

    async def fresh_key(self, tenant: str) -> str:
        issued = await self.tenancy.call(
            "issue_key", api.IssueKey(name="victim"), as_=self.tenancy.admin, result=api.IssuedKey,
            tenant=tenant, user=self.target_user[tenant],
        )  # fmt: skip
        return issued.key.key_id


@dataclass(frozen=True)
class Case:
    method: str
    path: str  # {t}: tenant; {u}: the tenant's target user; {k}: a fresh key of that user; {n}: a unique slug
    body: Callable[[], dict[str, Any]] | None
    own: dict[str, int]  # expected status per role, in acme (platform routes: everywhere)
    tenant_scoped: bool = True


def same(status: int) -> dict[str, int]:
    return dict.fromkeys(ROLES, status)


def admins(ok: int, deny: int = 403, *, tenant_admin: bool = True) -> dict[str, int]:
    out = dict.fromkeys(ROLES, deny)
    out["platform-admin"] = ok
    if tenant_admin:
        out["tenant-admin"] = ok
    return out


def platform(ok: int) -> dict[str, int]:
    return admins(ok, tenant_admin=False)


def unique() -> str:
    return f"n{next(counter)}"


QUOTA = {"gpus": [{"gpu_model": "H100", "nominal_milli": 1000}], "max_concurrent_jobs": 3}
CASES: dict[str, Case] = {
    "whoami": Case("GET", "/v1/me", None, same(200), tenant_scoped=False),
    "list_tenants": Case("GET", "/v1/tenants", None, same(200), tenant_scoped=False),
    "create_tenant": Case(
        "POST", "/v1/tenants", lambda: {"tenant": unique(), "display_name": "x"}, platform(201), tenant_scoped=False
    ),
    "get_tenant": Case("GET", "/v1/tenants/{t}", None, same(200)),
    "list_projects": Case("GET", "/v1/tenants/{t}/projects", None, same(200)),
    "create_project": Case(
        "POST", "/v1/tenants/{t}/projects", lambda: {"project": unique(), "display_name": "p"}, admins(201)
    ),
    "get_project": Case("GET", "/v1/tenants/{t}/projects/vision", None, same(200)),
    "get_other_project": Case(
        "GET",
        "/v1/tenants/{t}/projects/nlp",
        None,
        {**same(200), "project-member": 404, "project-viewer": 404},
    ),
    "list_users": Case("GET", "/v1/tenants/{t}/users", None, admins(200)),
    "create_user": Case("POST", "/v1/tenants/{t}/users", lambda: {"name": unique()}, admins(201)),
    "get_user": Case("GET", "/v1/tenants/{t}/users/{u}", None, admins(200)),
    "grant_role": Case("POST", "/v1/tenants/{t}/users/{u}/roles", lambda: {"role": "viewer"}, admins(200)),
    "revoke_role": Case("POST", "/v1/tenants/{t}/users/{u}/roles/revoke", lambda: {"role": "viewer"}, admins(200)),
    "list_keys": Case("GET", "/v1/tenants/{t}/users/{u}/keys", None, admins(200)),
    "issue_key": Case("POST", "/v1/tenants/{t}/users/{u}/keys", lambda: {"name": "k"}, admins(201)),
    "revoke_key": Case("DELETE", "/v1/tenants/{t}/keys/{k}", None, admins(200)),
    "get_tenant_quota": Case("GET", "/v1/tenants/{t}/quota", None, same(200)),
    "set_tenant_quota": Case(
        "PUT", "/v1/tenants/{t}/quota", lambda: {"gpus": [{"gpu_model": "H100", "nominal_milli": 8000}]}, platform(200)
    ),
    "list_quotas": Case("GET", "/v1/tenants/{t}/quotas", None, same(200)),
    "get_project_quota": Case("GET", "/v1/tenants/{t}/projects/vision/quota", None, same(200)),
    "set_project_quota": Case("PUT", "/v1/tenants/{t}/projects/vision/quota", lambda: QUOTA, admins(200)),
    "list_clusters": Case("GET", "/v1/clusters", None, same(200), tenant_scoped=False),
    "register_cluster": Case(
        "POST",
        "/v1/clusters",
        lambda: {"cluster": unique(), "region": "eu", "provider": "aws"},
        platform(201),
        tenant_scoped=False,
    ),
    "get_cluster": Case("GET", "/v1/clusters/c1", None, same(200), tenant_scoped=False),
    "define_node_pool": Case(
        "PUT", "/v1/clusters/c1/node-pools/gpu", lambda: {"gpu_model": "H100"}, platform(200), tenant_scoped=False
    ),
    "list_priority_classes": Case("GET", "/v1/priority-classes", None, same(200), tenant_scoped=False),
    "define_priority_class": Case(
        "PUT", "/v1/priority-classes/high", lambda: {"value": 100}, platform(200), tenant_scoped=False
    ),
}


async def build_world(t: Tenancy) -> World:
    admin = t.admin
    for tenant in (OWN, OTHER):
        await t.call("create_tenant", api.CreateTenant(tenant=tenant, display_name=tenant.upper()), as_=admin)
        for project in ("vision", "nlp"):
            await t.call(
                "create_project", api.CreateProject(project=project, display_name=project), as_=admin, tenant=tenant
            )
        gpus = [api.GpuQuotaBody(gpu_model="H100", nominal_milli=8000)]
        await t.call("set_quota", api.SetQuota(gpus=gpus), as_=admin, tenant=tenant)
        await t.call("set_quota", api.SetQuota(gpus=gpus[:1]), as_=admin, tenant=tenant, project="vision")
    await t.call("register_cluster", api.RegisterCluster(cluster="c1", region="eu", provider="on-prem"), as_=admin)
    await t.call("define_priority_class", api.DefinePriorityClass(value=1), as_=admin, name="high")
    targets = {}
    for tenant in (OWN, OTHER):
        user = await t.call("create_user", api.CreateUser(name="target", role="member"), as_=admin, tenant=tenant)
        targets[tenant] = user["id"]
    keys = {"platform-admin": t.admin_key}
    for role, (base, project) in {
        "tenant-admin": ("tenant-admin", None),
        "member": ("member", None),
        "viewer": ("viewer", None),
        "project-member": ("member", "vision"),
        "project-viewer": ("viewer", "vision"),
    }.items():
        user = await t.call("create_user", api.CreateUser(name=role, role=base, project=project), as_=admin, tenant=OWN)
        issued = await t.call(
            "issue_key", api.IssueKey(name=role), as_=admin, result=api.IssuedKey, tenant=OWN, user=user["id"]
        )
        keys[role] = issued.secret
    return World(keys, targets, t)


@pytest.fixture
async def world(tenancy: Tenancy) -> World:
    return await build_world(tenancy)


@pytest.fixture
async def gateway(make_client: Any) -> httpx.AsyncClient:
    client: httpx.AsyncClient = await make_client()
    return client


async def request(gateway: httpx.AsyncClient, world: World, case: Case, role: str, tenant: str) -> httpx.Response:
    path = case.path.replace("{t}", tenant).replace("{u}", world.target_user[tenant])
    if "{k}" in path:
        path = path.replace("{k}", await world.fresh_key(tenant))
    return await gateway.request(
        case.method,
        path,
        json=case.body() if case.body else None,
        headers={"Authorization": f"Bearer {world.keys[role]}"},
    )


async def test_role_endpoint_tenant_matrix(gateway: httpx.AsyncClient, world: World) -> None:
    failures = []
    checked = 0
    for (name, case), role in itertools.product(CASES.items(), ROLES):
        for tenant in (OWN, OTHER) if case.tenant_scoped else (OWN,):
            expected = case.own[role]
            if tenant == OTHER and role != "platform-admin":
                expected = 404  # another tenant's anything is invisible: 404, never 403
            response = await request(gateway, world, case, role, tenant)
            checked += 1
            if response.status_code != expected:
                failures.append(
                    f"{name} as {role} on {tenant}: {response.status_code} != {expected} {response.text[:200]}"
                )
            if response.status_code >= 400:
                assert response.headers["content-type"].startswith("application/problem+json")
                if tenant == OTHER:
                    assert "GLOBEX" not in response.text  # not even the other tenant's display name
    assert not failures, "\n".join(failures)
    assert checked == sum(len(ROLES) * (2 if c.tenant_scoped else 1) for c in CASES.values())


async def test_lists_never_show_another_tenants_rows(gateway: httpx.AsyncClient, world: World) -> None:
    for role in ROLES[1:]:
        tenants = (await gateway.get("/v1/tenants", headers={"Authorization": f"Bearer {world.keys[role]}"})).json()
        assert [t["tenant"] for t in tenants["items"]] == [OWN]
    everyone = await gateway.get("/v1/tenants", headers={"Authorization": f"Bearer {world.keys['platform-admin']}"})
    assert {OWN, OTHER} <= {t["tenant"] for t in everyone.json()["items"]}
    bound = await gateway.get(
        f"/v1/tenants/{OWN}/projects", headers={"Authorization": f"Bearer {world.keys['project-viewer']}"}
    )
    assert [p["project"] for p in bound.json()["items"]] == ["vision"]


async def test_a_member_manages_its_own_keys_only(gateway: httpx.AsyncClient, world: World, tenancy: Tenancy) -> None:
    headers = {"Authorization": f"Bearer {world.keys['member']}"}
    me = Principal(**(await gateway.get("/v1/me", headers=headers)).json())
    own = f"/v1/tenants/{OWN}/users/{me.id}"
    assert (await gateway.get(own, headers=headers)).status_code == 200
    created = await gateway.post(f"{own}/keys", json={"name": "laptop"}, headers=headers)
    assert created.status_code == 201 and created.json()["secret"].startswith("tsk_")
    assert (await gateway.get(f"{own}/keys", headers=headers)).json()["items"][0]["key_id"]
    revoked = await gateway.delete(f"/v1/tenants/{OWN}/keys/{created.json()['key']['key_id']}", headers=headers)
    assert revoked.status_code == 200 and revoked.json()["revoked_at"] is not None
    # ...and cannot grant itself more.
    grant = await gateway.post(f"{own}/roles", json={"role": "tenant-admin"}, headers=headers)
    assert grant.status_code == 403


async def test_the_matrix_covers_every_endpoint(gateway: httpx.AsyncClient) -> None:
    document = (await gateway.get("/schema/openapi.json")).json()
    routes = {
        (method.upper(), path)
        for path, item in document["paths"].items()
        for method in item
        if path.startswith("/v1/") and method in ("get", "post", "put", "delete")
    }
    covered = set()
    for case in CASES.values():
        path = case.path
        for concrete, template in [
            ("/projects/vision/quota", "/projects/{project}/quota"),
            ("/projects/vision", "/projects/{project}"),
            ("/projects/nlp", "/projects/{project}"),
            ("/clusters/c1/node-pools/gpu", "/clusters/{cluster}/node-pools/{pool}"),
            ("/clusters/c1", "/clusters/{cluster}"),
            ("/priority-classes/high", "/priority-classes/{name}"),
            ("{t}", "{tenant}"),
            ("{u}", "{user}"),
            ("{k}", "{key}"),
        ]:
            path = path.replace(concrete, template)
        covered.add((case.method, path))
    for scheduler_case in SCHEDULER_CASES.values():  # the scheduler's routes have their own matrix
        path = scheduler_case.path
        for concrete, template in SCHEDULER_TEMPLATES:
            path = path.replace(concrete, template)
        covered.add((scheduler_case.method, path))
    assert routes - covered == set(), f"endpoints missing from the matrix: {sorted(routes - covered)}"
