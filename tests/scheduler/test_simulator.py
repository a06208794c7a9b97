"""The simulator: fill run, replay semantics (FIFO, backfill, QoS, admission) and a trace slice end to end."""

from __future__ import annotations

import time
from pathlib import Path

from tessera_scheduler.placement import Assignment, Request, policy_named
from tessera_scheduler.simulator.engine import replay
from tessera_scheduler.simulator.fill import fill_run
from tessera_scheduler.simulator.jobs import SimJob, jobs_from_trace
from tessera_scheduler.simulator.metrics import AllocationTimeline, percentile
from tessera_scheduler.simulator.run import simulate
from tessera_scheduler.simulator.trace import load_nodes, load_pods
from tests.scheduler.clusters import node

TRACES = Path(__file__).resolve().parents[2] / "data" / "traces"


def job(seq: int, gpus: int, arrival: float, run: float, qos: str = "LS", milli: int = 1000) -> SimJob:
    return SimJob(seq, f"j{seq}", (Request(gpus=gpus, milli=milli),), qos, arrival, run)


def delays_by_name(jobs: list[SimJob], strict: bool, nodes: int = 1) -> dict[str, float]:
    """Queueing delay of each job (from a recording admission plug-in)."""
    started: dict[str, float] = {}

    class Recorder:
        def admit(self, job: SimJob, now: float) -> str | None:
            return None

        def started(self, job: SimJob, assignments: list[Assignment], now: float) -> None:
            started[job.name] = now - job.arrival_s

        def finished(self, job: SimJob, now: float) -> None:
            pass

    cluster = [node(f"n{i}", 2) for i in range(nodes)]
    replay(cluster, jobs, policy_named("first-fit"), strict=strict, admission=Recorder())
    return started


def test_fifo_blocks_behind_the_head_and_backfill_does_not() -> None:
    jobs = [job(0, 1, 0, 100), job(1, 2, 1, 10), job(2, 1, 2, 10)]
    fifo = delays_by_name(jobs, strict=True)
    assert fifo == {"j0": 0, "j1": 99, "j2": 108}  # j2 waits until j1 (placed at 100) ends at 110
    backfill = delays_by_name(jobs, strict=False)
    assert backfill == {"j0": 0, "j1": 99, "j2": 0}


def test_qos_order_decides_who_gets_freed_capacity() -> None:
    jobs = [job(0, 2, 0, 50), job(1, 2, 1, 10, qos="BE"), job(2, 2, 2, 10, qos="Burstable"), job(3, 2, 3, 10, qos="LS")]
    delays = delays_by_name(jobs, strict=True)
    assert delays["j3"] == 47 and delays["j2"] == 58 and delays["j1"] == 69


def test_admission_plugs_in_and_jobs_that_fit_nowhere_are_rejected() -> None:
    calls: list[tuple[str, str, float]] = []

    class Quota:
        def admit(self, job: SimJob, now: float) -> str | None:
            return "QuotaExceeded" if job.name == "j1" and now < 30 else None

        def started(self, job: SimJob, assignments: list[Assignment], now: float) -> None:
            calls.append(("started", job.name, now))

        def finished(self, job: SimJob, now: float) -> None:
            calls.append(("finished", job.name, now))

    jobs = [job(0, 1, 0, 30), job(1, 1, 1, 5), job(2, 4, 2, 5), job(3, 1, 3, 1)]
    result = replay([node("n", 2)], jobs, policy_named("best-fit"), strict=False, admission=Quota())
    assert result.jobs_rejected == 1 and result.jobs_submitted == 4 and result.jobs_completed == 3
    assert ("started", "j1", 30) in calls and ("started", "j3", 3) in calls
    assert ("finished", "j1", 35) in calls


def test_fill_run_measures_unallocated_capacity_when_demand_equals_capacity() -> None:
    # three 0.6-GPU tasks per 2-GPU node: two fit (one per device), the third does not fit anywhere
    nodes = [node("a", 2), node("b", 2)]
    tasks = [Request(milli=600)]
    result = fill_run(nodes, tasks, policy_named("best-fit"))
    assert result.tasks_arrived == 7  # 7 x 600 >= 4000
    assert result.tasks_placed == 4 and result.unallocated_gpu_fraction == 0.4
    assert list(result.curve) == ["0.5", "0.7", "0.9", "1"]
    assert result.tasks_repeated == 6


def test_metrics() -> None:
    assert percentile([], 50) is None
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0 and percentile([1.0, 2.0, 3.0, 4.0], 99) == 4.0
    timeline = AllocationTimeline(1000)
    timeline.record(10, 500)
    timeline.record(20, 1000)
    timeline.record(30, 0)
    assert timeline.mean(0, 40) == (500 * 10 + 1000 * 10) / (40 * 1000)
    assert timeline.series(0, 40, 10) == [0.0, 0.5, 1.0, 0.0, 0.0]


def test_trace_slice_end_to_end() -> None:
    began = time.monotonic()
    pods = load_pods(TRACES / "openb_pod_list_default.csv")[:600]
    nodes = load_nodes(TRACES / "openb_node_list_gpu_node.csv")[::8]
    figures = {name: simulate(pods, nodes, name, samples=20) for name in ("fifo", "best-fit", "default")}
    for name, f in figures.items():
        assert 0 <= f["unallocated_gpu_fraction"] <= 1, name
        curve = list(f["fill"]["curve"].values())
        assert curve == sorted(curve, reverse=True)
        assert f["jobs_submitted"] == 600
        assert f["jobs_completed"] + f["jobs_still_queued"] + f["jobs_rejected"] == 600
        assert 0 <= f["gpu_allocation_ratio_mean"] <= 1
        assert len(f["gpu_allocation_ratio_series"]["values"]) == 20
        assert f["queue_delay_s"]["p50"] is not None and f["queue_delay_s"]["p99"] >= f["queue_delay_s"]["p50"] >= 0
    assert figures["default"]["unallocated_gpu_fraction"] <= figures["best-fit"]["unallocated_gpu_fraction"]
    squeezed = simulate(pods, nodes, "fifo", samples=5, compress=1e6)
    assert squeezed["gpu_allocation_ratio_mean"] > figures["fifo"]["gpu_allocation_ratio_mean"]
    assert time.monotonic() - began < 10


def test_compressing_arrivals_keeps_run_times() -> None:
    pods = load_pods(TRACES / "openb_pod_list_default.csv")[:5]
    jobs = jobs_from_trace(pods, compress=10)
    assert [j.arrival_s for j in jobs] == [p.creation_s / 10 for p in pods]
    assert [j.run_s for j in jobs] == [p.run_s for p in pods]
