"""Every error is problem+json: bad input (never a 5xx), Litestar's own errors, service problems, timeouts."""

from __future__ import annotations

import time

import nats
import pytest
from gateway_support import ACME_KEY, ADMIN_KEY, FakeTenancy, assert_problem, bearer

ADMIN = bearer(ADMIN_KEY)
JSON = "application/json"


@pytest.mark.parametrize(
    ("body", "key"),
    [
        ({"tenant": "ok", "display_name": "Ok", "colour": "red"}, "data"),  # unknown field
        ({"tenant": 5, "display_name": "Ok"}, "tenant"),  # wrong type
        ({"tenant": "ok", "display_name": ["x"]}, "display_name"),  # wrong type
        ({"tenant": "ok"}, "data"),  # missing field
        ({"tenant": "", "display_name": "Ok"}, "tenant"),  # empty name
        ({"tenant": "a" * 64, "display_name": "Ok"}, "tenant"),  # too long slug
        ({"tenant": "Upper_Case", "display_name": "Ok"}, "tenant"),  # not a slug
        ({"tenant": "ok", "display_name": ""}, "display_name"),  # empty display name
        ({"tenant": "ok", "display_name": "x" * 201}, "display_name"),  # too long display name
        ({"tenant": "ok", "display_name": "bell\x07"}, "display_name"),  # control character
        ([], "data"),  # not an object
    ],
)
async def test_invalid_body_is_400_with_errors_and_service_not_called(client, fake: FakeTenancy, body, key):
    r = await client.post("/v1/tenants", headers=ADMIN, json=body)
    problem = assert_problem(r, 400, "invalid-request")
    assert problem["errors"], problem
    assert problem["errors"][0]["key"] == key and problem["errors"][0]["source"] == "body"
    assert problem["errors"][0]["message"]
    assert fake.calls("create_tenant") == []


async def test_unknown_field_is_named(client, fake: FakeTenancy):
    r = await client.post("/v1/tenants", headers=ADMIN, json={"tenant": "ok", "display_name": "Ok", "colour": 1})
    assert "colour" in assert_problem(r, 400, "invalid-request")["errors"][0]["message"]


async def test_malformed_json_and_empty_body_are_400(client, fake: FakeTenancy):
    headers = {**ADMIN, "Content-Type": "application/json"}
    assert_problem(await client.post("/v1/tenants", headers=headers, content=b'{"tenant": '), 400, "invalid-request")
    assert_problem(await client.post("/v1/tenants", headers=headers, content=b""), 400, "invalid-request")
    assert fake.calls("create_tenant") == []


async def test_unicode_and_emoji_display_names_are_accepted(client, fake: FakeTenancy):
    name = "Ünïcødé 研究所 🚀🧪"
    r = await client.post("/v1/tenants", headers=ADMIN, json={"tenant": "emoji", "display_name": name})
    assert r.status_code == 201, r.text
    assert r.json()["display_name"] == name
    assert fake.calls("create_tenant")[0].body.display_name == name


async def test_oversized_body_is_413(client, fake: FakeTenancy):
    r = await client.post("/v1/tenants", headers=ADMIN, json={"tenant": "big", "display_name": "x" * 70_000})
    assert "65536" in assert_problem(r, 413, "payload-too-large")["detail"]
    assert fake.calls("create_tenant") == []


async def test_non_json_body_is_415(client, fake: FakeTenancy):
    r = await client.post(
        "/v1/tenants", headers={**ADMIN, "Content-Type": "text/plain"}, content=b"tenant=x&display_name=y"
    )
    assert_problem(r, 415, "unsupported-media-type")
    r = await client.post(
        "/v1/tenants",
        headers={**ADMIN, "Content-Type": "application/json; charset=utf-8"},
        content=b'{"tenant": "cs", "display_name": "Charset"}',
    )
    assert r.status_code == 201, r.text


async def test_unknown_route_is_404_problem_with_request_id(client):
    r = await client.get("/v1/no-such-thing")
    assert_problem(r, 404, "not-found")
    assert r.headers["x-request-id"]


