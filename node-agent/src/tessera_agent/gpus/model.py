"""What the node agent knows about its GPUs: an immutable inventory, whatever its source.

Units: device memory in MiB (2**20 bytes). A :class:`GpuSource` (NVML on a real host,
:class:`~tessera_agent.gpus.simulated.SimulatedSource` in tests and demos) produces an
:class:`Inventory`; :meth:`Inventory.to_devices` turns it into the ``devices`` of
:class:`~tessera_contracts.events.scheduler.NodeRegistered`.

Values NVML could not report (a call the device or driver does not support) are recorded as
:data:`UNKNOWN` (strings) or ``None`` (numbers), never guessed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal, Protocol

from tessera_contracts.events.scheduler import DeviceInfo, MigSlotInfo

UNKNOWN = "unknown"
"""What a text field holds when its NVML query is not supported on this device or driver."""

APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68, 109})
"""XID errors caused by a user's application, not the device (graphics engine exception, MMU fault,
GPU stopped processing, preemptive cleanup, video decoder exception, context switch timeout): they do
not make a device unhealthy. Same list as the NVIDIA Kubernetes device plugin; meanings from NVIDIA's
"XID Errors" documentation."""

HealthStatus = Literal["healthy", "unhealthy", "unknown"]

_MIG_PROFILE = re.compile(r"^\d+g\.\d+gb(\+me)?$")


@dataclass(frozen=True, slots=True)
class Health:
    """The health facts of one device, and the verdict derived from them.

    Attributes:
        ecc_uncorrected: uncorrectable ECC memory errors since the driver loaded (NVML
            ``nvmlDeviceGetTotalEccErrors``, ``NVML_MEMORY_ERROR_TYPE_UNCORRECTED``,
            ``NVML_VOLATILE_ECC``); ``None`` when the device has no ECC or the query is not supported.
        xid_errors: XID error codes seen on the device (NVML ``nvmlEventTypeXidCriticalError``
            events); codes in :data:`APPLICATION_XIDS` are kept but do not count against the device.
        other: further reasons the device is unusable (a lost device, an operator's or a test's mark).
    """

    ecc_uncorrected: int | None = None
    xid_errors: tuple[int, ...] = ()
    other: tuple[str, ...] = ()

    @property
    def reasons(self) -> tuple[str, ...]:
        """Why the device is unhealthy, one human-readable line each (empty when it is healthy)."""
        reasons: list[str] = []
        if self.ecc_uncorrected:
            reasons.append(f"{self.ecc_uncorrected} uncorrectable ECC error(s) since the driver loaded")
        reasons.extend(f"XID {xid}" for xid in self.xid_errors if xid not in APPLICATION_XIDS)
        reasons.extend(self.other)
        return tuple(reasons)

    @property
    def healthy(self) -> bool:
        """Whether the device may be offered to the scheduler (unknown facts do not count against it)."""
        return not self.reasons

    @property
    def status(self) -> HealthStatus:
        """``unhealthy`` with any reason; ``unknown`` when ECC could not be read; else ``healthy``."""
        if not self.healthy:
            return "unhealthy"
        return "unknown" if self.ecc_uncorrected is None else "healthy"


@dataclass(frozen=True, slots=True)
class GpuInfo:
    """One physical GPU as discovered.

    Attributes:
        index: NVML device index (``nvmlDeviceGetHandleByIndex``), 0-based.
        uuid: NVML UUID (``nvmlDeviceGetUUID``), e.g. ``GPU-5f3e...``; unique platform-wide.
        name: the product name (``nvmlDeviceGetName``), e.g. ``NVIDIA H100 80GB HBM3``.
        model: the short model the scheduler matches ``gpu_models`` against, e.g. ``H100``
            (see :func:`short_model`).
        memory_mib: total device memory in MiB (``nvmlDeviceGetMemoryInfo().total`` / 2**20).
        mig_enabled: whether MIG mode is currently on (``nvmlDeviceGetMigMode``); ``False`` for
            devices without MIG support.
        mig: the MIG instances present, counted by profile (e.g. two ``3g.40gb``), sorted by profile.
        health: the device's health facts and verdict.

    Raises:
        ValueError: on construction, for negative memory, an empty UUID, a malformed MIG profile,
            or MIG instances on a device whose MIG mode is off.
    """

    index: int
    uuid: str
    name: str
    model: str
    memory_mib: int
    mig_enabled: bool = False
    mig: tuple[MigSlotInfo, ...] = ()
    health: Health = Health()

    def __post_init__(self) -> None:
        if not self.uuid:
            raise ValueError(f"GPU {self.index}: empty UUID")
        if self.memory_mib < 0:
            raise ValueError(f"GPU {self.uuid}: memory_mib must be >= 0, not {self.memory_mib}")
        if self.mig and not self.mig_enabled:
            raise ValueError(f"GPU {self.uuid}: MIG instances listed but MIG mode is off")
        for slot in self.mig:
            if not _MIG_PROFILE.match(slot.profile) or slot.count < 1:
                raise ValueError(f"GPU {self.uuid}: bad MIG slot {slot.profile!r} x {slot.count}")

    def to_device(self) -> DeviceInfo:
        """The GPU as the scheduler's :class:`~tessera_contracts.events.scheduler.DeviceInfo`."""
        return DeviceInfo(uuid=self.uuid, model=self.model, memory_mib=self.memory_mib, mig=self.mig)


