"""The simulator: fill run, replay through ``SchedulerCore`` (FIFO, backfill, QoS, quotas, preemption), trace slice."""

from __future__ import annotations

import time
from pathlib import Path

from tessera_scheduler.domain.core import CoreConfig, SchedulerCore
from tessera_scheduler.placement import Device, Node, Request, policy_named
from tessera_scheduler.simulator.engine import node_events, replay, submission, tenancy_events
from tessera_scheduler.simulator.fill import fill_run
from tessera_scheduler.simulator.jobs import SimJob, jobs_from_trace
from tessera_scheduler.simulator.metrics import AllocationTimeline, percentile
from tessera_scheduler.simulator.run import simulate
from tessera_scheduler.simulator.trace import load_nodes, load_pods
from tests.scheduler.clusters import node

TRACES = Path(__file__).resolve().parents[2] / "data" / "traces"


def job(seq: int, gpus: int, arrival: float, run: float, qos: str = "LS", milli: int = 1000) -> SimJob:
    return SimJob(seq, f"j{seq}", (Request(gpus=gpus, milli=milli),), qos, arrival, run)


def delays(jobs: list[SimJob], strict: bool, nodes: int = 1, placement: str = "first-fit") -> dict[str, float]:
    """Queueing delay of each placed job (first placement - arrival), by name."""
    cluster = [node(f"n{i}", 2) for i in range(nodes)]
    result = replay(cluster, jobs, CoreConfig(placement=placement), strict=strict)
    return {j.name: result.first_placed[j.seq] - j.arrival_s for j in jobs if j.seq in result.first_placed}


def test_fifo_blocks_behind_the_head_and_backfill_does_not() -> None:
    jobs = [job(0, 1, 0, 100), job(1, 2, 1, 10), job(2, 1, 2, 10)]
    assert delays(jobs, strict=True) == {"j0": 0, "j1": 99, "j2": 108}  # j2 waits until j1 (placed at 100) ends
    assert delays(jobs, strict=False) == {"j0": 0, "j1": 99, "j2": 0}  # the core backfills


def test_qos_priority_decides_who_gets_freed_capacity() -> None:
    jobs = [job(0, 2, 0, 50, qos="Guaranteed"), job(1, 2, 1, 10, qos="BE"), job(2, 2, 2, 10, qos="Burstable")]
    jobs.append(job(3, 2, 3, 10))
    # the core ranks tenants by dominant share (qos-Guaranteed has used the most), then priority
    assert delays(jobs, strict=False) == {"j0": 0, "j3": 47, "j2": 58, "j1": 69}
    # strict FIFO: j1 was handed to the core while it was the only one waiting; the rest by QoS rank
    assert delays(jobs, strict=True) == {"j0": 0, "j1": 49, "j3": 57, "j2": 68}


def test_the_replay_goes_through_the_core_and_quotas_bring_reclaim() -> None:
    # two BE jobs fill the node at 0 (one on quota borrowed from LS); an LS job within its share arrives at 400
    jobs = [job(0, 1, 0, 1000, qos="BE"), job(1, 1, 0, 1000, qos="BE"), job(2, 1, 400, 2000)]
    open_ = replay([node("n", 2)], jobs, CoreConfig(placement="fgd"))
    assert open_.preemptions == 0 and open_.first_placed == {0: 0, 1: 0, 2: 1000}
    shared = replay([node("n", 2)], jobs, CoreConfig(placement="fgd"), quotas=True)
    assert shared.preemptions == 1 and shared.first_placed[2] == 400  # BE's borrowed GPU is reclaimed
    assert shared.jobs_completed == 3 and shared.cycles > 0 and shared.first_placed[0] == shared.first_placed[1] == 0
    figures = shared.as_dict()
    delay = figures["queue_delay_s"]
    assert isinstance(delay, dict) and delay["by_tenant"] == {
        "qos-LS": {"jobs": 1, "p50": 0.0, "p99": 0.0},
        "qos-BE": {"jobs": 2, "p50": 0.0, "p99": 0.0},
    }
    # the preempted BE job keeps its first placement (delay 0) and runs again in full once placed
    young = replay([node("n", 2)], jobs, CoreConfig(placement="fgd", min_runtime_s=600), quotas=True)
    assert young.preemptions == 0 and young.first_placed[2] == 1000  # victims too young: LS waits


