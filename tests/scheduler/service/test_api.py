"""The job and node routes: who may do what, bad input is a 4xx problem that changes nothing, lists and filters."""

from __future__ import annotations

from typing import Any

import httpx

from tessera_runtime.tenant_rows import APP_ROLE
from tessera_scheduler.projections import PLATFORM_WIDE
from tests.gateway.gateway_support import assert_problem
from tests.scheduler.service.conftest import World

LONG = "x" * 10_000
JOB = {"name": "train", "priority_class": "normal"}
BAD_SUBMITS: list[Any] = [
    {**JOB, "extra": 1},  # unknown field
    {**JOB, "name": ""},
    {**JOB, "name": LONG},
    {**JOB, "name": "tab\there"},
    {**JOB, "name": "evil\u202egnp.exe"},
    {**JOB, "priority_class": "Not A Slug"},
    {**JOB, "priority_class": "nope"},  # no such class: 422
    {**JOB, "queue": "../x"},
    {**JOB, "workers": 0},
    {**JOB, "workers": 10**9},
    {**JOB, "worker": {"gpus": -1}},
    {**JOB, "worker": {"gpus": 2, "milli": 500}},  # a fraction needs one GPU
    {**JOB, "worker": {"gpus": 1, "milli": 500, "gpu_memory_mib": 100}},
    {**JOB, "worker": {"mig_profile": "huge"}},
    {**JOB, "worker": {"mig_profile": "1g.10gb", "gpus": 2}},
    {**JOB, "worker": {"gpus": 0, "milli": 10}},
    {**JOB, "worker": {"gpus": "1"}},  # strict: no strings for numbers
    {**JOB, "worker": {"gpu_models": ["a b"]}},
    {**JOB, "env": {"1BAD": "x"}},
    {**JOB, "env": {"OK": "nul\x00"}},
    {**JOB, "command": ["x"] * 1000},
    {**JOB, "max_runtime_s": 0},
    {**JOB, "max_runtime_s": 10**12},
    {**JOB, "selector": {"labels": {"k": "bad value"}}},
    {"priority_class": "normal"},  # no name
    [],
    "job",
]


async def setup(world: World) -> None:
    await world.tenant("acme", nominal=2000, projects=("vision", "nlp"))
    await world.tenant("globex", nominal=1000)
    await world.start_scheduler("s1")
    await world.leader()
    world.keys["viewer"] = await world.key("acme", "vera", "viewer")
    world.keys["vision-member"] = await world.key("acme", "max", "member", project="vision")
    world.keys["nlp-member"] = await world.key("acme", "nia", "member", project="nlp")


async def test_bad_submits_are_4xx_problems_and_append_nothing(world: World) -> None:
    await setup(world)
    for who in ("platform", "acme-admin"):  # a key's first use is recorded (ApiKeyUsed): get it over with
        await world.gateway.get("/v1/me", headers=world.headers(who))
    head = await world.log.head()
    headers = {**world.headers("acme-admin"), "Content-Type": "application/json"}
    for body in BAD_SUBMITS:
        content = httpx.Request("POST", "http://x", json=body).content
        response = await world.gateway.post("/v1/tenants/acme/projects/vision/jobs", content=content, headers=headers)
        assert 400 <= response.status_code < 500, f"{body!r:.100}: {response.status_code} {response.text}"
        assert response.headers["content-type"].startswith("application/problem+json")
    for path, status, code in [
        ("/v1/tenants/acme/projects/nope/jobs", 404, "not-found"),  # no such project
        ("/v1/tenants/acme/projects/Bad/jobs", 400, "invalid-request"),
        ("/v1/tenants/nobody/projects/vision/jobs", 404, "not-found"),
    ]:
        assert_problem(await world.gateway.post(path, json=JOB, headers=headers), status, code)
    priority = await world.gateway.post(
        "/v1/tenants/acme/projects/vision/jobs", json={**JOB, "priority_class": "nope"}, headers=headers
    )
    assert_problem(priority, 422, "unprocessable")
    for path in [
        "/v1/tenants/acme/jobs/j_0",
        "/v1/tenants/acme/jobs/not-a-job",
        "/v1/tenants/acme/jobs?state=sleeping",
        "/v1/tenants/acme/jobs?after=%%%",
        "/v1/tenants/acme/jobs?after=WzFd",  # [1]: a valid cursor of an empty page
        "/v1/tenants/acme/jobs?limit=0",
        "/v1/tenants/acme/jobs?project=Bad",
        "/v1/nodes?after=x",
    ]:
        response = await world.gateway.get(path, headers=world.headers())
        assert response.status_code < 500, f"{path}: {response.status_code} {response.text}"
    missing = await world.gateway.get(f"/v1/tenants/acme/jobs/j_{'0' * 26}", headers=world.headers())
    assert_problem(missing, 404, "not-found")
    assert await world.log.head() == head, "a refused request appended events"


