"""A fake of the pynvml module with the real call shapes, for tests without a GPU.

Shapes follow nvidia-ml-py 12/13: functions take opaque handles; errors are ``NVMLError``
subclasses carrying ``.value`` (NVML return code) and printing NVML's error string; memory info
is an object with ``.total/.used/.free`` in bytes; ``nvmlDeviceGetMigMode`` returns
``[current, pending]``; strings are ``str`` (recent releases) or ``bytes`` (old ones, ``as_bytes``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13

NVML_DEVICE_MIG_DISABLE = 0
NVML_DEVICE_MIG_ENABLE = 1
NVML_MEMORY_ERROR_TYPE_CORRECTED = 0
NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
NVML_VOLATILE_ECC = 0
NVML_AGGREGATE_ECC = 1

_STRINGS = {
    NVML_ERROR_UNINITIALIZED: "Uninitialized",
    NVML_ERROR_NOT_SUPPORTED: "Not Supported",
    NVML_ERROR_NO_PERMISSION: "Insufficient Permissions",
    NVML_ERROR_NOT_FOUND: "Not Found",
    NVML_ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
    NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
    NVML_ERROR_FUNCTION_NOT_FOUND: "Function Not Found",
}


class NVMLError(Exception):
    value = -1

    def __init__(self, value: int | None = None) -> None:
        if value is not None:
            self.value = value
        super().__init__(self.value)

    def __str__(self) -> str:
        return _STRINGS.get(self.value, "Unknown Error")


class NVMLError_Uninitialized(NVMLError):
    value = NVML_ERROR_UNINITIALIZED


class NVMLError_NotSupported(NVMLError):
    value = NVML_ERROR_NOT_SUPPORTED


class NVMLError_NoPermission(NVMLError):
    value = NVML_ERROR_NO_PERMISSION


class NVMLError_NotFound(NVMLError):
    value = NVML_ERROR_NOT_FOUND


class NVMLError_DriverNotLoaded(NVMLError):
    value = NVML_ERROR_DRIVER_NOT_LOADED


class NVMLError_LibraryNotFound(NVMLError):
    value = NVML_ERROR_LIBRARY_NOT_FOUND


class NVMLError_FunctionNotFound(NVMLError):
    value = NVML_ERROR_FUNCTION_NOT_FOUND


@dataclass
class c_nvmlMemory_t:
    total: int
    free: int
    used: int


@dataclass
class c_nvmlDeviceAttributes_t:
    multiprocessorCount: int
    gpuInstanceSliceCount: int
    computeInstanceSliceCount: int
    memorySizeMB: int


@dataclass
class FakeMig:
    """A MIG device: its NVML name (``... MIG 1g.10gb``) or None to force the attributes path."""

    name: str | None
    slices: int
    memory_mb: int


@dataclass
class FakeGpu:
    uuid: str
    name: str
    memory_bytes: int
    mig_mode: int | None = None  # None: nvmlDeviceGetMigMode raises NotSupported
    max_mig: int = 7
    migs: dict[int, FakeMig] = field(default_factory=dict)  # slot -> MIG device
    ecc_uncorrected: int | None = 0  # None: NotSupported


@dataclass(frozen=True)
class _Handle:
    gpu: FakeGpu
    mig: FakeMig | None = None


class FakeNvml:
    """The fake module: ``nvml = FakeNvml([FakeGpu(...)])`` then use it where ``pynvml`` goes."""

    NVMLError = NVMLError
    NVMLError_Uninitialized = NVMLError_Uninitialized
    NVMLError_NotSupported = NVMLError_NotSupported
    NVMLError_NoPermission = NVMLError_NoPermission
    NVMLError_NotFound = NVMLError_NotFound
    NVMLError_DriverNotLoaded = NVMLError_DriverNotLoaded
    NVMLError_LibraryNotFound = NVMLError_LibraryNotFound
    NVMLError_FunctionNotFound = NVMLError_FunctionNotFound
    NVML_DEVICE_MIG_DISABLE = NVML_DEVICE_MIG_DISABLE
    NVML_DEVICE_MIG_ENABLE = NVML_DEVICE_MIG_ENABLE
    NVML_MEMORY_ERROR_TYPE_CORRECTED = NVML_MEMORY_ERROR_TYPE_CORRECTED
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = NVML_MEMORY_ERROR_TYPE_UNCORRECTED
    NVML_VOLATILE_ECC = NVML_VOLATILE_ECC
    NVML_AGGREGATE_ECC = NVML_AGGREGATE_ECC

    def __init__(
        self,
        gpus: list[FakeGpu],
        *,
        init_error: Exception | None = None,
        driver: str = "550.54.15",
        cuda: int | None = 12040,
        as_bytes: bool = False,
    ) -> None:
        self.gpus = gpus
        self.init_error = init_error
        self.driver = driver
        self.cuda = cuda
        self.as_bytes = as_bytes
        self.initialised = 0
        self.calls: list[str] = []

    def _s(self, text: str) -> str | bytes:
        return text.encode() if self.as_bytes else text

    def _check(self) -> None:
        if self.initialised <= 0:
            raise NVMLError_Uninitialized()

    def nvmlInit(self) -> None:
        self.calls.append("nvmlInit")
        if self.init_error is not None:
            raise self.init_error
        self.initialised += 1

    def nvmlShutdown(self) -> None:
        self.calls.append("nvmlShutdown")
        self._check()
        self.initialised -= 1

    def nvmlSystemGetDriverVersion(self) -> str | bytes:
        self._check()
        return self._s(self.driver)

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        self._check()
        if self.cuda is None:
            raise NVMLError_FunctionNotFound()
        return self.cuda

    def nvmlDeviceGetCount(self) -> int:
        self._check()
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _Handle:
        self._check()
        return _Handle(self.gpus[index])

    def nvmlDeviceGetUUID(self, handle: _Handle) -> str | bytes:
        self._check()
        return self._s(handle.gpu.uuid)

    def nvmlDeviceGetName(self, handle: _Handle) -> str | bytes:
        self._check()
        if handle.mig is not None:
            if handle.mig.name is None:
                raise NVMLError_NotSupported()
            return self._s(handle.mig.name)
        return self._s(handle.gpu.name)

    def nvmlDeviceGetMemoryInfo(self, handle: _Handle) -> c_nvmlMemory_t:
        self._check()
        total = handle.gpu.memory_bytes
        return c_nvmlMemory_t(total=total, free=total - 2**20 * 500, used=2**20 * 500)

    def nvmlDeviceGetMigMode(self, handle: _Handle) -> list[int]:
        self._check()
        if handle.gpu.mig_mode is None:
            raise NVMLError_NotSupported()
        return [handle.gpu.mig_mode, handle.gpu.mig_mode]

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: _Handle) -> int:
        self._check()
        return handle.gpu.max_mig

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: _Handle, index: int) -> _Handle:
        self._check()
        if handle.gpu.mig_mode != NVML_DEVICE_MIG_ENABLE:
            raise NVMLError_NotSupported()
        if index not in handle.gpu.migs:
            raise NVMLError_NotFound()
        return _Handle(handle.gpu, handle.gpu.migs[index])

    def nvmlDeviceGetAttributes(self, handle: _Handle) -> c_nvmlDeviceAttributes_t:
        self._check()
        if handle.mig is None:
            raise NVMLError_NotSupported()
        mig = handle.mig
        return c_nvmlDeviceAttributes_t(14 * mig.slices, mig.slices, mig.slices, mig.memory_mb)

    def nvmlDeviceGetTotalEccErrors(self, handle: _Handle, error_type: int, counter_type: int) -> int:
        self._check()
        if handle.gpu.ecc_uncorrected is None:
            raise NVMLError_NotSupported()
        assert error_type == NVML_MEMORY_ERROR_TYPE_UNCORRECTED
        assert counter_type in (NVML_VOLATILE_ECC, NVML_AGGREGATE_ECC)
        return handle.gpu.ecc_uncorrected


def fake_module(**kwargs: Any) -> FakeNvml:
    """Shorthand: ``fake_module(gpus=[...], init_error=...)``."""
    gpus = kwargs.pop("gpus", [])
    return FakeNvml(gpus, **kwargs)