def test_setup_events_and_submissions_follow_the_trace_mapping() -> None:
    jobs = [job(0, 1, 0, 100, qos="BE", milli=300), job(1, 1, 0, 30)]
    nodes = [node("a", 2), Node("bad name.x", (Device("u0", "G2", 0),), 8000, 8192)]
    setup = tenancy_events(jobs, nodes, quotas=True)
    quota = {e.tenant: {g.gpu_model: g.nominal_milli for g in e.gpus} for e in setup if hasattr(e, "tenant")}
    assert quota == {"qos-LS": {"A100": 1000, "G2": 500}, "qos-BE": {"A100": 1000, "G2": 500}}  # by milli x run s
    registered = node_events(nodes)
    assert [e.node for e in registered] == ["a", "bad_name_x"] and registered[1].devices[0].memory_mib == 0
    submitted = submission(jobs[0])
    assert (submitted.tenant, submitted.priority_class, submitted.preemptible) == ("qos-BE", "BE", True)
    assert (submitted.worker.gpus, submitted.worker.milli) == (1, 300)
    # a model whose device memory the trace does not give still takes jobs that accept any model
    result = replay(nodes[1:], jobs, CoreConfig())
    assert result.jobs_completed == 2 and result.jobs_rejected == 0


def test_jobs_that_fit_nowhere_are_rejected_and_do_not_block_fifo() -> None:
    jobs = [job(0, 1, 0, 30), job(1, 4, 1, 5), job(2, 1, 2, 1)]
    result = replay([node("n", 2)], jobs, CoreConfig(placement="first-fit"), strict=True)
    assert result.jobs_rejected == 1 and result.jobs_submitted == 3 and result.jobs_completed == 2
    assert result.first_placed == {0: 0, 2: 2} and result.jobs_still_queued == 0
    core = SchedulerCore()
    for event in [*tenancy_events(jobs, [node("n", 2)]), *node_events([node("n", 2)])]:
        assert core.apply(event, 0.0)


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
        assert f["engine"] == "SchedulerCore" and f["scheduling_cycles"] > 0
        assert 0 <= f["gpu_allocation_ratio_mean"] <= 1
        assert len(f["gpu_allocation_ratio_series"]["values"]) == 20
        assert f["queue_delay_s"]["p50"] is not None and f["queue_delay_s"]["p99"] >= f["queue_delay_s"]["p50"] >= 0
    assert figures["default"]["unallocated_gpu_fraction"] <= figures["best-fit"]["unallocated_gpu_fraction"]
    squeezed = simulate(pods, nodes, "fifo", samples=5, compress=1e6)
    assert squeezed["gpu_allocation_ratio_mean"] > figures["fifo"]["gpu_allocation_ratio_mean"]
    assert time.monotonic() - began < 30


def test_replay_is_deterministic() -> None:
    pods = load_pods(TRACES / "openb_pod_list_default.csv")[:400]
    nodes = load_nodes(TRACES / "openb_node_list_gpu_node.csv")[::32]
    runs = [simulate(pods, nodes, "default", samples=10, compress=1e6, quotas=True) for _ in range(2)]
    for run in runs:
        del run["wall_s"]
    assert runs[0] == runs[1]
    assert runs[0]["queue_delay_s"]["p99"] > 0  # squeezed arrivals on a small cluster queue
    assert runs[0]["preemptions"] > 0  # and classes over their quota share are reclaimed


def test_compressing_arrivals_keeps_run_times() -> None:
    pods = load_pods(TRACES / "openb_pod_list_default.csv")[:5]
    jobs = jobs_from_trace(pods, compress=10)
    assert [j.arrival_s for j in jobs] == [p.creation_s / 10 for p in pods]
    assert [j.run_s for j in jobs] == [p.run_s for p in pods]
