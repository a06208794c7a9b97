"""The Alibaba GPU v2023 trace loader, on the real copied CSVs and on malformed files."""

from __future__ import annotations

from pathlib import Path

import pytest

from tessera_scheduler.simulator.trace import TraceError, load_nodes, load_pods

TRACES = Path(__file__).resolve().parents[2] / "data" / "traces"
PODS = TRACES / "openb_pod_list_default.csv"
NODES = TRACES / "openb_node_list_gpu_node.csv"
POD_HEADER = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time"
)


def test_real_trace_counts() -> None:
    everything = load_pods(PODS, include_cpu_only=True)
    assert len(everything) == 8152
    gpu_pods = load_pods(PODS)
    assert len(gpu_pods) == 8152 - 1088
    assert sum(1 for p in everything if not p.scheduled) == 897
    fractional = [p for p in gpu_pods if p.request.milli < 1000]
    assert len(fractional) == 3078
    assert all(p.request.gpus == 1 for p in fractional)
    assert {p.qos for p in everything} == {"LS", "BE", "Burstable", "Guaranteed"}
    nodes = load_nodes(NODES)
    assert len(nodes) == 1213
    assert sum(n.gpus for n in nodes) == 6212
    assert {d.model for n in nodes for d in n.devices} == {"G2", "T4", "P100", "V100M16", "G3", "V100M32", "A10"}
    first = everything[0]
    assert first.request.cpu_milli == 12000 and first.request.host_memory_mib == 16384 and first.run_s == 12537496
    assert len(load_nodes(TRACES / "openb_node_list_all_node.csv", include_cpu_only=True)) == 1523


def write(tmp_path: Path, rows: list[str], header: str = POD_HEADER) -> Path:
    path = tmp_path / "pods.csv"
    path.write_text("\n".join([header, *rows]) + "\n")
    return path


GOOD = "p0,1000,2048,1,500,,LS,Running,0,100,10"


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ("p1,1000,2048,x,500,,LS,Running,0,100,10", "line 3: num_gpu 'x' is not an integer"),
        ("p1,1000,2048,1,1500,,LS,Running,0,100,10", "line 3: gpu_milli 1500 is out of range 0..1000"),
        ("p1,1000,2048,1,500,,XX,Running,0,100,10", "line 3: unknown qos 'XX'"),
        ("p1,1000,2048,1,500,,LS,Running,0,5,10", "line 3: deletion_time 5 is before the pod started (10)"),
        ("p1,1000,2048,1,500,,LS,Running,zero,100,10", "line 3: creation_time 'zero' is not a number"),
        ("p1,1000,2048,1,0,,LS,Running,0,100,10", "line 3: gpu_milli is 0 for a pod with one GPU"),
        ("p1,1000,2048,1,500,,LS", "line 3: expected 11 fields"),
        ("p1,-5,2048,1,500,,LS,Running,0,100,10", "line 3: cpu_milli -5 is out of range 0.."),
    ],
)
def test_malformed_pod_rows_are_clear_errors(tmp_path: Path, row: str, message: str) -> None:
    with pytest.raises(TraceError) as caught:
        load_pods(write(tmp_path, [GOOD, row]))
    assert str(caught.value).startswith(f"pods.csv {message}")


def test_missing_file_and_columns(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="no such file"):
        load_pods(tmp_path / "nope.csv")
    with pytest.raises(TraceError, match="missing column"):
        load_pods(write(tmp_path, [GOOD], header="name,cpu_milli"))
    nodes = tmp_path / "nodes.csv"
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\nn0,1000,1000,2,\n")
    with pytest.raises(TraceError, match="line 2: a node with GPUs needs a model"):
        load_nodes(nodes)


def test_mapping_of_a_pod(tmp_path: Path) -> None:
    rows = [
        GOOD,
        "p1,2000,4096,4,1000,V100M16|V100M32,BE,Pending,50,80,",
        "p2,500,512,0,0,,Burstable,Running,1,2,1",
    ]
    pods = load_pods(write(tmp_path, rows))
    assert [p.name for p in pods] == ["p0", "p1"]
    fraction, whole = pods
    assert (fraction.request.gpus, fraction.request.milli, fraction.run_s) == (1, 500, 90)
    assert fraction.request.memory_mib is None
    assert whole.request.gpus == 4 and whole.request.milli == 1000
    assert whole.request.allowed_models == frozenset({"V100M16", "V100M32"})
    assert not whole.scheduled and whole.run_s == 30  # never scheduled: deletion - creation
    assert len(load_pods(write(tmp_path, rows), include_cpu_only=True)) == 3
