"""Scheduling through the live service: priority preemption, reclaim in a cohort, explain, node loss."""

from __future__ import annotations

import time

from tests.scheduler.service.conftest import World


async def test_a_higher_priority_job_preempts_a_lower_one(world: World) -> None:
    await world.tenant("acme", nominal=1000)
    await world.start_scheduler("s1")
    await world.register_node("n1", gpus=1)
    low = await world.submit("acme", name="low", priority_class="normal")
    await world.wait_job("acme", low["id"], "placed")

    high = await world.submit("acme", name="high", priority_class="high")
    placed = await world.wait_job("acme", high["id"], "placed")
    assert placed["placements"][0]["node"] == "n1"
    victim = await world.job("acme", low["id"])
    assert victim["state"] in ("preempted", "pending")
    assert victim["last_preemption"] == "priority" and victim["preemptions"] == 1
    explained = (await world.gateway.get(f"/v1/tenants/acme/jobs/{low['id']}/explain", headers=world.headers())).json()
    preempted = [h for h in explained["history"] if h["type"] == "preempted"]
    assert preempted and high["id"] in preempted[0]["summary"]


async def test_a_lender_reclaims_borrowed_capacity_across_tenants(world: World) -> None:
    await world.tenant("acme", nominal=1000, cohort="pool")
    await world.tenant("globex", nominal=1000, cohort="pool")
    await world.start_scheduler("s1")
    await world.register_node("n1", gpus=2)
    first = await world.submit("globex", name="g1")
    second = await world.submit("globex", name="g2")
    placed = [await world.wait_job("globex", j["id"], "placed") for j in (first, second)]
    assert sorted(j["borrowed_milli"] for j in placed) == [0, 1000], "the second one borrows acme's idle GPU"

    mine = await world.submit("acme", name="owner")
    await world.wait_job("acme", mine["id"], "placed")
    reclaimed = [await world.job("globex", j["id"]) for j in (first, second)]
    assert sorted(j["last_preemption"] or "-" for j in reclaimed) == ["-", "reclaim"]


async def test_explain_says_why_a_job_waits_with_numbers(world: World) -> None:
    await world.tenant("acme", nominal=1000)
    await world.start_scheduler("s1")
    await world.register_node("n1", gpus=4)
    big = await world.submit("acme", name="big", worker={"gpus": 2})
    deadline = time.monotonic() + 10
    job = await world.job("acme", big["id"])
    while job["reason"] is None and time.monotonic() < deadline:
        job = await world.job("acme", big["id"])
    assert job["state"] == "pending" and job["reason"] == "QuotaExceeded", job
    assert "1" in job["message"] and "2" in job["message"]

    explained = await world.gateway.get(f"/v1/tenants/acme/jobs/{big['id']}/explain", headers=world.headers())
    assert explained.status_code == 200, explained.text
    body = explained.json()
    assert "QuotaExceeded" in body["summary"] and any(ch.isdigit() for ch in body["summary"])
    assert [h["type"] for h in body["history"]] == ["submitted", "queued"]
    assert body["history"][1]["summary"].startswith("waiting (QuotaExceeded)")

    # Without the leader's live view, the projection's last verdict answers.
    for instance in world.instances:
        await instance.shutdown()
    world.instances.clear()
    await world.start_scheduler("follower", elect=False)
    fallback = (await world.gateway.get(f"/v1/tenants/acme/jobs/{big['id']}/explain", headers=world.headers())).json()
    assert fallback["summary"].startswith("waiting (QuotaExceeded)")


async def test_a_silent_node_is_lost_and_its_jobs_are_requeued(world: World) -> None:
    await world.tenant("acme", nominal=2000)
    await world.start_scheduler("s1")
    await world.register_node("n1", gpus=1)
    job = await world.submit("acme", name="train")
    await world.wait_job("acme", job["id"], "placed")

    world.stop_beating("n1")  # node_timeout_s is 2 in these tests
    requeued = await world.wait_job("acme", job["id"], "preempted", "pending", timeout_s=8)
    assert requeued["last_preemption"] == "node_lost" and requeued["preemptions"] == 0
    nodes = {n["node"]: n for n in (await world.gateway.get("/v1/nodes", headers=world.headers())).json()["items"]}
    assert nodes["n1"]["state"] == "lost" and nodes["n1"]["allocated_milli"] == 0

    await world.register_node("n2", gpus=1)
    moved = await world.wait_job("acme", job["id"], "placed")
    assert moved["placements"][0]["node"] == "n2"
