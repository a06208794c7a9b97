"""The environment a job's worker process runs with: its devices, its share of them, its identity.

Units: GPU in milli-GPU (1000 = one device), device memory in MiB (2**20 bytes).

**Why the job cannot override the agent's keys.** The share a worker was placed with is enforced
by the environment alone: ``CUDA_VISIBLE_DEVICES`` limits which devices the CUDA runtime opens,
and for a fractional share the MPS client variables cap the worker's SM threads and device memory
(NVIDIA, "Multi-Process Service", section "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE" and
"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"). A job that could set them would use devices or capacity it
is not charged for and that the scheduler has given to someone else. Every key in
:data:`RESERVED_KEYS` and every key starting with one of :data:`RESERVED_PREFIXES` is therefore
removed from the job's (and the agent's own) environment before the agent's values are set.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from tessera_contracts.events.scheduler import WorkerPlacement

FULL_DEVICE_MILLI = 1000
"""Milli-GPU of one whole device."""

RESERVED_KEYS = frozenset({"CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES"})
"""Keys only the agent sets (device selection)."""

RESERVED_PREFIXES = ("TESSERA_", "CUDA_MPS_")
"""Key prefixes only the agent sets (the job's identity and its MPS limits)."""


def is_reserved(key: str) -> bool:
    """Whether ``key`` is one the agent owns, which neither the job nor the host may pass through."""
    return key in RESERVED_KEYS or key.startswith(RESERVED_PREFIXES)


def is_fractional(placement: WorkerPlacement) -> bool:
    """Whether the worker holds part of one device through MPS (one device, milli < 1000, no MIG)."""
    return (
        len(placement.devices) == 1
        and placement.devices[0].milli < FULL_DEVICE_MILLI
        and placement.devices[0].mig_profile is None
    )


def job_environment(
    job_id: str,
    allocation_id: str,
    placement: WorkerPlacement,
    base_env: Mapping[str, str],
    job_env: Mapping[str, str],
) -> dict[str, str]:
    """The complete environment of one worker process.

    Args:
        job_id: the job (``JobPlaced.job_id``), exported as ``TESSERA_JOB_ID``.
        allocation_id: the allocation the worker runs under, exported as ``TESSERA_ALLOCATION_ID``.
        placement: the worker's placement from ``JobPlaced``; its devices, in order, become
            ``CUDA_VISIBLE_DEVICES`` (an empty string for a CPU-only worker, so it sees no device).
        base_env: the agent's environment to start from (e.g. ``os.environ``: ``PATH``, locale).
        job_env: the job's own variables (``JobSubmitted.env``); they override ``base_env``.

    Returns:
        ``base_env`` overlaid with ``job_env``, without any reserved key (see the module's
        docstring), plus ``CUDA_VISIBLE_DEVICES``, ``TESSERA_JOB_ID``, ``TESSERA_ALLOCATION_ID``,
        ``TESSERA_GPU_MILLI`` (sum over devices, milli-GPU) and ``TESSERA_GPU_MEMORY_MIB`` (sum,
        MiB); for a fractional share (:func:`is_fractional`) also
        ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`` = ceil(milli / 10) and
        ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`` = ``<uuid>=<memory_mib>M``.

    Raises:
        ValueError: a fractional share with no device memory (``memory_mib <= 0``) or no compute
            (``milli <= 0``), which MPS cannot enforce.
    """
    env = {k: v for k, v in base_env.items() if not is_reserved(k)}
    env.update((k, v) for k, v in job_env.items() if not is_reserved(k))
    devices = placement.devices
    env["CUDA_VISIBLE_DEVICES"] = ",".join(d.uuid for d in devices)
    env["TESSERA_JOB_ID"] = job_id
    env["TESSERA_ALLOCATION_ID"] = allocation_id
    env["TESSERA_GPU_MILLI"] = str(sum(d.milli for d in devices))
    env["TESSERA_GPU_MEMORY_MIB"] = str(sum(d.memory_mib for d in devices))
    if is_fractional(placement):
        share = devices[0]
        if share.milli <= 0 or share.memory_mib <= 0:
            raise ValueError(
                f"fractional share of {share.uuid} needs milli > 0 and memory_mib > 0, "
                f"got {share.milli} milli-GPU and {share.memory_mib} MiB"
            )
        env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = str(math.ceil(share.milli / 10))
        env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = f"{share.uuid}={share.memory_mib}M"
    return env