@dataclass(frozen=True, slots=True)
class Inventory:
    """Every GPU of one host, with the driver versions, at one moment.

    Attributes:
        gpus: the devices, in NVML index order.
        driver_version: the kernel driver's version (``nvmlSystemGetDriverVersion``), e.g. ``550.54.15``.
        cuda_driver_version: the newest CUDA version the driver supports
            (``nvmlSystemGetCudaDriverVersion``), e.g. ``12.4``.
    """

    gpus: tuple[GpuInfo, ...] = ()
    driver_version: str = UNKNOWN
    cuda_driver_version: str = UNKNOWN

    @property
    def unhealthy(self) -> tuple[GpuInfo, ...]:
        """The devices with at least one health reason."""
        return tuple(gpu for gpu in self.gpus if not gpu.health.healthy)

    def to_devices(self, *, include_unhealthy: bool = False) -> tuple[DeviceInfo, ...]:
        """The ``devices`` of a ``NodeRegistered`` event: what the scheduler may place work on.

        Unhealthy devices are left out (unless ``include_unhealthy``), and so are devices in MIG
        mode without any MIG instance: neither can run work, and ``DeviceInfo`` carries no health.
        """
        return tuple(
            gpu.to_device()
            for gpu in self.gpus
            if (include_unhealthy or gpu.health.healthy) and not (gpu.mig_enabled and not gpu.mig)
        )


class GpuSource(Protocol):
    """Anything that can list a host's GPUs: NVML, or a simulation."""

    def inventory(self) -> Inventory:
        """The host's GPUs now.

        Raises:
            GpuDiscoveryError: when the devices cannot be listed at all (e.g. no NVIDIA driver).
        """
        ...


class GpuDiscoveryError(RuntimeError):
    """The host's GPUs could not be listed (NVML missing or failing); the message says why."""


_VENDOR_WORDS = ("NVIDIA", "Tesla", "GeForce", "Quadro")


def short_model(name: str) -> str:
    """The short model of an NVML product name, as the scheduler's ``gpu_models`` spell it.

    Vendor and family words are dropped and the first remaining word is cut at its first dash:
    ``NVIDIA H100 80GB HBM3`` -> ``H100``, ``NVIDIA A100-SXM4-40GB`` -> ``A100``,
    ``Tesla T4`` -> ``T4``, ``NVIDIA GeForce RTX 4090`` -> ``RTX 4090`` (``RTX`` and ``TITAN`` keep
    their next word). A name with nothing left is returned unchanged.
    """
    words = [w for w in name.split() if w not in _VENDOR_WORDS]
    if not words:
        return name
    if words[0] in ("RTX", "TITAN") and len(words) > 1:
        return f"{words[0]} {words[1].split('-')[0]}"
    return words[0].split("-")[0] or name
