"""One active scheduler: failover to the standby within 10 s, and fencing of a deposed leader's decisions."""

from __future__ import annotations

import asyncio
import time

from tessera_contracts.events import scheduler as ev
from tessera_runtime import replay
from tessera_scheduler import refs
from tessera_scheduler.app import SchedulerSettings
from tessera_scheduler.projections import SCHEDULER
from tests.scheduler.service.conftest import World

PRODUCTION_LEASE = SchedulerSettings(node_timeout_s=30.0, cycle_s=0.05, min_runtime_s=0)  # lease 5 s, renew/poll 1 s


async def election(world: World) -> tuple[int, str]:
    row = await world.tenancy.pool.fetchrow("SELECT epoch, holder FROM proj_scheduler.election")
    assert row is not None
    return int(row["epoch"]), str(row["holder"])


async def test_the_standby_takes_over_within_10_s_and_stale_decisions_are_void(world: World) -> None:
    await world.tenant("acme", nominal=2000)
    await world.tenant("initech")  # no quota: its jobs wait with NoQuota
    first = await world.start_scheduler("a", PRODUCTION_LEASE)
    assert await world.leader() is first
    second = await world.start_scheduler("b", PRODUCTION_LEASE)
    await world.register_node("n1", gpus=2)
    before = await world.submit("acme", name="before")
    await world.wait_job("acme", before["id"], "placed")
    victim = await world.submit("initech", name="victim")
    assert (await world.wait_job("initech", victim["id"], "pending"))["state"] == "pending"
    assert await election(world) == (1, "a")
    assert not second.leading and (await _health(world))["status"] == "ok"

    await first.crash()
    crashed = time.monotonic()
    assert await world.leader(timeout_s=10.0) is second
    takeover_s = time.monotonic() - crashed
    print(f"takeover after the leader's crash: {takeover_s:.2f} s (lease 5 s, poll 1 s)")
    assert takeover_s < 10.0

    after = await world.submit("acme", name="after")
    placed = await world.wait_job("acme", after["id"], "placed")
    assert placed["placements"][0]["node"] == "n1"
    assert await election(world) == (2, "b")

    # The old leader, had it only paused, would append decisions of epoch 1 now: void everywhere.
    subject = refs.job_ref("initech", victim["id"]).subject
    stale: list[ev.JobAdmitted | ev.JobPlaced] = [
        ev.JobAdmitted(job_id=victim["id"], epoch=1, gpu_model="H100", milli=1000),
        ev.JobPlaced(
            job_id=victim["id"],
            epoch=1,
            gpu_model="H100",
            placements=(
                ev.WorkerPlacement(
                    worker=0, node="n1", devices=(ev.DeviceShareInfo(uuid="GPU-n1-1", milli=1000, memory_mib=81920),)
                ),
            ),
        ),
    ]
    seq = 0
    for event in stale:
        seq = await world.append(subject, "initech", event)
    assert await second.scheduler.projector.wait_until(seq, 5.0)
    await _until(lambda: second.scheduler.decider.position >= seq)
    assert (await world.job("initech", victim["id"]))["state"] == "pending"
    core = second.scheduler.decider.core
    assert core is not None
    record = core.job(victim["id"])  # type: ignore[attr-defined]
    assert record is not None and record.state == "pending"
    history = (
        await world.gateway.get(f"/v1/tenants/initech/jobs/{victim['id']}/explain", headers=world.headers())
    ).json()["history"]
    assert "admitted" not in [h["type"] for h in history]
    nodes = (await world.gateway.get("/v1/nodes", headers=world.headers())).json()["items"]
    assert nodes[0]["allocated_milli"] == 2000  # before + after; not the stale placement

    # The read model, fencing included, is a pure function of the log: a rebuild gives the same rows.
    await second.scheduler.projector.wait_until(await world.log.head(), 2.0)
    verified = await replay.verify(world.tenancy.pool, world.log, SCHEDULER)
    assert verified.equal, verified


async def test_a_newer_election_in_the_log_deposes_the_leader_at_once(world: World) -> None:
    await world.tenant("acme", nominal=1000)
    leader = await world.start_scheduler("a")
    await world.leader()
    intruder = ev.LeaderElected(epoch=41, holder="intruder")
    await world.append(refs.LEADER_REF.subject, "_system", intruder)
    await _until(lambda: not leader.scheduler.decider.leading, timeout_s=3.0)
    # It gives the lease up, wins it again and is elected with an epoch above the intruder's.
    await world.leader(timeout_s=10.0)
    deadline = time.monotonic() + 5.0
    while (await election(world))[0] != 42:  # the read model follows the log, a moment behind
        assert time.monotonic() < deadline, f"the projection shows epoch {(await election(world))[0]}, not 42"
        await asyncio.sleep(0.05)
    await world.register_node("n1", gpus=1)
    job = await world.submit("acme")
    await world.wait_job("acme", job["id"], "placed")


async def _health(world: World) -> dict[str, object]:
    from tessera_runtime import rpc

    raw = await rpc.call(world.nc, "scheduler", "health")
    import msgspec

    result: dict[str, object] = msgspec.json.decode(raw)
    return result


async def _until(predicate: object, timeout_s: float = 5.0) -> None:
    assert callable(predicate)
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.02)
