"""The replay: the trace's arrivals and departures in virtual time (seconds), through ``SchedulerCore``.

Every decision of the replay is the scheduler core's (``domain/core.py``), the same code the
scheduler service runs; the simulator only feeds it events and plays the workload:

- **Setup** (applied at time 0): ``PriorityClassDefined`` per QoS class present, ``QuotaSet``
  per tenant (:func:`tenancy_events`, mapping in ``jobs.py``) and ``NodeRegistered`` per node
  (:func:`node_events`; a name that does not match the contract's node id pattern
  ``^[A-Za-z0-9_-]{1,128}$`` gets its other characters replaced by ``_``). A device of unknown
  memory (the trace's G2 and G3) is registered with 0 MiB, as the trace loader gives it.
- **Jobs**: a trace pod is a ``JobSubmitted`` (:func:`submission`): one worker, ``gpus`` and
  ``milli`` from the pod's GPU request, ``gpu_models`` from its ``gpu_spec``, host CPU and
  memory from the pod; tenant and priority from its QoS class.
- **Quotas**: every tenant has quota for every GPU model of the cluster, listed largest pool
  first (the core tries a job's models in its tenant's ``QuotaSet`` order and takes the first
  that fits, as Kueue does with flavours). By default each nominal quota is the cluster's whole
  capacity of the model, so quota never binds and the replay measures placement and queueing alone. With
  ``quotas=True`` the tenants share one cohort (``trace``): each gets, of every model, a nominal
  share of the capacity proportional to its GPU demand in the trace (milli-GPU x run seconds),
  and may borrow without limit, so a class that exceeds its share runs on borrowed quota and can
  be reclaimed (preempted) by a class within its own.
- **Virtual time** (as ``bench/src/tessera_bench/kueue.py``'s ``run_core``): the replay jumps
  from instant to instant (arrivals and job ends). At an instant it applies the ends
  (``JobFinished``), then the arrivals (``JobSubmitted``), then runs ``decide``/``apply`` cycles
  until a cycle admits, places and preempts nothing (at most :data:`MAX_CYCLES_PER_INSTANT`). A
  placed job finishes its run time after it was placed; a preempted job is pending again, its
  scheduled end is void, and it runs its whole time again once placed. Decisions are taken only
  at instants where something happens (the core's ``min_runtime_s`` and ``starvation_s`` count
  in virtual time, but no instant is added for them).
- **Rejected**: a job the core finds ``Unschedulable`` (no node could ever hold it) or
  ``NoQuota`` is cancelled (``JobCancelled``) at once and counted as rejected.
- **Strict FIFO** (``strict=True``, the ``fifo`` policy): the core always backfills, so
  head-of-line blocking is emulated here: arrivals wait in the simulator, in QoS rank then
  arrival order, and the next one is submitted to the core only when every job submitted
  before it is placed (or rejected). Its queueing delay still counts from its arrival.

Figures (:class:`ReplayResult`): the GPU allocation ratio over time (``metrics.AllocationTimeline``,
from the core's live allocations after every instant), queueing delay = first placement time -
arrival time, per QoS class and per tenant, jobs completed, preemptions (the core's
``JobPreempted`` decisions applied).
"""

from __future__ import annotations

import heapq
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from tessera_contracts.events.scheduler import (
    DeviceInfo,
    JobAdmitted,
    JobCancelled,
    JobFinished,
    JobPlaced,
    JobPreempted,
    JobQueued,
    JobSubmitted,
    MigSlotInfo,
    NodeRegistered,
    WorkerSpec,
)
from tessera_contracts.events.tenancy import GpuQuota, PriorityClassDefined, QuotaSet
from tessera_contracts.registry import Event
from tessera_scheduler.domain.core import CoreConfig, SchedulerCore
from tessera_scheduler.placement.model import Node
from tessera_scheduler.simulator.jobs import QOS_PRIORITY, SimJob, qos_class
from tessera_scheduler.simulator.metrics import AllocationTimeline, percentile

