"""Authentication: bearer keys verified by the tenancy service; the principal travels with every call."""

from __future__ import annotations

import pytest
from gateway_support import ACME_ADMIN, ACME_KEY, ADMIN_KEY, FakeTenancy, assert_problem, bearer


async def test_missing_key_is_401_with_challenge(client, fake: FakeTenancy):
    r = await client.get("/v1/me")
    assert_problem(r, 401, "unauthenticated")
    assert r.headers["www-authenticate"].startswith("Bearer")
    assert fake.calls("verify_key") == [] and fake.calls("whoami") == []


@pytest.mark.parametrize(
    "authorization",
    ["Basic dXNlcjpwYXNz", "Bearer", "Bearer two words", "Bearer " + "x" * 300, "tsk_acme_0123456789abcdef"],
)
async def test_malformed_authorization_is_401_without_calling_tenancy(client, fake: FakeTenancy, authorization):
    r = await client.get("/v1/me", headers={"Authorization": authorization})
    assert_problem(r, 401, "unauthenticated")
    assert r.headers["www-authenticate"].startswith("Bearer")
    assert fake.calls("verify_key") == []


async def test_unknown_key_is_401_and_never_echoed(client, fake: FakeTenancy):
    secret = "tsk_revoked_or_unknown_deadbeef42"
    r = await client.get("/v1/tenants", headers=bearer(secret))
    body = assert_problem(r, 401, "unauthenticated")
    assert r.headers["www-authenticate"].startswith('Bearer realm="tessera", error="invalid_token"')
    assert secret not in r.text and "deadbeef42" not in r.text
    assert all(secret not in value for value in r.headers.values())
    assert body["detail"]
    assert [s.body.secret for s in fake.calls("verify_key")] == [secret]
    assert fake.calls("list_tenants") == []


async def test_verified_principal_is_forwarded(client, fake: FakeTenancy):
    r = await client.get("/v1/me", headers=bearer(ACME_KEY))
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "application/json"
    assert r.json()["id"] == ACME_ADMIN.id
    (seen,) = fake.calls("whoami")
    assert seen.call.principal == ACME_ADMIN


async def test_request_id_is_echoed_and_used_as_correlation_id(client, fake: FakeTenancy):
    r = await client.get("/v1/me", headers={**bearer(ADMIN_KEY), "X-Request-Id": "req-42.a:b"})
    assert r.status_code == 200
    assert r.headers["x-request-id"] == "req-42.a:b"
    assert [s.call.correlation_id for s in fake.seen] == ["req-42.a:b", "req-42.a:b"]  # verify_key, whoami

    r = await client.get("/v1/me", headers={**bearer(ADMIN_KEY), "X-Request-Id": "no spaces allowed " + "x" * 200})
    generated = r.headers["x-request-id"]
    assert len(generated) == 32 and generated != "req-42.a:b"
    assert fake.calls("whoami")[-1].call.correlation_id == generated


async def test_tenancy_down_is_503_not_401(client, fake: FakeTenancy):
    await fake.stop()
    r = await client.get("/v1/me", headers=bearer(ADMIN_KEY))
    assert_problem(r, 503, "unavailable")
    assert r.headers["retry-after"] == "1"
