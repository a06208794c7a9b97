"""Admission and placement by the core: quota, flavours, budget, gangs, fractions, MIG, backfill."""

from __future__ import annotations

from decimal import Decimal

from tessera_contracts.events.scheduler import JobAdmitted, JobPlaced, NodeSelector
from tessera_scheduler.domain import CoreConfig
from tests.scheduler.test_core_support import World, node_event, of_type, placed_ids, queued


def _world(gpus: int = 8, nodes: int = 1) -> World:
    w = World()
    w.nodes([node_event(f"n{i}", gpus) for i in range(nodes)])
    w.quota("t", {"A100": (64, None, None)})
    return w


def test_a_tenant_without_quota_waits_with_no_quota_but_cpu_jobs_run() -> None:
    w = World()
    w.nodes([node_event("n1", 8)])
    gpu = w.submit("nobody")
    cpu = w.submit("nobody", gpus=0, cpu_milli=1000)
    events = w.cycle()
    assert queued(events) == {gpu: "NoQuota"}
    assert placed_ids(events) == [cpu]
    admitted = of_type(events, JobAdmitted)
    assert admitted[0].gpu_model is None and admitted[0].milli == 0  # type: ignore[attr-defined]


def test_quota_exceeded_then_admitted_when_usage_drops() -> None:
    w = World()
    w.nodes([node_event("n1", 8)])
    w.quota("t", {"A100": (2, None, None)})
    a, b, c = (w.submit("t") for _ in range(3))
    events = w.cycle()
    assert placed_ids(events) == [a, b] and queued(events) == {c: "QuotaExceeded"}
    w.finish(a)
    assert placed_ids(w.cycle(advance=1)) == [c]


def test_a_model_of_unknown_device_memory_still_takes_jobs_that_allow_any_model() -> None:
    w = World()
    w.nodes([node_event("g2", 2, model="G2", memory_mib=0)])
    w.quota("t", {"G2": (2, None, None)})
    whole = w.submit("t")
    half = w.submit("t", milli=500)
    assert placed_ids(w.cycle()) == [whole, half]


def test_project_cap_and_max_jobs() -> None:
    w = World()
    w.nodes([node_event("n1", 8)])
    w.quota("t", {"A100": (8, None, None)}, max_jobs=3)
    w.quota("t", {"A100": (1, 0, None)}, project="small")
    a = w.submit("t", project="small")
    b = w.submit("t", project="small")
    c, d, e = (w.submit("t", project="big") for _ in range(3))
    events = w.cycle()
    assert placed_ids(events) == [a, c, d]
    assert queued(events) == {b: "QuotaExceeded", e: "MaxJobsExceeded"}


def test_flavours_are_tried_in_quota_order() -> None:
    w = World()
    w.nodes([node_event("t4", 1, model="T4", memory_mib=16384), node_event("a1", 1)])
    w.quota("t", {"T4": (1, None, None), "A100": (1, None, None)})
    first, second, third = (w.submit("t") for _ in range(3))
    events = w.cycle()
    models = {e.job_id: e.gpu_model for e in of_type(events, JobPlaced)}  # type: ignore[attr-defined]
    assert models == {first: "T4", second: "A100"}
    assert queued(events) == {third: "QuotaExceeded"}
    only = w.submit("t", models=("A100",))
    w.finish(first)
    events = w.cycle(advance=1)
    assert only not in placed_ids(events) and placed_ids(events) == [third]


def test_budget_exhausted_holds_gpu_jobs_with_too_long_a_runtime() -> None:
    w = World()
    w.nodes([node_event("n1", 8)])
    w.quota("t", {"A100": (8, None, None)}, budget=Decimal(2))
    long = w.submit("t", gpus=2, max_runtime_s=7200)  # up to 4 GPU-hours
    short = w.submit("t", gpus=1, max_runtime_s=3600)  # up to 1 GPU-hour
    shorter = w.submit("t", gpus=1, max_runtime_s=3600)  # 1 more: still within 2
    third = w.submit("t", gpus=1, max_runtime_s=3600)  # would make 3 > 2
    cpu = w.submit("t", gpus=0)
    events = w.cycle()
    assert queued(events) == {long: "BudgetExhausted", third: "BudgetExhausted"}
    assert sorted(placed_ids(events)) == sorted([short, shorter, cpu])


def test_budget_spent_holds_every_gpu_job() -> None:
    w = World()
    w.nodes([node_event("n1", 8)])
    w.quota("t", {"A100": (8, None, None)}, budget=Decimal(0))
    j = w.submit("t")
    assert queued(w.cycle()) == {j: "BudgetExhausted"}