MAX_CYCLES_PER_INSTANT = 50
"""Most ``decide``/``apply`` cycles run at one instant (a guard; two or three usually settle it)."""
COHORT = "trace"
"""The cohort of the tenants in quota mode."""
REJECTED_REASONS = ("Unschedulable", "NoQuota")
"""``JobQueued`` reasons for which the simulator cancels the job (it could never run)."""

_END, _ARRIVAL = 0, 1
_NODE_ID = re.compile(r"^[A-Za-z0-9_-]{1,128}$")


@dataclass
class ReplayResult:
    """What a replay measured (seconds of virtual time; ratios of GPU capacity)."""

    jobs_submitted: int = 0
    jobs_completed: int = 0
    jobs_still_queued: int = 0
    jobs_rejected: int = 0
    preemptions: int = 0
    cycles: int = 0
    """``decide`` calls."""
    delays: dict[str, list[float]] = field(default_factory=dict)
    """Queueing delays (s) by QoS class."""
    tenants: dict[str, str] = field(default_factory=dict)
    """Tenant of each QoS class."""
    first_placed: dict[int, float] = field(default_factory=dict)
    """Virtual time (s) of each job's first placement, by ``SimJob.seq``."""
    window: tuple[float, float] = (0.0, 0.0)
    allocation_mean: float = 0.0
    series_step_s: float = 0.0
    series: list[float] = field(default_factory=list)

    def as_dict(self) -> dict[str, object]:
        """A JSON-ready dictionary (delays p50/p99 overall, by QoS class and by tenant)."""
        everything = [d for values in self.delays.values() for d in values]
        ordered = sorted(self.delays.items(), key=lambda item: (QOS_PRIORITY.get(item[0], 99), item[0]))
        by_qos = {qos: _figures(values) for qos, values in ordered}
        by_tenant: dict[str, list[float]] = {}
        for qos, values in ordered:
            by_tenant.setdefault(self.tenants.get(qos, qos_class(qos).tenant), []).extend(values)
        return {
            "jobs_submitted": self.jobs_submitted,
            "jobs_completed": self.jobs_completed,
            "jobs_still_queued": self.jobs_still_queued,
            "jobs_rejected": self.jobs_rejected,
            "preemptions": self.preemptions,
            "scheduling_cycles": self.cycles,
            "gpu_allocation_ratio_mean": round(self.allocation_mean, 4),
            "gpu_allocation_ratio_series": {
                "start_s": self.window[0],
                "step_s": self.series_step_s,
                "values": self.series,
            },
            "queue_delay_s": {
                "p50": _round(percentile(everything, 50)),
                "p99": _round(percentile(everything, 99)),
                "jobs": len(everything),
                "by_qos": by_qos,
                "by_tenant": {tenant: _figures(values) for tenant, values in by_tenant.items()},
            },
        }


def _figures(values: list[float]) -> dict[str, object]:
    return {"jobs": len(values), "p50": _round(percentile(values, 50)), "p99": _round(percentile(values, 99))}


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


# ---------------------------------------------------------------------------------- events


def node_events(nodes: Iterable[Node]) -> list[NodeRegistered]:
    """``NodeRegistered`` for each node, names made valid node ids (``[A-Za-z0-9_-]``, at most 128) and unique."""
    out: list[NodeRegistered] = []
    taken: set[str] = set()
    for node in nodes:
        name = node.name
        if not _NODE_ID.match(name) or name in taken:
            base = re.sub(r"[^A-Za-z0-9_-]", "_", name)[:120] or "node"
            name, k = base, 1
            while name in taken or not _NODE_ID.match(name):
                name, k = f"{base}-{k}", k + 1
        taken.add(name)
        devices = tuple(
            DeviceInfo(
                uuid=d.uuid,
                model=d.model,
                memory_mib=d.memory_mib,
                mig=tuple(MigSlotInfo(profile=s.profile, count=s.count) for s in d.mig),
            )
            for d in node.devices
        )
        out.append(
            NodeRegistered(
                node=name,
                cluster=node.cluster,
                region=node.region,
                labels=dict(node.labels),
                cpu_milli=node.cpu_milli,
                memory_mib=node.memory_mib,
                devices=devices,
            )
        )
    return out


