"""The placement benchmark's JSON, on a tiny cluster, and FGD's learned workload."""

from __future__ import annotations

import json

from tessera_bench.simulate import BENCH_POLICIES, main, run_placement
from tessera_scheduler.placement import ClusterState, Fgd, Request, WorkloadDistribution
from tests.scheduler.clusters import node


def test_placement_benchmark_prints_its_figures(capsys: object) -> None:
    result = run_placement(nodes=20, gpus_per_node=4, decisions=200)
    assert result["nodes"] == 20 and set(result["policies"]) == set(BENCH_POLICIES)
    for figures in result["policies"].values():
        assert figures["decisions"] == 200 and figures["decisions_per_s"] > 0 and figures["place_only_per_s"] > 0
    assert main(["placement", "--nodes", "10", "--decisions", "50", "--policies", "best-fit", "--json"]) == 0
    out = capsys.readouterr().out  # type: ignore[attr-defined]
    assert list(json.loads(out)["policies"]) == ["best-fit"]


def test_fgd_learns_the_workload_it_observes() -> None:
    policy = Fgd(refresh_every=4)
    versions = []
    for _ in range(12):
        policy.observe(Request(milli=500, cpu_milli=1000))
        versions.append(policy.version)
    assert policy.distribution.total == 12 and len(policy.distribution) == 1
    assert versions == sorted(versions) and versions[-1] > versions[0]
    policy.observe(Request(gpus=0))  # CPU-only: not part of the GPU workload
    policy.observe(Request(mig_profile="1g.10gb"))
    assert policy.distribution.total == 12
    fixed = Fgd(WorkloadDistribution.of([Request(gpus=2)]))
    fixed.observe(Request(milli=100))
    assert fixed.distribution.total == 1


def test_fgd_keeps_fractions_off_empty_devices_when_a_fragment_fits() -> None:
    # a 0.5-GPU task on a device with 0.5 free leaves no fragment; on an empty device it would
    # leave 0.5 that whole-GPU tasks cannot use
    state = ClusterState([node("a", 2), node("b", 2)])
    policy = Fgd(WorkloadDistribution.of([Request(milli=500)] * 5 + [Request(gpus=1)] * 5))
    first = state.place(Request(milli=500), policy)
    assert first is not None
    state.allocate(first)
    second = state.place(Request(milli=500), policy)
    assert second is not None and second.devices[0].uuid == first.devices[0].uuid


def test_fgd_re_reads_a_learned_workload_only_when_it_drifts() -> None:
    policy = Fgd(refresh_every=10, drift=0.05)
    for _ in range(200):
        policy.observe(Request(milli=500, cpu_milli=1000))
    settled = policy.version
    for _ in range(200):
        policy.observe(Request(milli=500, cpu_milli=1000))
    assert policy.version == settled, "a stationary workload keeps its cached bounds"
    for _ in range(100):
        policy.observe(Request(gpus=2, cpu_milli=8000))
    assert policy.version > settled, "a new kind of task changes the workload"
