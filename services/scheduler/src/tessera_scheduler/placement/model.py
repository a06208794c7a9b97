"""The placement layer's vocabulary: nodes, devices, requests and assignments.

Units (ARCHITECTURE.md §4): a GPU is 1000 milli-GPU; device and host memory are in MiB; host CPU
is in milli-cores. Every class here is immutable and validated on construction, so a malformed
request or node never reaches :class:`~tessera_scheduler.placement.state.ClusterState`.

What changes over time (how much of a device is allocated, which MIG slices are used, how much
host CPU is left) is not stored here but in the cluster state; :class:`DeviceUsage` and
:class:`NodeUsage` are read-only views of it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property

GPU_MILLI = 1000
"""One whole GPU, in milli-GPU."""

Labels = frozenset[tuple[str, str]]
"""Node labels as a frozen set of ``(key, value)`` pairs (hashable, order-free)."""


class PlacementError(ValueError):
    """A request, node or assignment that would break an invariant of the cluster state."""


def labels_of(labels: Mapping[str, str] | Iterable[tuple[str, str]] | None) -> Labels:
    """``{"zone": "a"}`` (or pairs) as :data:`Labels`."""
    if labels is None:
        return frozenset()
    items = labels.items() if isinstance(labels, Mapping) else labels
    return frozenset((str(k), str(v)) for k, v in items)


_MIG_PROFILE = re.compile(r"^(\d+)g\.(\d+)gb$")


@dataclass(frozen=True, slots=True)
class MigSlot:
    """The MIG instances of one profile that a device is partitioned into.

    ``profile`` is NVIDIA's name (``"1g.10gb"``: one compute slice, 10 GB); ``count`` instances
    of it exist on the device; each counts as ``milli`` milli-GPU and ``memory_mib`` MiB of the
    device (what a placed event and billing see). :meth:`of` derives both from the name.
    """

    profile: str
    count: int
    milli: int
    memory_mib: int

    def __post_init__(self) -> None:
        if not self.profile:
            raise PlacementError("a MIG slot needs a profile name")
        if self.count < 1:
            raise PlacementError(f"MIG slot {self.profile}: count must be at least 1, not {self.count}")
        if not 1 <= self.milli <= GPU_MILLI:
            raise PlacementError(f"MIG slot {self.profile}: milli must be 1..1000, not {self.milli}")
        if self.memory_mib < 0:
            raise PlacementError(f"MIG slot {self.profile}: memory_mib must be >= 0")

    @classmethod
    def of(cls, profile: str, count: int, compute_slices: int = 7) -> MigSlot:
        """A slot from its profile name: ``Ng.Mgb`` is N of ``compute_slices`` and M GiB.

        NVIDIA A100/H100 devices have 7 compute slices (NVIDIA MIG user guide, "Supported
        profiles"); ``1g.10gb`` is then 142 milli-GPU and 10,240 MiB.
        """
        match = _MIG_PROFILE.match(profile)
        if match is None:
            raise PlacementError(f"MIG profile {profile!r} is not of the form '<n>g.<m>gb'")
        slices, gib = int(match.group(1)), int(match.group(2))
        return cls(profile, count, GPU_MILLI * slices // compute_slices, gib * 1024)


@dataclass(frozen=True, slots=True)
class Device:
    """One GPU of a node, as the node agent reports it.

    ``memory_mib`` is the device's memory (0 when unknown: nothing can then ask for device memory
    on it, and shares of it carry 0 MiB). A device with ``mig`` slots is in MIG mode: it serves
    only requests for one of its MIG profiles, never whole or fractional requests.
    """

    uuid: str
    model: str
    memory_mib: int
    mig: tuple[MigSlot, ...] = ()

    def __post_init__(self) -> None:
        if not self.uuid:
            raise PlacementError("a device needs a uuid")
        if not self.model:
            raise PlacementError(f"device {self.uuid}: a device needs a model")
        if self.memory_mib < 0:
            raise PlacementError(f"device {self.uuid}: memory_mib must be >= 0")
        if self.mig:
            profiles = [slot.profile for slot in self.mig]
            if len(set(profiles)) != len(profiles):
                raise PlacementError(f"device {self.uuid}: a MIG profile appears twice")
            if sum(s.count * s.milli for s in self.mig) > GPU_MILLI:
                raise PlacementError(f"device {self.uuid}: MIG slots add up to more than 1000 milli")
            if sum(s.count * s.memory_mib for s in self.mig) > self.memory_mib:
                raise PlacementError(f"device {self.uuid}: MIG slots add up to more than the device's memory")


@dataclass(frozen=True, slots=True)
class Node:
    """A host with GPUs: where it is (cluster, region, labels) and what it has.

    ``cpu_milli`` and ``memory_mib`` are the host's allocatable CPU (milli-cores) and memory (MiB).
    ``healthy`` is the state the node starts in; later changes go through
    :meth:`ClusterState.set_healthy`.
    """

    name: str
    devices: tuple[Device, ...]
    cpu_milli: int
    memory_mib: int
    cluster: str = "default"
    region: str = "default"
    labels: Labels = field(default_factory=frozenset)
    healthy: bool = True

    def __post_init__(self) -> None:
        if not self.name:
            raise PlacementError("a node needs a name")
        if self.cpu_milli < 0 or self.memory_mib < 0:
            raise PlacementError(f"node {self.name}: cpu_milli and memory_mib must be >= 0")
        uuids = [d.uuid for d in self.devices]
        if len(set(uuids)) != len(uuids):
            raise PlacementError(f"node {self.name}: a device uuid appears twice")

    @property
    def gpus(self) -> int:
        """Number of devices."""
        return len(self.devices)


@dataclass(frozen=True, slots=True)
class Selector:
    """Where a request may run (Kubernetes ``nodeSelector`` semantics: every label must match).

    ``None`` for cluster or region means any; ``labels`` must be a subset of the node's labels.
    """

    cluster: str | None = None
    region: str | None = None
    labels: Labels = field(default_factory=frozenset)

    def matches(self, node: Node) -> bool:
        """Whether ``node`` satisfies this selector."""
        return (
            (self.cluster is None or self.cluster == node.cluster)
            and (self.region is None or self.region == node.region)
            and self.labels <= node.labels
        )


ANY_NODE = Selector()


@dataclass(frozen=True, slots=True)
class Request:
    """What one worker of a job needs.

    - ``gpus`` devices, each with ``milli`` milli-GPU (1..1000). ``milli == 1000`` means whole
      devices, which are never shared; a fraction (``milli < 1000``) is only allowed with
      ``gpus == 1`` (a fractional multi-GPU job is not a thing the agent can enforce).
      ``gpus == 0`` is a CPU-only worker.
    - ``memory_mib``: device memory per GPU. For a fraction it is what the share pins (the
      device's free MiB must cover it); when ``None`` the share gets the proportional part of the
      device's memory, ``floor(memory x milli / 1000)`` — Run:ai's gpu-fraction semantics. For
      whole devices it is a minimum device size (the job gets the whole memory).
    - ``allowed_models``: GPU models it may use; empty means any.
    - ``selector``: cluster, region and labels of acceptable nodes.
    - ``mig_profile``: one MIG instance of this profile (``gpus`` must be 1, ``milli`` 1000 and
      ``memory_mib`` unset: the slice defines them). A job that needs several slices is a gang.
    - ``cpu_milli``, ``host_memory_mib``: host resources (milli-cores, MiB).
    """

    gpus: int = 1
    milli: int = GPU_MILLI
    memory_mib: int | None = None
    allowed_models: frozenset[str] = frozenset()
    selector: Selector = ANY_NODE
    mig_profile: str | None = None
    cpu_milli: int = 0
    host_memory_mib: int = 0

    def __post_init__(self) -> None:
        if self.gpus < 0:
            raise PlacementError(f"gpus must be >= 0, not {self.gpus}")
        if not 1 <= self.milli <= GPU_MILLI:
            raise PlacementError(f"milli must be 1..1000, not {self.milli}")
        if self.milli < GPU_MILLI and self.gpus != 1:
            raise PlacementError(f"a fraction of a GPU (milli={self.milli}) needs gpus == 1, not {self.gpus}")
        if self.memory_mib is not None and self.memory_mib < 1:
            raise PlacementError(f"memory_mib must be >= 1 when given, not {self.memory_mib}")
        if self.gpus == 0 and self.memory_mib is not None:
            raise PlacementError("a CPU-only request (gpus == 0) cannot ask for device memory")
        if self.mig_profile is not None and (self.gpus != 1 or self.milli != GPU_MILLI or self.memory_mib is not None):
            raise PlacementError("a MIG request takes one slice: gpus == 1, milli 1000 and no memory_mib")
        if self.cpu_milli < 0 or self.host_memory_mib < 0:
            raise PlacementError("cpu_milli and host_memory_mib must be >= 0")

    @property
    def whole(self) -> bool:
        """True when the request takes whole, unshared devices."""
        return self.gpus > 0 and self.milli == GPU_MILLI and self.mig_profile is None

    @property
    def gpu_milli_total(self) -> int:
        """The request's GPU demand in milli-GPU (``gpus x milli``; a MIG slice counts 0 here)."""
        return 0 if self.mig_profile is not None else self.gpus * self.milli


@dataclass(frozen=True, slots=True)
class DeviceShare:
    """The part of one device an assignment holds: ``milli`` milli-GPU and ``memory_mib`` MiB.

    ``milli == 1000`` (without a MIG profile) is a whole device. ``mig_profile`` is set for a MIG
    instance.
    """

    uuid: str
    milli: int
    memory_mib: int
    mig_profile: str | None = None

    @property
    def whole(self) -> bool:
        """True for a whole, unshared device."""
        return self.milli == GPU_MILLI and self.mig_profile is None


@dataclass(frozen=True)
class Assignment:
    """Where one worker runs: a node, its device shares, and the host resources it holds.

    This is exactly what a ``placed`` event carries; allocating and releasing the same value
    leaves the cluster state as it was.
    """

    node: str
    devices: tuple[DeviceShare, ...]
    cpu_milli: int = 0
    host_memory_mib: int = 0

    @cached_property
    def _hash(self) -> int:
        return hash((self.node, self.devices, self.cpu_milli, self.host_memory_mib))

    def __hash__(self) -> int:
        # Live allocations are dict keys: hashing the nested tuples once pays for itself.
        return self._hash

    @property
    def gpu_milli(self) -> int:
        """Milli-GPU held on all devices together."""
        return sum(share.milli for share in self.devices)


@dataclass(frozen=True, slots=True)
class DeviceUsage:
    """A device as the cluster state sees it now (allocated milli and MiB, whole, MIG slices)."""

    device: Device
    allocated_milli: int
    allocated_mib: int
    whole: bool
    mig_used: tuple[tuple[str, int, int], ...]
    """``(profile, used, free)`` per MIG slot."""

    @property
    def free_milli(self) -> int:
        """Milli-GPU not allocated."""
        return GPU_MILLI - self.allocated_milli

    @property
    def free_mib(self) -> int:
        """Device memory not allocated, in MiB."""
        return self.device.memory_mib - self.allocated_mib


@dataclass(frozen=True, slots=True)
class NodeUsage:
    """A node as the cluster state sees it now."""

    node: Node
    healthy: bool
    cpu_free: int
    memory_free_mib: int
    devices: tuple[DeviceUsage, ...]
