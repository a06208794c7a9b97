"""``tessera simulate``: JSON shape (replay through the core), the side-by-side table and one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tessera_cli.main import main

TRACES = Path(__file__).resolve().parents[2] / "data" / "traces"


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["simulate", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_compare_json_has_every_policy_and_figure(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "--compare", "--limit", "300", "--json", "--samples", "10")
    assert code == 0, err
    result = json.loads(out)
    assert list(result) == ["policies"]
    assert list(result["policies"]) == ["fifo", "best-fit", "default"]
    for figures in result["policies"].values():
        for key in ("unallocated_gpu_fraction", "gpu_allocation_ratio_mean", "jobs_completed", "preemptions"):
            assert isinstance(figures[key], int | float)
        assert figures["engine"] == "SchedulerCore" and figures["quotas"] == "unbounded"
        assert set(figures["queue_delay_s"]) >= {"p50", "p99", "by_qos", "by_tenant"}
        by_qos, by_tenant = figures["queue_delay_s"]["by_qos"], figures["queue_delay_s"]["by_tenant"]
        assert by_tenant == {f"qos-{qos}": value for qos, value in by_qos.items()}
        assert set(figures["fill"]["curve"]) == {"0.5", "0.7", "0.9", "1"}


def test_one_policy_by_name_with_explicit_files(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _err = run(
        capsys,
        "--trace",
        str(TRACES / "openb_pod_list_default.csv"),
        "--nodes",
        str(TRACES / "openb_node_list_gpu_node.csv"),
        "--policy",
        "best-fit",
        "--limit",
        "200",
        "--json",
    )
    assert code == 0
    assert list(json.loads(out)["policies"]) == ["best-fit"]
    code, out, _err = run(capsys, "--compare", "fifo", "default", "--limit", "200", "--quota", "--compress", "1e6")
    assert code == 0
    assert "unallocated GPU fraction (fill)" in out and "fifo" in out and "default" in out
    assert "preemptions" in out and "cohort" in out


def test_errors_are_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    bad = tmp_path / "pods.csv"
    bad.write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n"
        "p0,1000,100,one,0,,LS,Running,0,1,0\n"
    )
    cases = [
        (["--policy", "round-robin"], "tessera: error: unknown policy 'round-robin' (known: fifo, best-fit, default)"),
        (["--compare", "fifo", "nope"], "tessera: error: unknown policy 'nope'"),
        (["--trace", str(tmp_path / "missing.csv")], "tessera: error: "),
        (["--trace", str(bad)], "tessera: error: pods.csv line 2: num_gpu 'one' is not an integer"),
        (["--limit", "0"], "tessera: error: --limit must be at least 1"),
        (["--compress", "0"], "tessera: error: --compress must be > 0"),
        (["--nodes", str(bad)], "tessera: error: pods.csv: missing column(s) sn, gpu, model"),
    ]
    for args, message in cases:
        code, out, err = run(capsys, *args)
        assert code == 1 and out == ""
        assert err.count("\n") == 1 and err.startswith(message), err
