"""Idempotency-Key: a retried write runs once and gets the first answer; misuse is a 4xx."""

from __future__ import annotations

import asyncio

import pytest
from gateway_support import ACME_KEY, ADMIN_KEY, FakeTenancy, assert_problem, bearer

ADMIN = bearer(ADMIN_KEY)
TENANT = {"tenant": "initech", "display_name": "Initech"}


def keyed(key: str, auth: dict[str, str] = ADMIN) -> dict[str, str]:
    return {**auth, "Idempotency-Key": key}


async def test_same_key_and_body_runs_once_and_replays(client, fake: FakeTenancy):
    first = await client.post("/v1/tenants", headers=keyed("create-initech-1"), json=TENANT)
    assert first.status_code == 201, first.text
    assert "idempotency-replayed" not in first.headers
    # Same body, other formatting and key order: still the same request.
    again = await client.post(
        "/v1/tenants",
        headers={**keyed("create-initech-1"), "Content-Type": "application/json"},
        content=b'{ "display_name" : "Initech",  "tenant": "initech" }',
    )
    assert again.status_code == 201
    assert again.headers["idempotency-replayed"] == "true"
    assert again.content == first.content
    assert again.headers["content-type"] == "application/json"
    assert len(fake.calls("create_tenant")) == 1


async def test_same_key_with_another_body_is_422(client, fake: FakeTenancy):
    assert (await client.post("/v1/tenants", headers=keyed("k-422"), json=TENANT)).status_code == 201
    other = {"tenant": "initech", "display_name": "Initech Corp"}
    r = await client.post("/v1/tenants", headers=keyed("k-422"), json=other)
    assert_problem(r, 422, "unprocessable")
    assert len(fake.calls("create_tenant")) == 1


async def test_keys_are_per_caller_and_per_path(client, fake: FakeTenancy):
    body = {"project": "vision", "display_name": "Vision"}
    a = await client.post("/v1/tenants/acme/projects", headers=keyed("shared"), json=body)
    b = await client.post("/v1/tenants/acme/projects", headers=keyed("shared", bearer(ACME_KEY)), json=body)
    c = await client.post("/v1/tenants/globex/projects", headers=keyed("shared"), json=body)
    assert [a.status_code, b.status_code, c.status_code] == [201, 201, 201]
    assert not any("idempotency-replayed" in r.headers for r in (a, b, c))
    assert len(fake.calls("create_project")) == 3


async def test_client_errors_are_stored_and_replayed(client, fake: FakeTenancy):
    body = {"tenant": "acme", "display_name": "Acme again"}  # exists: 409 from the service
    first = await client.post("/v1/tenants", headers=keyed("dup"), json=body)
    assert_problem(first, 409, "conflict")
    again = await client.post("/v1/tenants", headers=keyed("dup"), json=body)
    assert_problem(again, 409, "conflict")
    assert again.headers["idempotency-replayed"] == "true"
    assert again.content == first.content
    assert len(fake.calls("create_tenant")) == 1


async def test_server_errors_are_not_stored(client, fake: FakeTenancy):
    body = {"cluster": "c1", "region": "eu-west", "provider": "on-prem"}  # nobody answers register_cluster
    for _ in range(2):
        r = await client.post("/v1/clusters", headers=keyed("cluster-c1"), json=body)
        assert_problem(r, 503, "unavailable")
        assert "idempotency-replayed" not in r.headers
        assert r.headers["retry-after"] == "1"


async def test_concurrent_duplicate_is_409_then_replayed(client, fake: FakeTenancy):
    fake.hold = asyncio.Event()
    body = {"project": "slowpoke", "display_name": "Slow"}
    first = asyncio.create_task(client.post("/v1/tenants/acme/projects", headers=keyed("inflight"), json=body))
    await asyncio.wait_for(fake.entered.wait(), 5)
    r = await client.post("/v1/tenants/acme/projects", headers=keyed("inflight"), json=body)
    assert_problem(r, 409, "conflict")
    assert r.headers["retry-after"] == "1"
    fake.hold.set()
    assert (await first).status_code == 201
    r = await client.post("/v1/tenants/acme/projects", headers=keyed("inflight"), json=body)
    assert r.status_code == 201 and r.headers["idempotency-replayed"] == "true"
    assert len(fake.calls("create_project")) == 1


async def test_delete_and_put_take_the_key_too(client, fake: FakeTenancy):
    r = await client.put("/v1/tenants/acme/quota", headers=keyed("quota-1"), json={"gpus": []})
    assert_problem(r, 503, "unavailable")  # no set_quota in the fake; validated and forwarded
    r = await client.delete("/v1/tenants/acme/keys/k_1", headers=keyed("revoke-1"))
    assert_problem(r, 503, "unavailable")
    r = await client.delete("/v1/tenants/acme/keys/k_1", headers=keyed("x" * 256))
    (error,) = assert_problem(r, 400, "invalid-request")["errors"]
    assert (error["key"], error["source"]) == ("idempotency_key", "header")


@pytest.mark.parametrize("value", ["", "x" * 256, "tab\tinside"])
async def test_malformed_key_is_400(client, fake: FakeTenancy, value):
    r = await client.post("/v1/tenants", headers=keyed(value), json=TENANT)
    assert_problem(r, 400, "invalid-request")
    assert fake.calls("create_tenant") == []
