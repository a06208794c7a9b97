"""Loader for the Alibaba GPU cluster trace v2023 ("openb", the FGD paper's trace).

Files (``data/traces/README.md`` has the provenance, columns and terms):

- pods: ``name, cpu_milli, memory_mib, num_gpu, gpu_milli, gpu_spec, qos, pod_phase,
  creation_time, deletion_time, scheduled_time``;
- nodes: ``sn, cpu_milli, memory_mib, gpu, model``.

Mapping to the placement layer:

- ``num_gpu`` x ``gpu_milli``: ``gpu_milli`` is the share of one GPU when ``num_gpu == 1``
  (e.g. 460 = 0.46 GPU); with more GPUs the pod takes whole devices. ``num_gpu == 0`` is a
  CPU-only pod: skipped unless ``include_cpu_only=True``.
- ``gpu_spec`` (``|``-separated models, empty = any) → ``allowed_models``.
- ``cpu_milli``/``memory_mib`` → host CPU (milli-cores) and host memory (MiB).
- **Device memory**: the trace has none per pod, so requests leave it unconstrained
  (``memory_mib=None``: a fraction pins its proportional part of the device). Devices get the
  memory of their model from :data:`DEVICE_MEMORY_MIB` — published datasheet sizes — and 0
  ("unknown", nothing can ask for it) for Alibaba's internal names G2 and G3, whose memory the
  trace does not publish.
- **Run time**: ``deletion_time - scheduled_time``. Pods never scheduled in the trace (no
  ``scheduled_time``, 897 of them, phase Pending) are kept: their intended run time is taken as
  ``deletion_time - creation_time`` (how long they existed).
- **QoS**: ``LS``, ``Guaranteed``, ``Burstable``, ``BE``. The trace has no user or team column.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tessera_scheduler.placement.model import Device, Node, Request

POD_COLUMNS = (
    "name",
    "cpu_milli",
    "memory_mib",
    "num_gpu",
    "gpu_milli",
    "gpu_spec",
    "qos",
    "pod_phase",
    "creation_time",
    "deletion_time",
    "scheduled_time",
)
NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
QOS_CLASSES = ("LS", "Guaranteed", "Burstable", "BE")

DEVICE_MEMORY_MIB = {
    "P100": 16 * 1024,  # Tesla P100 16 GB
    "T4": 16 * 1024,  # Tesla T4 16 GB
    "V100M16": 16 * 1024,  # Tesla V100 16 GB
    "V100M32": 32 * 1024,  # Tesla V100 32 GB
    "A10": 24 * 1024,  # A10 24 GB
}
"""Device memory (MiB) of the trace's GPU models with a published size; G2/G3 are unknown (0)."""


class TraceError(ValueError):
    """A trace file that is missing or does not have the expected shape (file and line in the message)."""


@dataclass(frozen=True, slots=True)
class TracePod:
    """One pod of the trace as a job: its request, QoS class, and times in seconds from trace start."""

    name: str
    request: Request
    qos: str
    phase: str
    creation_s: float
    run_s: float
    scheduled: bool
    """Whether the trace scheduled it (``False``: run time is deletion - creation)."""


def load_pods(path: str | Path, *, include_cpu_only: bool = False) -> list[TracePod]:
    """The pods of a pod-list CSV in file order (CPU-only pods skipped unless asked for)."""
    pods = []
    for line, row in _rows(path, POD_COLUMNS):
        where = f"{Path(path).name} line {line}"
        num_gpu = _int(row, "num_gpu", where, low=0)
        gpu_milli = _int(row, "gpu_milli", where, low=0, high=1000)
        if num_gpu == 0 and not include_cpu_only:
            continue
        if num_gpu == 1 and gpu_milli == 0:
            raise TraceError(f"{where}: gpu_milli is 0 for a pod with one GPU")
        qos = row["qos"].strip()
        if qos not in QOS_CLASSES:
            raise TraceError(f"{where}: unknown qos {qos!r} (expected one of {', '.join(QOS_CLASSES)})")
        creation = _float(row, "creation_time", where)
        deletion = _float(row, "deletion_time", where)
        scheduled_text = row["scheduled_time"].strip()
        start = _float(row, "scheduled_time", where) if scheduled_text else creation
        if deletion < start:
            raise TraceError(f"{where}: deletion_time {deletion:g} is before the pod started ({start:g})")
        models = frozenset(m.strip() for m in row["gpu_spec"].split("|") if m.strip())
        request = Request(
            gpus=num_gpu,
            milli=gpu_milli if num_gpu == 1 else 1000,
            allowed_models=models,
            cpu_milli=_int(row, "cpu_milli", where, low=0),
            host_memory_mib=_int(row, "memory_mib", where, low=0),
        )
        name = row["name"].strip() or f"pod-{line}"
        pods.append(
            TracePod(name, request, qos, row["pod_phase"].strip(), creation, deletion - start, bool(scheduled_text))
        )
    return pods


def load_nodes(path: str | Path, *, include_cpu_only: bool = False) -> list[Node]:
    """The nodes of a node-list CSV, with devices ``<sn>-gpu<i>`` of the row's model."""
    nodes = []
    for line, row in _rows(path, NODE_COLUMNS):
        where = f"{Path(path).name} line {line}"
        gpus = _int(row, "gpu", where, low=0)
        model = row["model"].strip()
        if gpus and not model:
            raise TraceError(f"{where}: a node with GPUs needs a model")
        if gpus == 0 and not include_cpu_only:
            continue
        name = row["sn"].strip()
        if not name:
            raise TraceError(f"{where}: empty sn")
        memory = DEVICE_MEMORY_MIB.get(model, 0)
        devices = tuple(Device(f"{name}-gpu{i}", model, memory) for i in range(gpus))
        nodes.append(
            Node(
                name,
                devices,
                cpu_milli=_int(row, "cpu_milli", where, low=0),
                memory_mib=_int(row, "memory_mib", where, low=0),
            )
        )
    return nodes


def _rows(path: str | Path, columns: tuple[str, ...]) -> Iterator[tuple[int, dict[str, str]]]:
    file = Path(path)
    if not file.is_file():
        raise TraceError(f"{file}: no such file")
    with file.open(newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        header = reader.fieldnames or []
        missing = [c for c in columns if c not in header]
        if missing:
            raise TraceError(f"{file.name}: missing column(s) {', '.join(missing)}")
        for row in reader:
            line = reader.line_num
            if None in row or any(row.get(c) is None for c in columns):
                raise TraceError(f"{file.name} line {line}: expected {len(header)} fields")
            yield line, row


def _int(row: dict[str, str], column: str, where: str, *, low: int | None = None, high: int | None = None) -> int:
    text = row[column].strip()
    try:
        value = int(text)
    except ValueError:
        raise TraceError(f"{where}: {column} {text!r} is not an integer") from None
    if (low is not None and value < low) or (high is not None and value > high):
        bounds = f"{low if low is not None else ''}..{high if high is not None else ''}"
        raise TraceError(f"{where}: {column} {value} is out of range {bounds}")
    return value


def _float(row: dict[str, str], column: str, where: str) -> float:
    text = row[column].strip()
    try:
        value = float(text)
    except ValueError:
        raise TraceError(f"{where}: {column} {text!r} is not a number") from None
    if value < 0 or value != value:
        raise TraceError(f"{where}: {column} {text!r} must be a number >= 0")
    return value
