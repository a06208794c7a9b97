"""The scheduler-core and Kueue-baseline benchmarks: their generators and JSON, on small inputs."""

from __future__ import annotations

import json

import pytest

from tessera_bench.kueue import kueue_scenario, run_core
from tessera_bench.scheduler import run_scheduler, scheduler_scenario
from tessera_cli.main import main as cli_main
from tessera_contracts.events.scheduler import JobSubmitted, NodeRegistered
from tessera_contracts.events.tenancy import QuotaSet


def test_scheduler_scenario_is_seeded_and_shaped_as_asked() -> None:
    a = scheduler_scenario(nodes=30, gpus_per_node=4, pending=400, tenants=12, seed=3)
    b = scheduler_scenario(nodes=30, gpus_per_node=4, pending=400, tenants=12, seed=3)
    c = scheduler_scenario(nodes=30, gpus_per_node=4, pending=400, tenants=12, seed=4)
    assert a.setup == b.setup and a.jobs == b.jobs
    assert a.jobs != c.jobs
    nodes = [e for e in a.setup if isinstance(e, NodeRegistered)]
    quotas = [e for e in a.setup if isinstance(e, QuotaSet)]
    assert len(nodes) == 30 and all(len(n.devices) == 4 for n in nodes)
    assert len(quotas) == 12 and len({q.cohort for q in quotas}) == 2
    assert any(g.borrowing_limit_milli is None for q in quotas for g in q.gpus)
    assert len(a.jobs) == 400 and len({j.job_id for j in a.jobs}) == 400
    milli = {j.worker.milli for j in a.jobs}
    assert {250, 500, 1000} <= milli, "fractional and whole GPUs"
    assert any(j.workers > 1 for j in a.jobs), "gangs"
    assert {j.worker.gpus for j in a.jobs} >= {1, 2, 4, 8}
    with pytest.raises(ValueError):
        scheduler_scenario(nodes=0, gpus_per_node=8, pending=1, tenants=1)


def test_scheduler_benchmark_json_is_sane_and_deterministic() -> None:
    first = run_scheduler(nodes=40, gpus_per_node=8, pending=600, tenants=6, seed=2)
    second = run_scheduler(nodes=40, gpus_per_node=8, pending=600, tenants=6, seed=2)
    for key in ("decisions", "cycles", "placed", "running", "queued", "preemptions", "decisions_by_type"):
        assert first[key] == second[key], key
    assert first["decisions_per_s"] > 0 and first["wall_s"] > 0 and first["peak_rss_mib"] > 0
    assert 0 < first["placed"] <= 600 and first["running"] + first["queued"] == 600
    assert first["decisions"] == sum(first["decisions_by_type"].values())
    assert first["config"]["nodes"] == 40 and first["config"]["placement"] == "fgd"


def test_bench_scheduler_command_prints_json(capsys: pytest.CaptureFixture[str]) -> None:
    code = cli_main(
        ["bench", "scheduler", "--nodes", "10", "--gpus-per-node", "4", "--pending", "50", "--tenants", "3", "--json"]
    )
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert out["benchmark"] == "scheduler" and out["config"]["pending"] == 50


def test_kueue_scenario_follows_the_baseline_config() -> None:
    scenario = kueue_scenario()
    quotas = [e for e in scenario.setup if isinstance(e, QuotaSet)]
    assert len(quotas) == 30 and len({q.cohort for q in quotas}) == 5
    assert {(g.nominal_milli, g.borrowing_limit_milli) for q in quotas for g in q.gpus} == {(20_000, 100_000)}
    assert len(scenario.jobs) == 15_000
    by_class: dict[str, int] = {}
    for job in scenario.jobs:
        by_class[job.priority_class] = by_class.get(job.priority_class, 0) + 1
    assert by_class == {"small": 350 * 30, "medium": 100 * 30, "large": 50 * 30}
    times = [scenario.submit_at[j.job_id] for j in scenario.jobs]
    assert times == sorted(times) and times[-1] == pytest.approx(60.0)
    large = next(j for j in scenario.jobs if j.priority_class == "large")
    assert isinstance(large, JobSubmitted) and large.workers * large.worker.gpus == 20 and large.priority == 200


def test_kueue_core_run_finishes_every_workload() -> None:
    first = run_core(cohorts=1, queues=3, fraction=0.1)
    assert first["workloads"] == 3 * (35 + 10 + 5)
    assert first["finished"] == first["workloads"]
    assert first["admitted"] == first["placed"] == first["workloads"] + first["preempted"]
    second = run_core(cohorts=1, queues=3, fraction=0.1)
    assert {k: v for k, v in first.items() if k not in ("wall_s", "peak_rss_mib")} == {
        k: v for k, v in second.items() if k not in ("wall_s", "peak_rss_mib")
    }
