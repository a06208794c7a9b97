"""Scheduler API: the job submission body and the views of jobs, queues and nodes.

Bodies have ``forbid_unknown_fields``: a typo is a 400, not a silent no-op. Units: milli-GPU
(1000 = one device), MiB, milli-cores, seconds.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

import msgspec

from tessera_contracts.api.common import BANNED_CHARACTERS, GpuModel, LabelKey, LabelValue, Region, Slug
from tessera_contracts.events.scheduler import Outcome, PreemptionReason, QueuedReason

JobName = Annotated[
    str, msgspec.Meta(min_length=1, max_length=200, pattern=rf"^[^\s{BANNED_CHARACTERS}][^{BANNED_CHARACTERS}]*$")
]
MigProfile = Annotated[str, msgspec.Meta(pattern=r"^[1-7]g\.[1-9][0-9]{0,3}gb$", examples=["1g.10gb"])]
EnvName = Annotated[str, msgspec.Meta(min_length=1, max_length=128, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]
EnvValue = Annotated[str, msgspec.Meta(max_length=4096, pattern=r"^[^\x00]*$")]
Argument = Annotated[str, msgspec.Meta(max_length=4096, pattern=r"^[^\x00]*$")]
MAX_RUNTIME_S = 366 * 24 * 3600

JobState = Literal["pending", "admitted", "placed", "running", "preempted", "succeeded", "failed", "cancelled"]
"""``preempted`` is shown while a preempted job waits again; it is pending for the scheduler."""


class Body(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Base of request bodies: unknown fields are rejected."""


class WorkerBody(Body, frozen=True, kw_only=True):
    """Per-worker resources. Give ``gpus`` (x ``milli``), or ``gpu_memory_mib`` alone, or ``mig_profile``."""

    gpus: Annotated[int, msgspec.Meta(ge=0, le=64)] = 1
    milli: Annotated[int, msgspec.Meta(ge=1, le=1000)] | None = None
    gpu_memory_mib: Annotated[int, msgspec.Meta(ge=1, le=4_194_304)] | None = None
    mig_profile: MigProfile | None = None
    gpu_models: Annotated[list[GpuModel], msgspec.Meta(max_length=16)] = []
    cpu_milli: Annotated[int, msgspec.Meta(ge=0, le=10_000_000)] = 0
    memory_mib: Annotated[int, msgspec.Meta(ge=0, le=1_073_741_824)] = 0

    def __post_init__(self) -> None:
        """Reject combinations the scheduler cannot honour (a 400 with this message)."""
        if self.milli is not None and self.milli < 1000 and self.gpus != 1:
            raise ValueError("a fraction of a GPU (milli < 1000) needs gpus == 1")
        if self.gpu_memory_mib is not None and self.milli is not None:
            raise ValueError("give milli or gpu_memory_mib, not both")
        if self.gpu_memory_mib is not None and self.gpus != 1:
            raise ValueError("gpu_memory_mib asks for a share of one GPU: gpus must be 1")
        if self.mig_profile is not None and (self.gpus != 1 or self.milli is not None or self.gpu_memory_mib):
            raise ValueError("a MIG profile is one slice: gpus 1, no milli, no gpu_memory_mib")
        if self.gpus == 0 and (self.milli is not None or self.gpu_memory_mib is not None or self.gpu_models):
            raise ValueError("a CPU-only worker (gpus 0) takes no GPU fields")
        if self.gpus == 0 and self.cpu_milli == 0 and self.memory_mib == 0:
            raise ValueError("a worker must ask for something: GPUs, or CPU (cpu_milli) or memory (memory_mib)")
        if len(set(self.gpu_models)) != len(self.gpu_models):
            raise ValueError("gpu_models lists a model twice")


class SelectorBody(Body, frozen=True, kw_only=True):
    """Node selector: every given field must match the node."""

    cluster: Slug | None = None
    region: Region | None = None
    labels: Annotated[dict[LabelKey, LabelValue], msgspec.Meta(max_length=32)] = {}


class SubmitJob(Body, frozen=True, kw_only=True):
    """``POST /v1/tenants/{tenant}/projects/{project}/jobs``: submit a job to a queue.

    ``priority_class`` must exist (``tessera priority-classes``); ``preemptible`` defaults to the
    class's. ``workers`` > 1 is a gang (all or nothing).
    """

    name: JobName
    queue: Slug = "default"
    priority_class: Slug
    preemptible: bool | None = None
    workers: Annotated[int, msgspec.Meta(ge=1, le=4096)] = 1
    worker: WorkerBody = msgspec.field(default_factory=WorkerBody)
    selector: SelectorBody = msgspec.field(default_factory=SelectorBody)
    command: Annotated[list[Argument], msgspec.Meta(max_length=256)] = []
    env: Annotated[dict[EnvName, EnvValue], msgspec.Meta(max_length=256)] = {}
    max_runtime_s: Annotated[int, msgspec.Meta(ge=1, le=MAX_RUNTIME_S)] | None = None


class CancelJob(Body, frozen=True, kw_only=True):
    """``POST /v1/tenants/{tenant}/jobs/{job}/cancel``."""

    reason: Annotated[str, msgspec.Meta(max_length=500, pattern=rf"^[^{BANNED_CHARACTERS}]*$")] = ""


class DeviceShareView(msgspec.Struct, frozen=True, kw_only=True):
    """One device share of a placed worker."""

    uuid: str
    milli: int
    memory_mib: int
    mig_profile: str | None


class PlacementView(msgspec.Struct, frozen=True, kw_only=True):
    """Where one worker runs."""

    worker: int
    node: str
    devices: list[DeviceShareView]
    cpu_milli: int
    memory_mib: int


class JobView(msgspec.Struct, frozen=True, kw_only=True):
    """A job as the scheduler's projection holds it."""

    tenant: str
    project: str
    queue: str
    id: str
    name: str
    state: JobState
    priority_class: str
    priority: int
    preemptible: bool
    workers: int
    gpus: int
    milli: int | None
    gpu_memory_mib: int | None
    mig_profile: str | None
    gpu_models: list[str]
    gpu_model: str | None
    borrowed_milli: int
    placements: list[PlacementView]
    reason: QueuedReason | None
    message: str | None
    preemptions: int
    last_preemption: PreemptionReason | None
    outcome: Outcome | None
    submitted_by: str
    submitted_at: datetime
    admitted_at: datetime | None
    placed_at: datetime | None
    ended_at: datetime | None


class ExplainView(msgspec.Struct, frozen=True, kw_only=True):
    """``tessera jobs explain``: where the job is, why, and what would let it run.

    ``history`` lists the job's events, oldest first, as ``{"at", "type", "summary"}``.
    """

    job: JobView
    summary: str
    history: list[dict[str, str]]


class NodeView(msgspec.Struct, frozen=True, kw_only=True):
    """A node and what is allocated on it (milli-GPU and MiB per device)."""

    node: str
    cluster: str
    region: str
    labels: dict[str, str]
    state: Literal["ready", "lost"]
    gpus: int
    gpu_models: list[str]
    allocated_milli: int
    capacity_milli: int
    registered_at: datetime