async def test_wrong_method_is_405_problem_with_allow(client):
    r = await client.delete("/v1/tenants", headers=ADMIN)
    assert_problem(r, 405, "method-not-allowed")
    assert "POST" in r.headers["allow"] and "GET" in r.headers["allow"]


@pytest.mark.parametrize(
    ("method", "path", "param"),
    [
        ("GET", "/v1/tenants/acme/users/bob", "user"),
        ("GET", "/v1/tenants/acme/users/u_XYZ", "user"),
        ("DELETE", "/v1/tenants/acme/keys/k_not-hex", "key"),
        ("GET", "/v1/tenants/acme/projects/Bad_Project", "project"),
        ("GET", "/v1/clusters/" + "c" * 64, "cluster"),
        ("GET", "/v1/tenants?limit=0", "limit"),
        ("GET", "/v1/tenants?limit=501", "limit"),
        ("GET", "/v1/tenants?limit=many", "limit"),
        ("GET", "/v1/tenants?after=" + "c" * 513, "after"),
    ],
)
async def test_bad_path_and_query_parameters_are_400(client, fake: FakeTenancy, method, path, param):
    r = await client.request(method, path, headers=ADMIN)
    problem = assert_problem(r, 400, "invalid-request")
    assert [e["key"] for e in problem["errors"]] == [param]
    assert [s.operation for s in fake.seen] == ["verify_key"]


async def test_bad_tenant_slug_is_400(client, fake: FakeTenancy):
    r = await client.get("/v1/tenants/Not_A_Slug", headers=ADMIN)
    assert assert_problem(r, 400, "invalid-request")["errors"][0]["key"] == "tenant"


async def test_service_problem_passes_through_with_its_status(client, fake: FakeTenancy):
    r = await client.get("/v1/tenants/nope", headers=ADMIN)  # well-formed but unknown: the service's 404
    assert "nope" in assert_problem(r, 404, "not-found")["detail"]
    assert len(fake.calls("get_tenant")) == 1
    r = await client.post("/v1/tenants", headers=ADMIN, json={"tenant": "acme", "display_name": "Again"})
    assert_problem(r, 409, "conflict")
    assert "retry-after" not in r.headers


async def test_slow_service_is_504_with_retry_after(make_client, fake: FakeTenancy):
    client = await make_client(rpc_timeout_s=0.2)
    started = time.monotonic()
    r = await client.get("/v1/tenants/acme/projects/slow", headers=ADMIN)
    assert time.monotonic() - started < fake.slow_s
    assert_problem(r, 504, "timeout")
    assert r.headers["retry-after"] == "1"


async def test_no_responder_is_503_with_retry_after(client, fake: FakeTenancy):
    r = await client.get("/v1/clusters", headers=ADMIN)  # the fake has no list_clusters
    assert "tenancy" in assert_problem(r, 503, "unavailable")["detail"]
    assert r.headers["retry-after"] == "1"


@pytest.mark.parametrize(
    ("method", "path", "body", "content_type"),
    [
        ("POST", "/v1/tenants", b"\xff\xfe\x00 not utf-8", JSON),
        ("POST", "/v1/tenants", b"null", JSON),
        ("POST", "/v1/tenants", b"[" * 100_000 + b"]" * 100_000, JSON),  # nested too deeply: 413 or 400
        ("POST", "/v1/tenants", b"[" * 20_000 + b"]" * 20_000, JSON),  # nested too deeply to decode
        ("PUT", "/v1/priority-classes/high", b'{"value": 1e400}', JSON),
        ("PUT", "/v1/priority-classes/high", b'{"value": 99999999999999999999999999}', JSON),
        ("PUT", "/v1/tenants/acme/quota", b'{"monthly_gpu_hour_budget": "NaN"}', JSON),
        ("PUT", "/v1/tenants/acme/quota", b'{"gpus": [{"gpu_model": "x", "nominal_milli": -1}]}', JSON),
        ("POST", "/v1/tenants/acme/users/u_1/keys", b'{"name": "k", "expires_at": "yesterday"}', JSON),
        ("POST", "/v1/tenants", b'{"tenant": "a", "display_name": "b"}', "multipart/form-data; boundary=x"),
        ("GET", "/v1/tenants/%2e%2e", None, None),
        ("GET", "/v1/tenants/acme%00", None, None),
        ("GET", "/v1/tenants/acme/users/u_1/keys?limit=-5", None, None),
        ("PATCH", "/v1/tenants", None, None),
    ],
)
@pytest.mark.parametrize("key", [ADMIN_KEY, ACME_KEY])
async def test_hostile_input_is_a_4xx_problem_never_5xx(
    client, fake: FakeTenancy, method, path, body, content_type, key
):
    headers = bearer(key) | ({"Content-Type": content_type} if content_type else {})
    r = await client.request(method, path, headers=headers, content=body)
    assert 400 <= r.status_code < 500, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    assert {s.operation for s in fake.seen} <= {"verify_key"}  # nothing reached an operation