async def test_who_sees_and_touches_which_jobs(world: World) -> None:
    await setup(world)
    vision = await world.submit("acme", "vision")
    nlp = await world.submit("acme", "nlp")
    theirs = await world.submit("globex", "vision")
    get = world.gateway.get

    # Another tenant's job is a 404, even with its id, on every route.
    for route in ("", "/explain"):
        assert_problem(
            await get(f"/v1/tenants/acme/jobs/{theirs['id']}{route}", headers=world.headers()), 404, "not-found"
        )
        assert_problem(
            await get(f"/v1/tenants/globex/jobs/{theirs['id']}{route}", headers=world.headers("acme-admin")),
            404,
            "not-found",
        )
    cancel = await world.gateway.post(
        f"/v1/tenants/globex/jobs/{theirs['id']}/cancel", json={}, headers=world.headers("acme-admin")
    )
    assert_problem(cancel, 404, "not-found")

    # A member bound to one project sees and submits only there.
    assert (
        await get(f"/v1/tenants/acme/jobs/{vision['id']}", headers=world.headers("vision-member"))
    ).status_code == 200
    assert_problem(
        await get(f"/v1/tenants/acme/jobs/{nlp['id']}", headers=world.headers("vision-member")), 404, "not-found"
    )
    listed = (await get("/v1/tenants/acme/jobs", headers=world.headers("vision-member"))).json()["items"]
    assert [j["id"] for j in listed] == [vision["id"]]
    refused = await world.gateway.post(
        "/v1/tenants/acme/projects/nlp/jobs", json=JOB, headers=world.headers("vision-member")
    )
    assert_problem(refused, 404, "not-found")
    await world.submit("acme", "vision", who="vision-member")

    # A viewer reads but cannot submit or cancel.
    assert (await get(f"/v1/tenants/acme/jobs/{nlp['id']}", headers=world.headers("viewer"))).status_code == 200
    assert_problem(
        await world.gateway.post("/v1/tenants/acme/projects/vision/jobs", json=JOB, headers=world.headers("viewer")),
        403,
        "forbidden",
    )
    assert_problem(
        await world.gateway.post(f"/v1/tenants/acme/jobs/{nlp['id']}/cancel", json={}, headers=world.headers("viewer")),
        403,
        "forbidden",
    )
    # Nodes are the platform's.
    assert_problem(await get("/v1/nodes", headers=world.headers("acme-admin")), 403, "forbidden")
    assert (await get("/v1/nodes", headers=world.headers())).status_code == 200


async def test_lists_page_newest_first_and_filter(world: World) -> None:
    await setup(world)
    ids = [(await world.submit("acme", "vision", name=f"j{i}"))["id"] for i in range(5)]
    other = await world.submit("acme", "nlp", name="other", queue="batch")
    await world.gateway.post(f"/v1/tenants/acme/jobs/{ids[0]}/cancel", json={}, headers=world.headers("acme-admin"))
    seen: list[str] = []
    after: str | None = None
    while True:
        params: dict[str, Any] = {"limit": 2, "project": "vision"}
        if after:
            params["after"] = after
        page = (await world.gateway.get("/v1/tenants/acme/jobs", params=params, headers=world.headers())).json()
        seen += [j["id"] for j in page["items"]]
        after = page["next"]
        if not after:
            break
    assert seen == ids[::-1]
    by_queue = (await world.gateway.get("/v1/tenants/acme/jobs?queue=batch", headers=world.headers())).json()
    assert [j["id"] for j in by_queue["items"]] == [other["id"]]
    by_state = (await world.gateway.get("/v1/tenants/acme/jobs?state=cancelled", headers=world.headers())).json()
    assert [j["id"] for j in by_state["items"]] == [ids[0]]


async def test_a_retried_submit_makes_one_job(world: World) -> None:
    await setup(world)
    headers = {**world.headers("acme-admin"), "Idempotency-Key": "submit-1"}
    first = await world.gateway.post("/v1/tenants/acme/projects/vision/jobs", json=JOB, headers=headers)
    second = await world.gateway.post("/v1/tenants/acme/projects/vision/jobs", json=JOB, headers=headers)
    assert first.status_code == second.status_code == 201
    assert first.json()["id"] == second.json()["id"] and second.headers.get("idempotency-replayed") == "true"
    listed = (await world.gateway.get("/v1/tenants/acme/jobs", headers=world.headers())).json()["items"]
    assert len(listed) == 1


async def test_every_table_is_isolated_per_tenant_or_platform_wide(world: World) -> None:
    await setup(world)
    await world.submit("acme")
    await world.submit("globex")
    await world.register_node("n1")
    pool = world.tenancy.pool
    assert await world.instances[0].scheduler.projector.wait_until(await world.log.head(), 5.0) or True
    rows = await pool.fetch(
        "SELECT c.relname, c.relrowsecurity, c.relforcerowsecurity FROM pg_class c"
        " JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'proj_scheduler' AND c.relkind = 'r'"
        " AND has_table_privilege($1, c.oid, 'SELECT')",
        APP_ROLE,
    )
    tables = {r[0]: (r[1], r[2]) for r in rows}
    assert {"jobs", "job_history", "projects", "nodes", "priority_classes", "election"} <= set(tables)
    for table, (rls, forced) in tables.items():
        assert table in PLATFORM_WIDE or (rls and forced), f"{table} must force row-level security"
    async with pool.acquire() as conn:
        for me, other in (("acme", "globex"), ("globex", "acme")):
            async with conn.transaction():
                await conn.execute(f"SET LOCAL ROLE {APP_ROLE}")
                await conn.execute("SELECT set_config('tessera.tenant', $1, true)", me)
                for table in ("jobs", "job_history", "projects"):
                    leaked = await conn.fetchval(
                        f"SELECT count(*) FROM proj_scheduler.{table} WHERE tenant_id = $1", other
                    )
                    mine = await conn.fetchval(f"SELECT count(*) FROM proj_scheduler.{table}")
                    assert leaked == 0 and mine > 0, (me, table)
