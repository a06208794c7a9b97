"""Scheduler events: nodes, jobs and every decision the scheduler makes about them.

Aggregates and their subjects (``ev.scheduler.<tenant>.<aggregate>.<id>``):

==========  ===========  ==============================================================
aggregate   tenant       id
==========  ===========  ==============================================================
``job``     its tenant   ``j_<26 lower-case hex>`` (assigned at submit)
``node``    ``_system``  the node id (unique platform-wide, e.g. ``<cluster>-<host>``)
``leader``  ``_system``  ``scheduler``: the election record (fencing epochs)
==========  ===========  ==============================================================

Units: GPU in milli-GPU (1000 = one device); device and host memory in MiB; host CPU in
milli-cores; durations in seconds. Times are the envelope's ``time``.

**Decisions and fencing.** Events the scheduler decides (``JobAdmitted``, ``JobPlaced``,
``JobQueued``, ``JobPreempted``, ``NodeLost``) carry the ``epoch`` of the leader that made them.
``LeaderElected`` starts an epoch. Every reader of the log (the scheduler's own fold, billing,
node agents) applies a decision only if its ``epoch`` equals the latest epoch elected *before it
in the log*; decisions of a deposed leader that land after its successor's election are
therefore ignored by everyone, deterministically (fencing tokens, M. Kleppmann, "How to do
distributed locking", 2016). :func:`is_current` is that rule. Epoch 0 is the offline simulator's,
valid only while no leader was ever elected.

**Job lifecycle.** ``submitted`` → (``queued`` with a reason, repeated only when the reason
changes) → ``admitted`` (quota reserved) → ``placed`` (devices) → ``started`` (node agent) →
``finished``. ``preempted`` sends a placed or admitted job back to pending with its original
submit time; ``cancelled`` ends it wherever it is. An allocation ends at the first of
``finished``, ``preempted`` or ``cancelled``: that is when quota is released and billing stops.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from tessera_contracts.registry import Event, event_type

LEADER_AGGREGATE = "leader"
LEADER_ID = "scheduler"

QueuedReason = Literal[
    "QuotaExceeded",  # the tenant's (or project's) quota and what it may borrow do not cover the job
    "NoQuota",  # the tenant has no quota for any GPU model the job allows
    "BudgetExhausted",  # the monthly GPU-hour budget is spent (Slurm GrpTRESMins)
    "MaxJobsExceeded",  # the tenant or project runs its maximum number of concurrent jobs
    "NoFit",  # quota allows it, but no node (set of nodes for a gang) has the devices free now
    "GangIncomplete",  # some but not all workers of a gang could be placed (none is: all-or-nothing)
    "Unschedulable",  # no node in the platform could ever hold it (model, selector, size)
    "Reserved",  # capacity it fits is held for an older, starving job
    "WaitingForPreemption",  # victims were chosen; the job is placed once they are gone
]
PreemptionReason = Literal[
    "priority",  # a higher-priority job of the same tenant needed the capacity
    "reclaim",  # the job ran on borrowed quota and its lender reclaimed it
    "node_lost",  # its node stopped heart-beating (does not count toward the preemption cap)
]
Outcome = Literal["succeeded", "failed", "timed_out", "killed"]
NodeId = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9_-]{1,128}$")]


class MigSlotInfo(msgspec.Struct, frozen=True, kw_only=True):
    """MIG instances of one profile on a device: ``count`` of ``profile`` (e.g. ``1g.10gb``)."""

    profile: str
    count: int


class DeviceInfo(msgspec.Struct, frozen=True, kw_only=True):
    """One GPU of a node as its agent reports it (NVML UUID, model, memory in MiB, MIG layout)."""

    uuid: str
    model: str
    memory_mib: int
    mig: tuple[MigSlotInfo, ...] = ()


@event_type("tessera.scheduler.node.registered.v1")
class NodeRegistered(Event, frozen=True, kw_only=True):
    """A node joined (or re-joined, replacing its inventory): where it is and what it has.

    ``cpu_milli`` and ``memory_mib`` are the host's allocatable CPU and memory.
    """

    node: NodeId
    cluster: str
    region: str = "default"
    labels: dict[str, str] = {}
    cpu_milli: int
    memory_mib: int
    devices: tuple[DeviceInfo, ...] = ()


@event_type("tessera.scheduler.node.lost.v1")
class NodeLost(Event, frozen=True, kw_only=True):
    """Decision: the node stopped heart-beating for ``silent_s`` seconds.

    Nothing is placed on it again until it registers anew. Its jobs get
    ``JobPreempted(reason="node_lost")`` right after.
    """

    node: NodeId
    epoch: int
    silent_s: float


@event_type("tessera.scheduler.leader.elected.v1")
class LeaderElected(Event, frozen=True, kw_only=True):
    """A scheduler instance became the leader; decisions with an older epoch are void from here on."""

    epoch: int
    holder: str


class WorkerSpec(msgspec.Struct, frozen=True, kw_only=True):
    """What each worker of a job needs (the same for every worker of a gang).

    ``gpus`` devices of ``milli`` milli-GPU each (``milli < 1000`` only with ``gpus == 1``); or
    ``gpu_memory_mib`` alone, which the scheduler turns into the fraction of the chosen device;
    or one MIG slice (``mig_profile``). ``gpu_models`` empty means any model.
    """

    gpus: int = 1
    milli: int | None = 1000
    gpu_memory_mib: int | None = None
    mig_profile: str | None = None
    gpu_models: tuple[str, ...] = ()
    cpu_milli: int = 0
    memory_mib: int = 0


class NodeSelector(msgspec.Struct, frozen=True, kw_only=True):
    """Where the workers may run: cluster, region and labels the node must all have (None = any)."""

    cluster: str | None = None
    region: str | None = None
    labels: dict[str, str] = {}


@event_type("tessera.scheduler.job.submitted.v1")
class JobSubmitted(Event, frozen=True, kw_only=True):
    """A job entered its tenant's queue.

    ``priority`` and ``preemptible`` are resolved from the priority class at submit time, so a
    later change of the class does not reorder old jobs.

    ``workers`` > 1 makes a gang: all of them are placed at once or none is.
    """

    job_id: str
    tenant: str
    project: str
    queue: str = "default"
    name: str
    priority_class: str
    priority: int
    preemptible: bool
    workers: int = 1
    worker: WorkerSpec
    selector: NodeSelector = NodeSelector()
    command: tuple[str, ...] = ()
    env: dict[str, str] = {}
    max_runtime_s: int | None = None
    submitted_by: str


@event_type("tessera.scheduler.job.cancelled.v1")
class JobCancelled(Event, frozen=True, kw_only=True):
    """A user cancelled the job; its allocation (if any) ends now."""

    job_id: str
    by: str
    reason: str = ""


@event_type("tessera.scheduler.job.queued.v1")
class JobQueued(Event, frozen=True, kw_only=True):
    """Decision: the job waits, and why. ``message`` says, in words, what would let it run."""

    job_id: str
    epoch: int
    reason: QueuedReason
    message: str


@event_type("tessera.scheduler.job.admitted.v1")
class JobAdmitted(Event, frozen=True, kw_only=True):
    """Decision: quota is reserved for the job in its tenant's cohort.

    ``gpu_model`` is the flavour charged (None for CPU-only jobs); ``milli`` the whole job's GPU
    demand charged to quota; ``borrowed_milli`` the part of the tenant's usage above its nominal
    quota after this admission (reclaimable by lenders while it is > 0).
    """

    job_id: str
    epoch: int
    gpu_model: str | None
    milli: int
    borrowed_milli: int = 0
    cohort: str | None = None


class DeviceShareInfo(msgspec.Struct, frozen=True, kw_only=True):
    """The part of one device a worker holds."""

    uuid: str
    milli: int
    memory_mib: int
    mig_profile: str | None = None


class WorkerPlacement(msgspec.Struct, frozen=True, kw_only=True):
    """Where one worker runs: node, device shares, host CPU (milli) and memory (MiB)."""

    worker: int
    node: str
    devices: tuple[DeviceShareInfo, ...]
    cpu_milli: int = 0
    memory_mib: int = 0


@event_type("tessera.scheduler.job.placed.v1")
class JobPlaced(Event, frozen=True, kw_only=True):
    """Decision: every worker of the job has its node and devices.

    This is what node agents act on and billing meters from. ``gpu_model`` is the model of every
    device it holds.
    """

    job_id: str
    epoch: int
    gpu_model: str | None
    placements: tuple[WorkerPlacement, ...]


@event_type("tessera.scheduler.job.preempted.v1")
class JobPreempted(Event, frozen=True, kw_only=True):
    """Decision: the job lost its allocation and is pending again, keeping its submit time.

    ``preemptor_job_id``/``preemptor_tenant`` name the job it made room for (None on node loss);
    ``preemptions`` is how many times this job has now been preempted for priority or reclaim.
    """

    job_id: str
    epoch: int
    reason: PreemptionReason
    preemptor_job_id: str | None = None
    preemptor_tenant: str | None = None
    message: str = ""
    preemptions: int = 0


@event_type("tessera.scheduler.job.started.v1")
class JobStarted(Event, frozen=True, kw_only=True):
    """The node agent started the job's worker processes (the first worker's start for a gang)."""

    job_id: str
    node: str


@event_type("tessera.scheduler.job.finished.v1")
class JobFinished(Event, frozen=True, kw_only=True):
    """The job ended by itself (or was killed by its agent); its allocation ends now."""

    job_id: str
    outcome: Outcome
    exit_code: int | None = None
    message: str = ""


DECISIONS: tuple[type[Event], ...] = (NodeLost, JobQueued, JobAdmitted, JobPlaced, JobPreempted)
"""The event types that carry an ``epoch`` and are subject to fencing."""


def is_current(event: Event, elected_epoch: int) -> bool:
    """The fencing rule: whether a decision counts, given the latest epoch elected before it in the log.

    ``elected_epoch`` is 0 while no ``LeaderElected`` has been seen. Events that are not decisions
    always count.
    """
    epoch = getattr(event, "epoch", None)
    if epoch is None or not isinstance(event, DECISIONS):
        return True
    return bool(epoch == elected_epoch)