async def test_closed_nats_connection_is_503(make_client, fake: FakeTenancy, servers):
    own = await nats.connect(servers.nats_url)
    client = await make_client(connection=own)
    await own.close()
    assert_problem(await client.get("/healthz"), 503, "unavailable")
    r = await client.get("/v1/me", headers=ADMIN)
    assert_problem(r, 503, "unavailable")
    assert r.headers["retry-after"] == "1"


@pytest.mark.parametrize(
    ("method", "path", "body", "key", "operation"),
    [
        ("PUT", "/v1/priority-classes/high", {"value": 1, "preemptible": 0}, "preemptible", "define_priority_class"),
        (
            "PUT",
            "/v1/priority-classes/high",
            {"value": 1, "preemptible": "true"},
            "preemptible",
            "define_priority_class",
        ),
        ("PUT", "/v1/priority-classes/high", {"value": "100"}, "value", "define_priority_class"),
        ("PUT", "/v1/priority-classes/high", {"value": 1.0}, "value", "define_priority_class"),
        ("POST", "/v1/tenants", {"tenant": "ok", "display_name": 5}, "display_name", "create_tenant"),
        ("POST", "/v1/tenants/acme/projects", {"project": 7, "display_name": "P"}, "project", "create_project"),
        ("PUT", "/v1/tenants/acme/quota", {"max_concurrent_jobs": "3"}, "max_concurrent_jobs", "set_quota"),
        (
            "PUT",
            "/v1/tenants/acme/quota",
            {"gpus": [{"gpu_model": "A100", "nominal_milli": "8"}]},
            "gpus[0].nominal_milli",
            "set_quota",
        ),
        (
            "PUT",
            "/v1/tenants/acme/quota",
            {"gpus": [{"gpu_model": "A100", "nominal_milli": 8, "x": 1}]},
            "gpus[0]",
            "set_quota",
        ),
        ("POST", "/v1/tenants/acme/users/u_1/keys", {"name": "k", "expires_at": 1700000000}, "expires_at", "issue_key"),
    ],
)
async def test_bodies_are_decoded_strictly(client, fake: FakeTenancy, method, path, body, key, operation):
    r = await client.request(method, path, headers=ADMIN, json=body)
    problem = assert_problem(r, 400, "invalid-request")
    (error,) = problem["errors"]
    assert (error["key"], error["source"]) == (key, "body"), error
    assert error["message"]
    assert fake.calls(operation) == []


async def test_strict_errors_for_empty_and_malformed_bodies_name_the_body(client, fake: FakeTenancy):
    headers = {**ADMIN, "Content-Type": "application/json"}
    for content, message in ((b"", "a JSON body is required"), (b'{"tenant": ', "truncated")):
        (error,) = assert_problem(
            await client.post("/v1/tenants", headers=headers, content=content), 400, "invalid-request"
        )["errors"]
        assert (error["key"], error["source"]) == ("data", "body") and message in error["message"]
    assert fake.calls("create_tenant") == []


async def test_a_strictly_valid_body_goes_through_unchanged(client, fake: FakeTenancy):
    r = await client.post(
        "/v1/tenants/acme/users/u_1/keys", headers=ADMIN, json={"name": "k", "expires_at": "2030-01-01T00:00:00Z"}
    )
    assert r.status_code == 201, r.text
    (seen,) = fake.calls("issue_key")
    assert seen.body.expires_at.isoformat() == "2030-01-01T00:00:00+00:00"