def test_unschedulable_model_size_and_selector() -> None:
    w = _world()
    wrong_model = w.submit("t", models=("H100",))
    too_big = w.submit("t", gpus=16)
    nowhere = w.submit("t", selector=NodeSelector(region="mars"))
    bad = w.submit("t", gpus=2, milli=500)  # a fraction of several GPUs is not a request
    fine = w.submit("t")
    events = w.cycle()
    assert queued(events) == {j: "Unschedulable" for j in (wrong_model, too_big, nowhere, bad)}
    assert placed_ids(events) == [fine]


def test_gang_is_all_or_nothing_across_nodes() -> None:
    w = _world(gpus=4, nodes=2)
    gang = w.submit("t", gpus=4, workers=2)
    events = w.cycle()
    placed = of_type(events, JobPlaced)
    assert [e.job_id for e in placed] == [gang]  # type: ignore[attr-defined]
    assert sorted(p.node for p in placed[0].placements) == ["n0", "n1"]  # type: ignore[attr-defined]
    w.finish(gang)
    blocker = w.submit("t", gpus=2)
    w.cycle(advance=1)
    again = w.submit("t", gpus=4, workers=2)
    events = w.cycle(advance=1)
    assert queued(events) == {again: "GangIncomplete"}
    assert w.core.cluster.allocated_milli == 2000  # nothing of the gang was placed
    never = w.submit("t", gpus=4, workers=3)
    assert queued(w.cycle(advance=1)) == {never: "Unschedulable"}
    w.finish(blocker)
    assert placed_ids(w.cycle(advance=1)) == [again]


def test_fractions_share_a_device_but_whole_gpus_never_do() -> None:
    w = _world(gpus=2)
    half1 = w.submit("t", milli=500)
    half2 = w.submit("t", milli=500)
    whole = w.submit("t")
    events = w.cycle()
    devices = {
        e.job_id: [d.uuid for p in e.placements for d in p.devices]  # type: ignore[attr-defined]
        for e in of_type(events, JobPlaced)
    }
    assert devices[half1] == devices[half2]
    assert devices[whole] != devices[half1]
    another = w.submit("t")
    assert queued(w.cycle(advance=1)) == {another: "NoFit"}
    quarter = w.submit("t", milli=250)
    assert queued(w.cycle(advance=1)) == {quarter: "NoFit"}  # the fractional device is full


def test_gpu_memory_becomes_a_fraction_of_the_chosen_model() -> None:
    w = _world(gpus=1)
    j = w.submit("t", milli=None, gpu_memory_mib=20480)  # a quarter of an 80 GiB A100
    events = w.cycle()
    admitted = of_type(events, JobAdmitted)[0]
    assert admitted.milli == 250  # type: ignore[attr-defined]
    placed = of_type(events, JobPlaced)[0]
    share = placed.placements[0].devices[0]  # type: ignore[attr-defined]
    assert share.milli == 250 and share.memory_mib == 20480 and placed.job_id == j  # type: ignore[attr-defined]


def test_mig_slice() -> None:
    w = World()
    w.nodes([node_event("m1", 1, mig=[("1g.10gb", 7)])])
    w.quota("t", {"A100": (1, None, None)})
    jobs = [w.submit("t", mig="1g.10gb") for _ in range(8)]
    events = w.cycle()
    placed = of_type(events, JobPlaced)
    assert [e.job_id for e in placed] == jobs[:7]  # type: ignore[attr-defined]
    share = placed[0].placements[0].devices[0]  # type: ignore[attr-defined]
    assert share.mig_profile == "1g.10gb" and share.milli == 142
    assert of_type(events, JobAdmitted)[0].milli == 142  # type: ignore[attr-defined]
    assert queued(events) == {jobs[7]: "QuotaExceeded"}  # 7 x 142 = 994 of 1000; one more is over


def test_backfill_lets_a_small_job_pass_a_blocked_big_one() -> None:
    w = _world(gpus=8)
    w.submit("t", gpus=6)
    w.cycle()
    big = w.submit("t", gpus=4, priority=5)
    small = w.submit("t", gpus=1)
    events = w.cycle(advance=1)
    assert queued(events) == {big: "NoFit"} and placed_ids(events) == [small]


def test_nominal_first_then_fair_share_across_tenants() -> None:
    w = World(CoreConfig(placement="best-fit"))
    w.nodes([node_event("n1", 4)])
    w.quota("rich", {"A100": (0, None, None)}, cohort="c")
    w.quota("poor", {"A100": (2, None, None)}, cohort="c")
    w.quota("idle", {"A100": (2, None, None)}, cohort="c")
    borrow = w.submit("rich", priority=100)  # would borrow: goes after work within nominal
    mine = [w.submit("poor") for _ in range(2)]
    events = w.cycle()
    assert placed_ids(events) == [*mine, borrow]
