"""Idempotency-Key: a retried write runs once and gets the first answer; misuse is a 4xx."""

from __future__ import annotations

import asyncio
import base64
import json
import math
import uuid

import nats.js.errors
import pytest
from gateway_support import ACME_KEY, ADMIN_KEY, FakeTenancy, assert_problem, bearer

from tessera_contracts.api.tenancy import RegisterCluster
from tessera_gateway import idempotency
from tessera_gateway.idempotency import Answer, IdempotencyStore
from tessera_gateway.problems import GatewayProblem
from tessera_runtime.rpc import Call, RpcServer

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


async def _raw_bucket_contents(nc, bucket: str) -> list[bytes]:
    """Every message still in the bucket's stream, and each stored answer's body decoded (it is base64 in JSON)."""
    js = nc.jetstream()
    stream = f"KV_{bucket}"
    info = await js.stream_info(stream)
    found: list[bytes] = []
    for seq in range(info.state.first_seq, info.state.last_seq + 1):
        try:
            msg = await js.get_msg(stream, seq)
        except nats.js.errors.NotFoundError:
            continue
        data = msg.data or b""
        found.append(data)
        entry = json.loads(data) if data else {}
        if isinstance(entry, dict) and isinstance(entry.get("answer"), dict):
            found.append(base64.b64decode(entry["answer"]["body"]))
    return found


async def test_issued_key_secret_is_never_stored_and_a_replay_shows_null(make_client, fake: FakeTenancy, nc):
    bucket = f"TEST_IDEMPOTENCY_{uuid.uuid4().hex[:10]}"
    client = await make_client(idempotency_bucket=bucket)
    path = "/v1/tenants/acme/users/u_ac1/keys"
    first = await client.post(path, headers=keyed("issue-ci-key"), json={"name": "ci"})
    assert first.status_code == 201, first.text
    secret = first.json()["secret"]
    assert secret and secret == fake.issued_secrets[0]

    contents = await _raw_bucket_contents(nc, bucket)
    assert any(b'"key_id"' in item for item in contents), "the answer was stored (decoded above)"
    for item in contents:
        assert secret.encode() not in item
        assert base64.b64encode(secret.encode()) not in item

    again = await client.post(path, headers=keyed("issue-ci-key"), json={"name": "ci"})
    assert again.status_code == 201
    assert again.headers["idempotency-replayed"] == "true"
    assert again.json() == {**first.json(), "secret": None}
    assert len(fake.calls("issue_key")) == 1


def test_without_secret_only_touches_a_top_level_secret():
    body = b'{"key": {"name": "secret", "secret": "inner"}, "secret": "tsk_x"}'
    stored = idempotency.without_secret(Answer(status=201, body=body, media_type="application/json"))
    assert json.loads(stored.body) == {"key": {"name": "secret", "secret": "inner"}, "secret": None}
    for untouched in (
        Answer(status=201, body=b'{"name": "no secrets here"}', media_type="application/json"),
        Answer(status=201, body=b'["secret"]', media_type="application/json"),
        Answer(status=409, body=b'{"secret": "x"}', media_type="application/problem+json"),
    ):
        assert idempotency.without_secret(untouched) is untouched


async def test_a_timeout_keeps_the_claim_so_a_retry_does_not_run_twice(make_client, fake: FakeTenancy):
    client = await make_client(rpc_timeout_s=0.3)
    fake.hold = asyncio.Event()  # the service is slow: it finishes after the gateway gave up
    body = {"project": "late", "display_name": "Late"}
    first = await client.post("/v1/tenants/acme/projects", headers=keyed("late-1"), json=body)
    assert_problem(first, 504, "timeout")
    assert "idempotency-replayed" not in first.headers

    retry = await client.post("/v1/tenants/acme/projects", headers=keyed("late-1"), json=body)
    problem = assert_problem(retry, 409, "conflict")
    assert "in progress" in problem["detail"]
    assert 1 <= int(retry.headers["retry-after"]) <= math.ceil(2 * 0.3 + 10)
    fake.hold.set()  # the first request completes in the service after all
    await asyncio.sleep(0.1)
    retry = await client.post("/v1/tenants/acme/projects", headers=keyed("late-1"), json=body)
    assert_problem(retry, 409, "conflict")
    assert len(fake.calls("create_project")) == 1, "the service ran the request once"


async def test_no_responder_releases_the_claim(client, fake: FakeTenancy, nc):
    body = {"cluster": "c2", "region": "eu-west", "provider": "on-prem"}  # nobody answers register_cluster
    assert_problem(await client.post("/v1/clusters", headers=keyed("c2"), json=body), 503, "unavailable")
    late = RpcServer(nc, "tenancy")  # now somebody does: the retry runs at once
    seen: list[RegisterCluster] = []

    @late.operation("register_cluster", RegisterCluster)
    async def register_cluster(call: Call, cluster: RegisterCluster) -> dict[str, str]:
        seen.append(cluster)
        return {"cluster": cluster.cluster}

    await late.start()
    try:
        r = await client.post("/v1/clusters", headers=keyed("c2"), json=body)
    finally:
        await late.stop()
    assert r.status_code == 201, r.text
    assert "idempotency-replayed" not in r.headers
    assert len(seen) == 1


class _Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


async def test_a_timed_out_claim_is_taken_over_once_it_expires(nc):
    js = nc.jetstream()
    bucket = f"TEST_IDEMPOTENCY_{uuid.uuid4().hex[:10]}"
    await IdempotencyStore.open(js, bucket=bucket, ttl_s=60, pending_ttl_s=20)
    clock = _Clock()
    try:
        store = IdempotencyStore(await js.key_value(bucket), pending_ttl_s=20, clock=clock)
        runs: list[int] = []

        async def produce(status: int) -> Answer:
            runs.append(status)
            return Answer(status=status, body=b"{}", media_type="application/json")

        answer, replayed = await store.run("k1", "fp", lambda: produce(504))
        assert (answer.status, replayed) == (504, False)
        clock.now += 15
        with pytest.raises(GatewayProblem) as conflict:
            await store.run("k1", "fp", lambda: produce(201))
        assert conflict.value.problem.status == 409
        assert conflict.value.headers["Retry-After"] == "5"
        clock.now += 6  # past pending_ttl_s: the retry runs (the first one is presumed lost)
        answer, replayed = await store.run("k1", "fp", lambda: produce(201))
        assert (answer.status, replayed) == (201, False)
        assert runs == [504, 201]

        await store.run("k2", "fp", lambda: produce(503))  # nobody answered: released at once
        answer, replayed = await store.run("k2", "fp", lambda: produce(201))
        assert (answer.status, replayed) == (201, False)
        assert runs == [504, 201, 503, 201]

        async def cancelled() -> Answer:
            raise asyncio.CancelledError

        with pytest.raises(asyncio.CancelledError):  # e.g. shutdown while the service has the request
            await store.run("k3", "fp", cancelled)
        with pytest.raises(GatewayProblem) as conflict:
            await store.run("k3", "fp", lambda: produce(201))
        assert conflict.value.problem.status == 409 and conflict.value.headers["Retry-After"] == "1"
    finally:
        await js.delete_key_value(bucket)
