"""The gateway in front of the real tenancy service: bad input changes nothing, retries create once."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tessera_contracts.api import tenancy as api
from tests.support.tenancy import Tenancy

LONG = "x" * 10_000
BAD_BODIES: list[tuple[str, str, Any]] = [
    ("POST", "/v1/tenants", {"tenant": "ok", "display_name": "x", "extra": 1}),  # unknown field
    ("POST", "/v1/tenants", {"tenant": 42, "display_name": "x"}),  # wrong type
    ("POST", "/v1/tenants", {"tenant": "", "display_name": "x"}),  # empty name
    ("POST", "/v1/tenants", {"tenant": LONG, "display_name": "x"}),  # very long name
    ("POST", "/v1/tenants", {"tenant": "ok", "display_name": LONG}),
    ("POST", "/v1/tenants", {"tenant": "../x", "display_name": "x"}),  # path-like
    ("POST", "/v1/tenants", {"tenant": "a.b", "display_name": "x"}),  # would split a subject
    ("POST", "/v1/tenants", {"tenant": "ok", "display_name": "tab\there"}),  # control character
    ("POST", "/v1/tenants", {"tenant": "ok", "display_name": "evil\u202egnp.exe"}),  # bidi override
    ("POST", "/v1/tenants", {"tenant": "😀", "display_name": "x"}),  # emoji slug
    ("POST", "/v1/tenants", {"tenant": "acme", "display_name": "dup"}),  # duplicate
    ("POST", "/v1/tenants/acme/projects", {"project": "vision", "display_name": "dup"}),  # duplicate
    ("POST", "/v1/tenants/acme/users", {"name": "ada", "role": "overlord"}),  # unknown role
    ("POST", "/v1/tenants/acme/users", {"name": "ada"}),  # duplicate user name
    ("PUT", "/v1/tenants/acme/quota", {"monthly_gpu_hour_budget": "NaN"}),
    ("PUT", "/v1/tenants/acme/quota", {"monthly_gpu_hour_budget": "-1"}),
    ("PUT", "/v1/tenants/acme/quota", {"gpus": [{"gpu_model": "H100", "nominal_milli": -5}]}),
    ("PUT", "/v1/tenants/acme/quota", {"gpus": [{"gpu_model": "H100", "nominal_milli": 10**30}]}),
    ("PUT", "/v1/tenants/acme/quota", {"gpus": [{"gpu_model": "H100", "nominal_milli": 1, "lending_limit_milli": 2}]}),
    ("PUT", "/v1/tenants/acme/quota", {"max_concurrent_jobs": 0}),
    ("PUT", "/v1/priority-classes/high", b'{"value": Infinity}'),  # not JSON
    ("PUT", "/v1/priority-classes/high", b'{"value": 1e999}'),  # infinite
    ("PUT", "/v1/priority-classes/high", b'{"value": NaN}'),
    ("POST", "/v1/tenants/acme/users/u_0/keys", {"name": "k"}),  # no such user
    ("POST", "/v1/tenants/acme/users/u_0/keys", {"name": "k", "expires_at": "2001-01-01T00:00:00Z"}),
    ("POST", "/v1/tenants/acme/users/u_0/keys", {"name": "k", "expires_at": "2030-01-01T00:00:00"}),  # naive time
]


@pytest.fixture
async def gateway(make_client: Any) -> httpx.AsyncClient:
    client: httpx.AsyncClient = await make_client()
    return client


async def seed(t: Tenancy) -> None:
    await t.call("create_tenant", api.CreateTenant(tenant="acme", display_name="Acme"), as_=t.admin)
    await t.call("create_project", api.CreateProject(project="vision", display_name="v"), as_=t.admin, tenant="acme")
    await t.call("create_user", api.CreateUser(name="ada"), as_=t.admin, tenant="acme")


async def test_bad_input_is_a_4xx_problem_and_changes_nothing(gateway: httpx.AsyncClient, tenancy: Tenancy) -> None:
    await seed(tenancy)
    head = await tenancy.log.head()
    auth = {"Authorization": f"Bearer {tenancy.admin_key}"}
    for method, path, body in BAD_BODIES:
        content = body if isinstance(body, bytes) else httpx.Request(method, "http://x", json=body).content
        response = await gateway.request(
            method, path, content=content, headers={**auth, "Content-Type": "application/json"}
        )
        assert 400 <= response.status_code < 500, (
            f"{method} {path} {body!r:.80}: {response.status_code} {response.text}"
        )
        assert response.headers["content-type"].startswith("application/problem+json")
        problem = response.json()
        assert {"type", "title", "status", "code"} <= problem.keys() and problem["status"] == response.status_code
    assert await tenancy.log.head() == head, "a refused request appended events"


async def test_a_retried_post_creates_one_tenant_and_answers_the_same(
    gateway: httpx.AsyncClient, tenancy: Tenancy
) -> None:
    headers = {"Authorization": f"Bearer {tenancy.admin_key}", "Idempotency-Key": "create-acme-1"}
    body = {"tenant": "acme", "display_name": "Acme 🚀"}
    first = await gateway.post("/v1/tenants", json=body, headers=headers)
    head = await tenancy.log.head()
    second = await gateway.post("/v1/tenants", json=body, headers=headers)
    assert first.status_code == second.status_code == 201
    assert first.content == second.content
    assert second.headers.get("idempotency-replayed") == "true"
    assert await tenancy.log.head() == head
    # Without the key, the same POST is a conflict, not a second tenant.
    again = await gateway.post("/v1/tenants", json=body, headers={"Authorization": headers["Authorization"]})
    assert again.status_code == 409
    listed = await gateway.get("/v1/tenants", headers={"Authorization": headers["Authorization"]})
    assert [t["tenant"] for t in listed.json()["items"]] == ["acme"]
