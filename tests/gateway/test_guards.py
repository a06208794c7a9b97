"""Coarse guards: another tenant is a 404 (never a 403, never its data); platform-wide writes need platform-admin."""

from __future__ import annotations

import pytest
from gateway_support import ACME_KEY, ADMIN_KEY, FakeTenancy, assert_problem, bearer

ACME = bearer(ACME_KEY)
ADMIN = bearer(ADMIN_KEY)
QUOTA = {"gpus": [{"gpu_model": "H100-80GB", "nominal_milli": 8000}]}


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("GET", "/v1/tenants/globex", None),
        ("GET", "/v1/tenants/globex/projects", None),
        ("POST", "/v1/tenants/globex/projects", {"project": "p", "display_name": "P"}),
        ("POST", "/v1/tenants/globex/projects", {"not": "even valid"}),  # 404 before body validation
        ("GET", "/v1/tenants/globex/projects/p", None),
        ("GET", "/v1/tenants/globex/users/u_1", None),
        ("POST", "/v1/tenants/globex/users/u_1/keys", {"name": "ci"}),
        ("DELETE", "/v1/tenants/globex/keys/k_1", None),
        ("GET", "/v1/tenants/globex/quota", None),
        ("PUT", "/v1/tenants/globex/quota", QUOTA),  # 404, not the platform-admin 403
        ("PUT", "/v1/tenants/globex/projects/p/quota", QUOTA),
        ("GET", "/v1/tenants/does-not-exist", None),
    ],
)
async def test_other_tenant_is_404_without_calling_the_service(client, fake: FakeTenancy, method, path, body):
    r = await client.request(method, path, headers=ACME, json=body)
    problem = assert_problem(r, 404, "not-found")
    assert "Globex" not in r.text  # the tenant's data never appears
    assert problem["detail"] == "tenant 'globex' not found" or "does-not-exist" in problem["detail"]
    assert [s.operation for s in fake.seen] == ["verify_key"]


async def test_own_tenant_is_forwarded_with_scope(client, fake: FakeTenancy):
    r = await client.get("/v1/tenants/acme", headers=ACME)
    assert r.status_code == 200 and r.json()["tenant"] == "acme"
    r = await client.post("/v1/tenants/acme/projects", headers=ACME, json={"project": "vision", "display_name": "V"})
    assert r.status_code == 201 and r.json()["project"] == "vision"
    (seen,) = fake.calls("create_project")
    assert seen.call.scope == {"tenant": "acme"}
    assert seen.body.project == "vision"


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("POST", "/v1/tenants", {"tenant": "new", "display_name": "New"}),
        ("POST", "/v1/clusters", {"cluster": "c1", "region": "eu-west", "provider": "on-prem"}),
        ("PUT", "/v1/clusters/c1/node-pools/p1", {"gpu_model": "H100-80GB"}),
        ("PUT", "/v1/priority-classes/high", {"value": 100}),
        ("PUT", "/v1/tenants/acme/quota", QUOTA),  # own tenant, but a tenant's quota is the platform's
    ],
)
async def test_platform_writes_need_platform_admin(client, fake: FakeTenancy, method, path, body):
    r = await client.request(method, path, headers=ACME, json=body)
    assert_problem(r, 403, "forbidden")
    assert [s.operation for s in fake.seen] == ["verify_key"]


async def test_platform_admin_passes_the_guards(client, fake: FakeTenancy):
    r = await client.post("/v1/tenants", headers=ADMIN, json={"tenant": "initech", "display_name": "Initech"})
    assert r.status_code == 201, r.text
    r = await client.get("/v1/tenants/globex", headers=ADMIN)
    assert r.status_code == 200 and r.json()["tenant"] == "globex"


async def test_list_page_is_forwarded(client, fake: FakeTenancy):
    r = await client.get("/v1/tenants", headers=ADMIN)
    assert r.status_code == 200
    assert [t["tenant"] for t in r.json()["items"]] == ["acme", "globex"]
    r = await client.get("/v1/tenants", headers=ADMIN, params={"limit": 1, "after": "opaque-cursor"})
    assert [t["tenant"] for t in r.json()["items"]] == ["acme"]
    first, second = fake.calls("list_tenants")
    assert (first.call.page.limit, first.call.page.after) == (50, None)
    assert (second.call.page.limit, second.call.page.after) == (1, "opaque-cursor")


async def test_healthz_needs_no_key(client):
    r = await client.get("/healthz")
    assert r.status_code == 200 and r.json() == {"status": "ok"}
