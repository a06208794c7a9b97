"""GPU discovery through NVML, the NVIDIA Management Library (package ``nvidia-ml-py``, module ``pynvml``).

Calls used (NVML API reference, "Device Queries", "System Queries", "Multi Instance GPU
Management"): ``nvmlInit`` / ``nvmlShutdown``, ``nvmlDeviceGetCount``, ``nvmlDeviceGetHandleByIndex``,
``nvmlDeviceGetUUID``, ``nvmlDeviceGetName``, ``nvmlDeviceGetMemoryInfo``, ``nvmlDeviceGetMigMode``,
``nvmlDeviceGetMaxMigDeviceCount``, ``nvmlDeviceGetMigDeviceHandleByIndex``, ``nvmlDeviceGetAttributes``,
``nvmlDeviceGetTotalEccErrors``, ``nvmlSystemGetDriverVersion``, ``nvmlSystemGetCudaDriverVersion``.

The UUID, name and memory of every device are required: if NVML cannot give them, discovery fails
with :class:`~tessera_agent.gpus.model.GpuDiscoveryError`. Every other query is optional: when the
device or driver does not support it (``NVMLError_NotSupported``, ``NVMLError_FunctionNotFound``,
``NVMLError_NoPermission``) the value is recorded as unknown.
"""

from __future__ import annotations

import contextlib
import importlib
import math
import re
from collections import Counter
from collections.abc import Callable
from typing import Any, TypeVar

from tessera_agent.gpus.model import UNKNOWN, GpuDiscoveryError, GpuInfo, Health, Inventory, short_model
from tessera_contracts.events.scheduler import MigSlotInfo

T = TypeVar("T")

_MIG_NAME = re.compile(r"(?:\d+c\.)?(\d+g\.\d+gb(?:\+me)?)")
_OPTIONAL_ERRORS = ("NVMLError_NotSupported", "NVMLError_FunctionNotFound", "NVMLError_NoPermission")


class NvmlSource:
    """The host's GPUs as NVML reports them.

    Args:
        nvml: the ``pynvml`` module, or anything with its call shapes (tests pass a fake); by
            default ``pynvml`` is imported on the first :meth:`inventory`.
    """

    def __init__(self, nvml: Any | None = None) -> None:
        self._nvml = nvml

    def _module(self) -> Any:
        if self._nvml is None:
            try:
                self._nvml = importlib.import_module("pynvml")
            except ImportError as err:
                raise GpuDiscoveryError(f"NVML bindings not installed (package nvidia-ml-py): {err}") from err
        return self._nvml

    def inventory(self) -> Inventory:
        """Every GPU of the host, with its MIG layout, health and the driver versions.

        NVML is initialised for the call and shut down after it.

        Raises:
            GpuDiscoveryError: ``nvmlInit`` failed (no driver, no library, driver/library mismatch)
                or a required query (count, handle, UUID, name, memory) failed; NVML's message is kept.
        """
        nvml = self._module()
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as err:
            raise GpuDiscoveryError(
                f"NVML could not be initialised: {err} (is the NVIDIA driver installed and loaded?)"
            ) from err
        try:
            count = self._required(nvml.nvmlDeviceGetCount, "device count")
            gpus = tuple(self._gpu(nvml, i) for i in range(count))
            driver = self._optional(nvml, lambda: _text(nvml.nvmlSystemGetDriverVersion()))
            cuda = self._optional(nvml, lambda: _cuda_version(nvml.nvmlSystemGetCudaDriverVersion()))
            return Inventory(gpus=gpus, driver_version=driver or UNKNOWN, cuda_driver_version=cuda or UNKNOWN)
        finally:
            # A failing shutdown changes nothing: the inventory (or the real error) matters more.
            with contextlib.suppress(nvml.NVMLError):
                nvml.nvmlShutdown()

    def _required(self, call: Callable[[], T], what: str) -> T:
        nvml = self._module()
        try:
            return call()
        except nvml.NVMLError as err:
            raise GpuDiscoveryError(f"NVML could not report the {what}: {err}") from err

    def _optional(self, nvml: Any, call: Callable[[], T]) -> T | None:
        optional = tuple(getattr(nvml, name) for name in _OPTIONAL_ERRORS if hasattr(nvml, name))
        try:
            return call()
        except optional:
            return None

    def _gpu(self, nvml: Any, index: int) -> GpuInfo:
        handle = self._required(lambda: nvml.nvmlDeviceGetHandleByIndex(index), f"handle of GPU {index}")
        uuid = _text(self._required(lambda: nvml.nvmlDeviceGetUUID(handle), f"UUID of GPU {index}"))
        name = _text(self._required(lambda: nvml.nvmlDeviceGetName(handle), f"name of GPU {index}"))
        memory = self._required(lambda: nvml.nvmlDeviceGetMemoryInfo(handle), f"memory of GPU {index}")
        mode = self._optional(nvml, lambda: nvml.nvmlDeviceGetMigMode(handle))
        mig_enabled = mode is not None and mode[0] == nvml.NVML_DEVICE_MIG_ENABLE
        ecc = self._optional(
            nvml,
            lambda: int(
                nvml.nvmlDeviceGetTotalEccErrors(
                    handle, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_VOLATILE_ECC
                )
            ),
        )
        return GpuInfo(
            index=index,
            uuid=uuid,
            name=name,
            model=short_model(name),
            memory_mib=int(memory.total) // 2**20,
            mig_enabled=mig_enabled,
            mig=self._mig(nvml, handle, uuid) if mig_enabled else (),
            health=Health(ecc_uncorrected=ecc),
        )

    def _mig(self, nvml: Any, handle: Any, uuid: str) -> tuple[MigSlotInfo, ...]:
        """The MIG devices of a GPU counted by GPU-instance profile (``1g.10gb``)."""
        slots = self._optional(nvml, lambda: int(nvml.nvmlDeviceGetMaxMigDeviceCount(handle))) or 0
        profiles: Counter[str] = Counter()
        for i in range(slots):
            try:
                mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, i)
            except nvml.NVMLError:
                continue  # NVMLError_NotFound: no MIG device in this slot
            profile = self._profile(nvml, mig)
            if profile is None:
                raise GpuDiscoveryError(f"GPU {uuid}: NVML reports no profile for MIG device {i}")
            profiles[profile] += 1
        return tuple(MigSlotInfo(profile=p, count=n) for p, n in sorted(profiles.items()))

    def _profile(self, nvml: Any, mig: Any) -> str | None:
        """A MIG device's profile: from its name (``... MIG 1g.10gb``), else from its attributes.

        The attributes give ``gpuInstanceSliceCount`` and ``memorySizeMB``; NVIDIA's profile names
        round the memory up to whole GB (``4864`` MB is ``1g.5gb`` on an A100 40GB).
        """
        name = self._optional(nvml, lambda: _text(nvml.nvmlDeviceGetName(mig)))
        match = _MIG_NAME.search(name or "")
        if match:
            return match.group(1)
        attrs = self._optional(nvml, lambda: nvml.nvmlDeviceGetAttributes(mig))
        if attrs is None:
            return None
        return f"{int(attrs.gpuInstanceSliceCount)}g.{math.ceil(int(attrs.memorySizeMB) / 1024)}gb"


def _text(value: str | bytes) -> str:
    """NVML strings: ``bytes`` in older pynvml releases, ``str`` in recent ones."""
    return value.decode() if isinstance(value, bytes) else str(value)


def _cuda_version(value: int) -> str:
    """``12040`` (NVML's encoding, 1000 * major + 10 * minor) as ``12.4``."""
    return f"{value // 1000}.{value % 1000 // 10}"
