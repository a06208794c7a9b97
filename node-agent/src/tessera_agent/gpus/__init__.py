"""GPU discovery for the node agent: NVML on a real host, a simulation anywhere else.

Both sources implement :class:`GpuSource` and produce the same immutable :class:`Inventory`.
"""

from tessera_agent.gpus.model import (
    APPLICATION_XIDS,
    UNKNOWN,
    GpuDiscoveryError,
    GpuInfo,
    GpuSource,
    Health,
    HealthStatus,
    Inventory,
    short_model,
)
from tessera_agent.gpus.nvml import NvmlSource
from tessera_agent.gpus.simulated import SimulatedSource

__all__ = [
    "APPLICATION_XIDS",
    "UNKNOWN",
    "GpuDiscoveryError",
    "GpuInfo",
    "GpuSource",
    "Health",
    "HealthStatus",
    "Inventory",
    "NvmlSource",
    "SimulatedSource",
    "short_model",
]
