"""Jobs as the scheduler core sees them: :class:`JobRecord`, built from ``JobSubmitted``.

A record keeps what the core needs to order, admit, place and preempt a job: its tenant,
project, priority, gang size and worker spec, its state (:data:`JobState`), its submit time
(kept across preemptions, so a preempted job goes back ahead of later ones), its preemption
count, what it was charged (GPU model and milli-GPU) and what it holds (placement
``Assignment`` per worker).

Placement requests are derived per GPU model (:meth:`JobRecord.requests`): a worker that asks
for ``gpu_memory_mib`` alone gets ``ceil(gpu_memory_mib x 1000 / device memory)`` milli-GPU of
a device of that model (Run:ai's gpu-memory semantics), or whole devices of at least that
memory when that is a device or more. Units: milli-GPU (1000 = one device), MiB, milli-cores,
seconds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from tessera_contracts.events.scheduler import JobSubmitted, QueuedReason, WorkerSpec
from tessera_scheduler.placement import GPU_MILLI, Assignment, MigSlot, PlacementError, Request, Selector, labels_of

JobState = Literal["pending", "admitted", "placed", "finished", "cancelled"]
"""``pending`` (waiting) -> ``admitted`` (quota charged) -> ``placed`` (devices held) -> ``finished``;
``cancelled`` ends it anywhere; a preemption sends an admitted or placed job back to ``pending``."""

ShapeKey = tuple[object, ...]
"""What makes two pending jobs of a tenant interchangeable for admission and placement."""

OrderKey = tuple[int, float, str]
"""Queue order within a tenant: ``(-priority, submit time, job id)``; smaller goes first."""

Verdict = tuple[QueuedReason, str]
"""Why a job waits: a ``JobQueued`` reason and its (stable) message."""


@dataclass(slots=True)
class JobRecord:
    """One job: its spec (from ``JobSubmitted``) and where it is in its lifecycle.

    Attributes:
        submitted_at: seconds (unix) of the ``JobSubmitted``; kept across preemptions.
        state: see :data:`JobState`.
        preemptions: times preempted for priority or reclaim (node loss does not count).
        gpu_model, milli, borrowed_milli, cohort: the admission (flavour charged, milli-GPU
            of the whole job, part above the tenant's nominal quota after it).
        assignments: one per worker while placed.
        placed_at: seconds when placed (the anti-thrash minimum runtime counts from here).
        last_queued: the last ``JobQueued`` verdict applied while pending (None: none yet).
        gen: bumped every time the job (re)enters the pending queue.
        invalid: why the spec can never be placed (malformed request), else None.
        seq: submission sequence number (the n-th ``JobSubmitted`` applied), a tie-breaker.
    """

    job_id: str
    tenant: str
    project: str
    queue: str
    name: str
    priority: int
    preemptible: bool
    workers: int
    worker: WorkerSpec
    selector: Selector
    max_runtime_s: int | None
    submitted_at: float
    state: JobState = "pending"
    preemptions: int = 0
    gpu_model: str | None = None
    milli: int = 0
    borrowed_milli: int = 0
    cohort: str | None = None
    admitted_at: float | None = None
    placed_at: float | None = None
    started: bool = False
    assignments: tuple[Assignment, ...] = ()
    last_queued: Verdict | None = None
    pending_since: float = 0.0
    outcome: str | None = None
    gen: int = 0
    invalid: str | None = None
    shape: ShapeKey = field(default=())
    seq: int = 0

    @classmethod
    def from_event(cls, event: JobSubmitted, at: float, seq: int = 0) -> JobRecord:
        """A pending record for a submitted job (``at``: the submit time, seconds; ``seq``: its number)."""
        sel = event.selector
        selector = Selector(sel.cluster, sel.region, labels_of(sel.labels))
        record = cls(
            job_id=event.job_id,
            tenant=event.tenant,
            project=event.project,
            queue=event.queue,
            name=event.name,
            priority=event.priority,
            preemptible=event.preemptible,
            workers=event.workers,
            worker=event.worker,
            selector=selector,
            max_runtime_s=event.max_runtime_s,
            submitted_at=at,
            pending_since=at,
            seq=seq,
        )
        w = event.worker
        record.shape = (
            event.project,
            event.workers,
            w.gpus,
            w.milli,
            w.gpu_memory_mib,
            w.mig_profile,
            tuple(sorted(w.gpu_models)),
            w.cpu_milli,
            w.memory_mib,
            sel.cluster,
            sel.region,
            tuple(sorted(sel.labels.items())),
            event.max_runtime_s,
        )
        record.invalid = _validate(event)
        return record

    @property
    def order(self) -> OrderKey:
        """Queue order within the tenant: priority (highest first), then submit time, then job id."""
        return (-self.priority, self.submitted_at, self.job_id)

    @property
    def gpu(self) -> bool:
        """Whether the job needs GPUs (False: CPU-only, admitted without GPU quota)."""
        return self.worker.gpus > 0

    @property
    def allowed_models(self) -> tuple[str, ...]:
        """GPU models the job accepts, sorted (empty: any)."""
        return tuple(sorted(set(self.worker.gpu_models)))

    def requests(self, model: str | None, device_memory_mib: int) -> tuple[Request, ...]:
        """One placement request per worker, on devices of ``model``.

        ``model`` None keeps the job's own allowed models (used for CPU-only jobs and to show
        the workload to the placement policy). ``device_memory_mib`` is the memory of a device
        of that model (0 when unknown), used only for ``gpu_memory_mib`` workers.

        Raises:
            PlacementError: the spec is not a valid request (e.g. a fraction with ``gpus > 1``).
        """
        worker = worker_request(self.worker, self.selector, model, device_memory_mib)
        return (worker,) * self.workers

    def quota_milli(self, requests: tuple[Request, ...]) -> int:
        """Milli-GPU of the whole job charged to quota for these requests (a MIG slice counts its share)."""
        total = 0
        for request in requests:
            if request.mig_profile is not None:
                total += MigSlot.of(request.mig_profile, 1).milli
            else:
                total += request.gpus * request.milli
        return total

    def usage(self) -> dict[str, int]:
        """The allocation it holds, as fair-share resources (``gpu:<model>`` milli, ``cpu``, ``mem`` MiB)."""
        usage: dict[str, int] = {}
        if self.gpu_model is not None and self.milli:
            usage["gpu:" + self.gpu_model] = self.milli
        cpu = sum(a.cpu_milli for a in self.assignments)
        mem = sum(a.host_memory_mib for a in self.assignments)
        if cpu:
            usage["cpu"] = cpu
        if mem:
            usage["mem"] = mem
        return usage


def worker_request(spec: WorkerSpec, selector: Selector, model: str | None, device_memory_mib: int) -> Request:
    """The placement request of one worker on devices of ``model`` (see :meth:`JobRecord.requests`).

    Raises:
        PlacementError: the spec is not a valid request.
    """
    cpu, mem = spec.cpu_milli, spec.memory_mib
    if spec.gpus == 0:
        return Request(gpus=0, selector=selector, cpu_milli=cpu, host_memory_mib=mem)
    allowed = frozenset(spec.gpu_models) if model is None else frozenset((model,))
    if spec.mig_profile is not None:
        MigSlot.of(spec.mig_profile, 1)  # validates the profile's name
        return Request(
            gpus=spec.gpus,
            allowed_models=allowed,
            selector=selector,
            mig_profile=spec.mig_profile,
            cpu_milli=cpu,
            host_memory_mib=mem,
        )
    milli = spec.milli
    memory = spec.gpu_memory_mib
    if memory is not None and (milli is None or milli >= GPU_MILLI):
        derived = -(-memory * GPU_MILLI // device_memory_mib) if device_memory_mib > 0 else GPU_MILLI
        milli = GPU_MILLI if derived >= GPU_MILLI or spec.gpus > 1 else max(1, derived)
    return Request(
        gpus=spec.gpus,
        milli=GPU_MILLI if milli is None else milli,
        memory_mib=memory,
        allowed_models=allowed,
        selector=selector,
        cpu_milli=cpu,
        host_memory_mib=mem,
    )


def _validate(event: JobSubmitted) -> str | None:
    """Why the job's spec can never be placed, or None (checked once, at submit)."""
    if event.workers < 1:
        return f"a job needs at least one worker, not {event.workers}"
    try:
        worker_request(event.worker, ANY, None, 0)
    except PlacementError as error:
        return str(error)
    return None


ANY = Selector()