def tenancy_events(jobs: Sequence[SimJob], nodes: Sequence[Node], *, quotas: bool = False) -> list[Event]:
    """``PriorityClassDefined`` per QoS class in ``jobs``, then ``QuotaSet`` per tenant (see the module docstring).

    Quotas are in milli-GPU per model; without ``quotas`` each tenant's nominal is the whole
    capacity of every model (never binds), with it a demand-proportional share in one cohort.
    """
    capacity: dict[str, int] = {}
    for node in nodes:
        for device in node.devices:
            capacity[device.model] = capacity.get(device.model, 0) + 1000
    classes = sorted({qos_class(job.qos) for job in jobs}, key=lambda q: (q.rank, q.name))
    demand: dict[str, int] = {q.name: 0 for q in classes}
    for job in jobs:
        demand[job.qos] += job.gpu_milli * max(1, round(job.run_s))
    total = sum(demand.values())
    models = sorted(capacity.items(), key=lambda item: (-item[1], item[0]))
    out: list[Event] = [PriorityClassDefined(name=q.name, value=q.priority, preemptible=q.preemptible) for q in classes]
    for q in classes:
        if quotas:
            share = [(m, c * demand[q.name] // total if total else c // len(classes)) for m, c in models]
            gpus = tuple(GpuQuota(gpu_model=m, nominal_milli=n, borrowing_limit_milli=None) for m, n in share)
            out.append(QuotaSet(tenant=q.tenant, cohort=COHORT, gpus=gpus))
        else:
            gpus = tuple(GpuQuota(gpu_model=m, nominal_milli=c) for m, c in models)
            out.append(QuotaSet(tenant=q.tenant, gpus=gpus))
    return out


def submission(job: SimJob) -> JobSubmitted:
    """The ``JobSubmitted`` of a simulator job (tenant and priority from its QoS class).

    Raises:
        ValueError: the job has no worker, or a gang whose workers differ.
    """
    if not job.workers or any(w != job.workers[0] for w in job.workers):
        raise ValueError(f"job {job.name}: a job needs identical workers (one spec for the gang)")
    request = job.workers[0]
    qos = qos_class(job.qos)
    worker = WorkerSpec(
        gpus=request.gpus,
        milli=request.milli,
        gpu_memory_mib=request.memory_mib,
        mig_profile=request.mig_profile,
        gpu_models=tuple(sorted(request.allowed_models)),
        cpu_milli=request.cpu_milli,
        memory_mib=request.host_memory_mib,
    )
    return JobSubmitted(
        job_id=job.job_id,
        tenant=qos.tenant,
        project="default",
        name=job.name,
        priority_class=qos.name,
        priority=qos.priority,
        preemptible=qos.preemptible,
        workers=len(job.workers),
        worker=worker,
        submitted_by="simulator",
    )


# ---------------------------------------------------------------------------------- replay


class _Replay:
    """The state of one replay: the core, the workload's clock and the figures."""

    def __init__(self, core: SchedulerCore, jobs: Sequence[SimJob], strict: bool) -> None:
        self.core = core
        self.strict = strict
        self.by_id = {job.job_id: job for job in jobs}
        if len(self.by_id) != len(jobs):
            raise ValueError("simulator jobs need distinct sequence numbers")
        self.events: list[tuple[float, int, int, str]] = [(j.arrival_s, _ARRIVAL, j.seq, j.job_id) for j in jobs]
        heapq.heapify(self.events)
        self.gate: list[tuple[tuple[int, float, int], str]] = []
        self.unplaced: dict[str, None] = {}
        self.serial: dict[str, int] = {}
        self.placements = 0
        self.result = ReplayResult()

    def run(self, timeline: AllocationTimeline) -> None:
        core = self.core
        events = self.events
        while events:
            now = events[0][0]
            while events and events[0][0] == now:
                _t, kind, number, job_id = heapq.heappop(events)
                if kind == _END:
                    if self.serial.get(job_id) == number:
                        del self.serial[job_id]
                        core.apply(JobFinished(job_id=job_id, outcome="succeeded"), now)
                        self.result.jobs_completed += 1
                    continue
                self.result.jobs_submitted += 1
                job = self.by_id[job_id]
                if self.strict:
                    heapq.heappush(self.gate, (job.order, job_id))
                else:
                    self.submit(job_id, now)
            self.settle(now)
            while self.gate and not self.unplaced:
                self.submit(heapq.heappop(self.gate)[1], now)
                self.settle(now)
            timeline.record(now, core.cluster.allocated_milli)
        self.result.jobs_still_queued = len(self.unplaced) + len(self.gate)

    def submit(self, job_id: str, now: float) -> None:
        self.core.apply(submission(self.by_id[job_id]), now)
        self.unplaced[job_id] = None

    def settle(self, now: float) -> None:
        """Cycles at ``now`` until one admits, places and preempts nothing."""
        core = self.core
        for _ in range(MAX_CYCLES_PER_INSTANT):
            if not self.unplaced:
                return
            self.result.cycles += 1
            changed = False
            rejected: list[tuple[str, str]] = []
            for event in core.decide(now):
                if not core.apply(event, now):
                    continue
                if isinstance(event, JobPlaced):
                    self.placed(event.job_id, now)
                    changed = True
                elif isinstance(event, JobPreempted):
                    self.serial.pop(event.job_id, None)
                    self.unplaced[event.job_id] = None
                    self.result.preemptions += 1
                    changed = True
                elif isinstance(event, JobAdmitted):
                    changed = True
                elif isinstance(event, JobQueued) and event.reason in REJECTED_REASONS:
                    rejected.append((event.job_id, event.reason))
            for job_id, reason in rejected:
                if core.apply(JobCancelled(job_id=job_id, by="simulator", reason=reason), now):
                    self.unplaced.pop(job_id, None)
                    self.result.jobs_rejected += 1
            if not changed:
                return

    def placed(self, job_id: str, now: float) -> None:
        job = self.by_id[job_id]
        self.unplaced.pop(job_id, None)
        self.placements += 1
        self.serial[job_id] = self.placements
        heapq.heappush(self.events, (now + job.run_s, _END, self.placements, job_id))
        if job.seq not in self.result.first_placed:
            self.result.first_placed[job.seq] = now
            self.result.delays.setdefault(job.qos, []).append(now - job.arrival_s)


def replay(
    nodes: Iterable[Node],
    jobs: Sequence[SimJob],
    config: CoreConfig | None = None,
    *,
    strict: bool = False,
    quotas: bool = False,
    samples: int = 100,
) -> ReplayResult:
    """Replay ``jobs`` (arrivals and run times, seconds) on ``nodes`` through a fresh ``SchedulerCore``.

    ``config`` is the core's (placement policy and tunables; default ``CoreConfig()``, FGD);
    ``strict``: FIFO with head-of-line blocking; ``quotas``: binding quotas in a cohort (see the
    module docstring). The allocation ratio's mean and its ``samples`` samples cover the window
    from the first to the last arrival.
    """
    nodes = list(nodes)
    core = SchedulerCore(config or CoreConfig())
    for event in [*tenancy_events(jobs, nodes, quotas=quotas), *node_events(nodes)]:
        core.apply(event, 0.0)
    timeline = AllocationTimeline(core.cluster.capacity_milli)
    state = _Replay(core, jobs, strict)
    state.run(timeline)
    result = state.result
    result.tenants = {job.qos: qos_class(job.qos).tenant for job in jobs}
    if jobs:
        start = min(job.arrival_s for job in jobs)
        end = max(job.arrival_s for job in jobs)
        result.window = (start, end)
        result.allocation_mean = timeline.mean(start, end)
        step = (end - start) / max(1, samples - 1)
        result.series_step_s = round(step, 3)
        result.series = timeline.series(start, end, step) if step > 0 else []
    return result
