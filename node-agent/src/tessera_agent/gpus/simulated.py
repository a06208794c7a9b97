"""Simulated GPUs with the same interface as NVML discovery, for tests, demos and trace replay.

A node is described by a spec string (``8xH100-80GB``, ``4xA100-40GB,2xT4-16GB``: count, model,
memory in GB taken as GiB) or by a row of the Alibaba GPU cluster trace v2023 node list
(``data/traces/openb_node_list_gpu_node.csv``: ``sn``, ``cpu_milli``, ``memory_mib``, ``gpu``,
``model``). Device ``i`` of node ``n`` has the UUID ``GPU-sim-<n>-<i>``, so a node simulates the
same devices on every start.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping

from tessera_agent.gpus.model import GpuInfo, Health, Inventory

SIMULATED_DRIVER = "simulated"
"""The driver and CUDA versions a simulated inventory reports."""

TRACE_MEMORY_MIB = {
    "P100": 16 * 1024,  # Tesla P100 16 GB
    "T4": 16 * 1024,  # Tesla T4 16 GB
    "V100M16": 16 * 1024,  # Tesla V100 16 GB
    "V100M32": 32 * 1024,  # Tesla V100 32 GB
    "A10": 24 * 1024,  # A10 24 GB
}
"""Device memory (MiB) of the Alibaba v2023 trace's models with a published size; others (G2, G3) get 0,
as in the scheduler's trace loader."""

MAX_GPUS_PER_NODE = 64
"""The most devices one simulated node may have (a sanity bound on specs)."""

_ITEM = re.compile(r"^(?P<count>\d+)x(?P<model>[A-Za-z0-9][A-Za-z0-9_.-]*?)-(?P<gb>\d+)GB$", re.IGNORECASE)
_NODE = re.compile(r"^[A-Za-z0-9_-]{1,128}$")


class SimulatedSource:
    """A :class:`~tessera_agent.gpus.model.GpuSource` over made-up devices whose health tests can change.

    Args:
        node: the node id (the ``NodeRegistered.node`` pattern: letters, digits, ``_``, ``-``).
        gpus: ``(model, memory_mib)`` per device, in index order.
        cpu_milli: the host's CPU in milli-cores (from a trace row; 0 if not given).
        memory_mib: the host's memory in MiB (from a trace row; 0 if not given).

    Raises:
        ValueError: for a malformed node id or a negative memory size.
    """

    def __init__(self, node: str, gpus: Iterable[tuple[str, int]], *, cpu_milli: int = 0, memory_mib: int = 0) -> None:
        if not _NODE.match(node):
            raise ValueError(f"node id {node!r} must be 1-128 letters, digits, '_' or '-'")
        self.node = node
        self.cpu_milli = cpu_milli
        self.memory_mib = memory_mib
        self._gpus = [
            GpuInfo(index=i, uuid=f"GPU-sim-{node}-{i}", name=model, model=model, memory_mib=mib)
            for i, (model, mib) in enumerate(gpus)
        ]

    @classmethod
    def from_spec(cls, node: str, spec: str) -> SimulatedSource:
        """Devices from a spec like ``8xH100-80GB`` or ``4xA100-40GB,2xT4-16GB`` (memory: GB -> GiB -> MiB).

        An empty spec is a node without GPUs.

        Raises:
            ValueError: for an item not of the form ``<count>x<model>-<memory>GB``, a count of 0, a
                memory of 0, or more than :data:`MAX_GPUS_PER_NODE` devices; the message names the item.
        """
        gpus: list[tuple[str, int]] = []
        for raw in spec.split(",") if spec.strip() else ():
            item = raw.strip()
            match = _ITEM.match(item)
            if match is None:
                raise ValueError(
                    f"GPU spec item {item!r} is not of the form '<count>x<model>-<memory>GB' (e.g. '8xH100-80GB')"
                )
            count, gb = int(match["count"]), int(match["gb"])
            if count < 1:
                raise ValueError(f"GPU spec item {item!r}: count must be at least 1")
            if gb < 1:
                raise ValueError(f"GPU spec item {item!r}: memory must be at least 1 GB")
            gpus.extend([(match["model"], gb * 1024)] * count)
        if len(gpus) > MAX_GPUS_PER_NODE:
            raise ValueError(f"GPU spec {spec!r}: {len(gpus)} devices, more than {MAX_GPUS_PER_NODE} per node")
        return cls(node, gpus)

    @classmethod
    def from_trace_row(cls, row: Mapping[str, str]) -> SimulatedSource:
        """A node of the Alibaba v2023 node list (a ``csv.DictReader`` row), memory per :data:`TRACE_MEMORY_MIB`.

        Raises:
            ValueError: for a missing column, a non-integer or negative number, or GPUs without a model.
        """
        try:
            node = row["sn"].strip()
            cpu_milli, memory_mib, count = (int(row[c]) for c in ("cpu_milli", "memory_mib", "gpu"))
            model = (row["model"] or "").strip()
        except KeyError as err:
            raise ValueError(f"trace node row lacks column {err}") from err
        except ValueError as err:
            raise ValueError(f"trace node row {row.get('sn')!r}: {err}") from err
        if min(cpu_milli, memory_mib, count) < 0:
            raise ValueError(f"trace node row {node!r}: negative cpu_milli, memory_mib or gpu")
        if count and not model:
            raise ValueError(f"trace node row {node!r}: {count} GPU(s) without a model")
        gpus = [(model, TRACE_MEMORY_MIB.get(model, 0))] * count
        return cls(node, gpus, cpu_milli=cpu_milli, memory_mib=memory_mib)

    def inventory(self) -> Inventory:
        """The simulated devices now, with the health marks set so far."""
        return Inventory(gpus=tuple(self._gpus), driver_version=SIMULATED_DRIVER, cuda_driver_version=SIMULATED_DRIVER)

    def mark_unhealthy(
        self, device: int | str, reason: str = "marked unhealthy", *, xid: int | None = None, ecc: int | None = None
    ) -> None:
        """Make a device unhealthy from now on: with a free-text ``reason``, an XID code, or ECC errors.

        Args:
            device: its index or UUID.
            reason: the line added to its health reasons (used when neither ``xid`` nor ``ecc`` is given).
            xid: an XID error code to record (see ``APPLICATION_XIDS`` for codes that do not count).
            ecc: a count of uncorrectable ECC errors to record.

        Raises:
            KeyError: no such device.
        """
        i = self._find(device)
        health = self._gpus[i].health
        if xid is not None:
            health = dataclasses.replace(health, xid_errors=(*health.xid_errors, xid))
        if ecc is not None:
            health = dataclasses.replace(health, ecc_uncorrected=ecc)
        if xid is None and ecc is None:
            health = dataclasses.replace(health, other=(*health.other, reason))
        self._gpus[i] = dataclasses.replace(self._gpus[i], health=health)

    def mark_healthy(self, device: int | str) -> None:
        """Clear every health mark of a device (index or UUID).

        Raises:
            KeyError: no such device.
        """
        i = self._find(device)
        self._gpus[i] = dataclasses.replace(self._gpus[i], health=Health())

    def _find(self, device: int | str) -> int:
        for i, gpu in enumerate(self._gpus):
            if device in (gpu.index, gpu.uuid):
                return i
        raise KeyError(f"node {self.node} has no GPU {device!r}")
