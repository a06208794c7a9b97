"""Submit -> admitted -> placed -> finished through the gateway, with the real scheduler and node events."""

from __future__ import annotations

from tests.gateway.gateway_support import assert_problem
from tests.scheduler.service.conftest import World


async def test_a_job_is_admitted_placed_and_finished(world: World) -> None:
    await world.tenant("acme", nominal=2000)
    await world.start_scheduler("s1")
    await world.leader()
    await world.register_node("n1", gpus=2)

    job = await world.submit("acme", name="resnet", worker={"gpus": 1})
    assert job["state"] in ("pending", "admitted", "placed") and job["id"].startswith("j_") and len(job["id"]) == 28
    assert job["priority"] == 10 and job["preemptible"] is True and job["milli"] == 1000

    placed = await world.wait_job("acme", job["id"], "placed")
    assert placed["gpu_model"] == "H100" and placed["admitted_at"] and placed["placed_at"]
    [placement] = placed["placements"]
    assert placement["node"] == "n1" and [d["milli"] for d in placement["devices"]] == [1000]

    nodes = (await world.gateway.get("/v1/nodes", headers=world.headers())).json()["items"]
    assert [(n["node"], n["state"], n["allocated_milli"], n["capacity_milli"]) for n in nodes] == [
        ("n1", "ready", 1000, 2000)
    ]

    await world.finish("acme", job["id"])
    done = await world.wait_job("acme", job["id"], "succeeded")
    assert done["outcome"] == "succeeded" and done["ended_at"] and done["placements"] == []
    nodes = (await world.gateway.get("/v1/nodes", headers=world.headers())).json()["items"]
    assert nodes[0]["allocated_milli"] == 0

    # A finished job cannot be cancelled; the explanation tells its whole story.
    again = await world.gateway.post(
        f"/v1/tenants/acme/jobs/{job['id']}/cancel", json={}, headers=world.headers("acme-admin")
    )
    assert_problem(again, 409, "conflict")
    explained = (await world.gateway.get(f"/v1/tenants/acme/jobs/{job['id']}/explain", headers=world.headers())).json()
    assert [h["type"] for h in explained["history"]] == ["submitted", "admitted", "placed", "finished"]
    assert explained["summary"].startswith("finished: succeeded")


async def test_cancel_ends_the_allocation_and_a_fraction_shares_a_device(world: World) -> None:
    await world.tenant("acme", nominal=2000)
    await world.start_scheduler("s1")
    await world.register_node("n1", gpus=1)
    half = await world.submit("acme", name="half", worker={"gpus": 1, "milli": 500})
    other = await world.submit("acme", name="other", worker={"gpus": 1, "milli": 500})
    for job in (half, other):
        placed = await world.wait_job("acme", job["id"], "placed")
        assert placed["placements"][0]["devices"][0]["milli"] == 500
    cancelled = await world.gateway.post(
        f"/v1/tenants/acme/jobs/{half['id']}/cancel", json={"reason": "wrong data"}, headers=world.headers("acme-admin")
    )
    assert cancelled.status_code == 200, cancelled.text
    assert cancelled.json()["state"] == "cancelled" and "wrong data" in cancelled.json()["message"]
    nodes = (await world.gateway.get("/v1/nodes", headers=world.headers())).json()["items"]
    assert nodes[0]["allocated_milli"] == 500
