"""The scheduler's decision core: a fold of the log (:meth:`SchedulerCore.apply`) and its cycle (``decide``).

The core is pure and deterministic: no I/O, no clock (time is passed in), no randomness, no
iteration over sets or hash order. The same events applied give the same state, and the same
state and ``now`` give the same decisions. ``decide(now)`` never changes the core: it works in a
``ClusterState.trial()`` and undoes every quota charge it simulates; the caller appends and
applies the decisions (``for e in core.decide(now): core.apply(e, now)``). Because other events
interleave in the live log, ``apply`` validates every decision against the state it meets.

One cycle (see ``queues.py`` for the order and ``preemption.py`` for victims):

1. Admitted jobs whose placement was rejected on apply are placed, or sent back to pending.
2. **Reservations**: the highest-ordered starving jobs (waited ``starvation_s`` with ``NoFit``,
   ``GangIncomplete`` or ``Reserved``; at most ``max_reservations``) get the nodes where they
   would fit soonest closed to everyone else for the cycle, so those nodes drain for them.
3. The pending jobs in order. For each: a static plan (``Unschedulable``, ``NoQuota``, the GPU
   models to try), the budget (``BudgetExhausted``), then per model of its quota in ``QuotaSet``
   order the quota check and placement; the first model that fits wins (``JobAdmitted`` then
   ``JobPlaced``). Otherwise preemption (priority, reclaim): if a minimal victim set makes it fit,
   ``JobPreempted`` per victim then ``JobAdmitted`` and ``JobPlaced`` on the freed capacity.
   Otherwise the job's sub-queue gets a verdict and ``JobQueued`` is emitted for the jobs whose
   verdict changed. A starving job held by ``QuotaExceeded`` holds its tenant's quota of those
   models against same-tenant jobs of lower or equal priority (``Reserved``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from tessera_contracts.events.scheduler import (
    JobAdmitted,
    JobCancelled,
    JobFinished,
    JobPlaced,
    JobPreempted,
    JobQueued,
    JobStarted,
    JobSubmitted,
    LeaderElected,
    NodeLost,
    NodeRegistered,
    is_current,
)
from tessera_contracts.events.tenancy import PriorityClassDefined, QuotaSet
from tessera_contracts.registry import Event
from tessera_scheduler.domain import explain as words
from tessera_scheduler.domain.budget import BudgetLedger
from tessera_scheduler.domain.cycle import Cycle
from tessera_scheduler.domain.fairshare import FairShare
from tessera_scheduler.domain.jobs import JobRecord, ShapeKey, Verdict
from tessera_scheduler.domain.plan import CoreInvariantError, Option, Plan
from tessera_scheduler.domain.queues import PendingQueues, can_hold
from tessera_scheduler.domain.quota import QuotaBook, QuotaError, gpus
from tessera_scheduler.placement import (
    GPU_MILLI,
    Assignment,
    ClusterState,
    Device,
    DeviceShare,
    MigSlot,
    Node,
    PlacementError,
    Policy,
    Request,
    labels_of,
    policy_named,
)


@dataclass(frozen=True, slots=True)
class CoreConfig:
    """Tunables of the core (seconds and counts).

    Attributes:
        placement: placement policy name (``fgd``, ``best-fit``, ``first-fit``).
        min_runtime_s: a job runs at least this long before it can be preempted (anti-thrash).
        max_preemptions: a job preempted this often (priority or reclaim) is not preempted again.
        starvation_s: a job waiting this long with ``NoFit`` gets a reservation.
        max_reservations: at most this many starving jobs hold reservations in a cycle.
        fair_share_half_life_s: decay half-life of fair-share usage.
    """

    placement: str = "fgd"
    min_runtime_s: float = 300.0
    max_preemptions: int = 3
    starvation_s: float = 900.0
    max_reservations: int = 8
    fair_share_half_life_s: float = 604800.0


class SchedulerCore:
    """The scheduler's state (nodes, jobs, quota, budget, fair share) and its decisions.

    Attributes:
        epoch: the latest ``LeaderElected`` epoch applied (0 = none); decisions carry it and
            decisions of another epoch are ignored by :meth:`apply`.
        config: the tunables.
        cluster: the placement layer's state (live allocations).
        quota, budget, fairshare: the accounting ledgers.
    """

    def __init__(self, config: CoreConfig | None = None) -> None:
        self.config = config or CoreConfig()
        self.epoch = 0
        self.policy: Policy = policy_named(self.config.placement)
        self._first_fit: Policy = policy_named("first-fit")
        self.cluster = ClusterState()
        self._empty = ClusterState()
        self.quota = QuotaBook()
        self.budget = BudgetLedger()
        self.fairshare = FairShare(self.config.fair_share_half_life_s)
        self.priority_classes: dict[str, tuple[int, bool]] = {}
        self._jobs: dict[str, JobRecord] = {}
        self._pending = PendingQueues()
        self._admitted: dict[str, JobRecord] = {}
        self._running: dict[str, dict[str, JobRecord]] = {}
        self._nodes: dict[str, Node] = {}
        self._lost: dict[str, None] = {}
        self._node_jobs: dict[str, dict[str, None]] = {}
        self._node_free: dict[str, int] = {}
        self._model_memory: dict[str, int] = {}
        self._capacity: dict[str, int] = {}
        self._plans: dict[tuple[str, ShapeKey], Plan] = {}
        self._feasible: dict[tuple[Request, ...], bool] = {}
        self._eligible: dict[Request, tuple[str, ...]] = {}

    # ------------------------------------------------------------------------------ reads

    def job(self, job_id: str) -> JobRecord | None:
        """The record of a job (None: never submitted)."""
        return self._jobs.get(job_id)

    def jobs(self) -> Iterable[JobRecord]:
        """Every job ever submitted, in submit order."""
        return self._jobs.values()

    def pending(self) -> list[JobRecord]:
        """The pending jobs, tenant by tenant, each tenant's in queue order."""
        return self._pending.jobs()

    def node_lost(self, node: str) -> bool:
        """Whether the node was lost and has not registered again."""
        return node in self._lost

    # ------------------------------------------------------------------------------ fold

    def apply(self, event: Event, at: float) -> bool:
        """Fold one event of the log read at ``at`` (seconds); False when it is ignored.

        Ignored (and nothing changes): decisions of an epoch other than :attr:`epoch` (fencing,
        ``is_current``), events of other types, and decisions that no longer fit the state (a
        ``JobPlaced`` of a job that is not admitted or onto devices that are not free, a
        ``JobAdmitted`` of a job that is not pending, an event for an unknown job).
        """
        if not is_current(event, self.epoch):
            return False
        if isinstance(event, JobSubmitted):
            return self._submitted(event, at)
        if isinstance(event, JobQueued):
            return self._queued(event, at)
        if isinstance(event, JobAdmitted):
            return self._admitted_event(event, at)
        if isinstance(event, JobPlaced):
            return self._placed(event, at)
        if isinstance(event, JobPreempted):
            return self._preempted(event, at)
        if isinstance(event, JobFinished | JobCancelled):
            return self._ended(event, at)
        if isinstance(event, JobStarted):
            job = self._jobs.get(event.job_id)
            if job is None or job.state != "placed":
                return False
            job.started = True
            return True
        if isinstance(event, NodeRegistered):
            return self._registered(event)
        if isinstance(event, NodeLost):
            return self._node_lost(event)
        if isinstance(event, LeaderElected):
            self.epoch = event.epoch
            return True
        if isinstance(event, QuotaSet):
            self.quota.set_quota(event)
            self.budget.set_budget(event.tenant, event.project, event.monthly_gpu_hour_budget)
            if event.project is None:
                self.fairshare.set_weight(event.tenant, max(1, event.fair_share_weight))
            self._plans.clear()
            return True
        if isinstance(event, PriorityClassDefined):
            self.priority_classes[event.name] = (event.value, event.preemptible)
            return True
        return False

    def _submitted(self, event: JobSubmitted, at: float) -> bool:
        if event.job_id in self._jobs:
            return False
        job = JobRecord.from_event(event, at, len(self._jobs))
        self._jobs[job.job_id] = job
        self._pending.add(job)
        if job.invalid is None and job.gpu:
            memory = max((self._model_memory.get(m, 0) for m in job.allowed_models), default=0)
            if not job.allowed_models:
                memory = max(self._model_memory.values(), default=0)
            for request in job.requests(None, memory):
                self.policy.observe(request)
        return True

    def _queued(self, event: JobQueued, at: float) -> bool:
        job = self._jobs.get(event.job_id)
        if job is None:
            return False
        verdict: Verdict = (event.reason, event.message)
        if job.state == "pending":
            self._pending.set_verdict(job, verdict)
            return True
        if job.state == "admitted":
            self._release(job, at)
            self._requeue(job, at)
            self._pending.set_verdict(job, verdict)
            return True
        return False

    def _admitted_event(self, event: JobAdmitted, at: float) -> bool:
        job = self._jobs.get(event.job_id)
        if job is None or job.state != "pending":
            return False
        if job.gpu != (event.gpu_model is not None):
            return False
        try:
            borrowed = self.quota.charge(job.tenant, job.project, event.gpu_model, event.milli)
        except QuotaError:
            return False
        self._pending.remove(job)
        job.state = "admitted"
        job.gpu_model = event.gpu_model
        job.milli = event.milli
        job.borrowed_milli = borrowed
        job.cohort = event.cohort
        job.admitted_at = at
        self._admitted[job.job_id] = job
        return True

    def _placed(self, event: JobPlaced, at: float) -> bool:
        job = self._jobs.get(event.job_id)
        if job is None or job.state != "admitted" or event.gpu_model != job.gpu_model:
            return False
        if sorted(p.worker for p in event.placements) != list(range(job.workers)):
            return False
        assignments = tuple(
            Assignment(
                p.node,
                tuple(DeviceShare(d.uuid, d.milli, d.memory_mib, d.mig_profile) for d in p.devices),
                p.cpu_milli,
                p.memory_mib,
            )
            for p in sorted(event.placements, key=lambda p: p.worker)
        )
        if any(a.node in self._lost for a in assignments):
            return False
        try:
            self.cluster.allocate_all(assignments)
        except PlacementError:
            return False
        del self._admitted[job.job_id]
        job.state = "placed"
        job.placed_at = at
        job.assignments = assignments
        self._running.setdefault(job.tenant, {})[job.job_id] = job
        for a in assignments:
            self._node_jobs.setdefault(a.node, {})[job.job_id] = None
            self._node_free[a.node] -= a.gpu_milli
        self.budget.start(job.job_id, job.tenant, job.project, job.milli, at, job.max_runtime_s)
        self.fairshare.start(job.tenant, job.usage(), at)
        return True

    def _preempted(self, event: JobPreempted, at: float) -> bool:
        job = self._jobs.get(event.job_id)
        if job is None or job.state not in ("admitted", "placed"):
            return False
        self._release(job, at)
        if event.reason != "node_lost":
            job.preemptions += 1
        self._requeue(job, at)
        return True

    def _ended(self, event: JobFinished | JobCancelled, at: float) -> bool:
        job = self._jobs.get(event.job_id)
        if job is None or job.state in ("finished", "cancelled"):
            return False
        if job.state == "pending":
            self._pending.remove(job)
        else:
            self._release(job, at)
        if isinstance(event, JobFinished):
            job.state = "finished"
            job.outcome = event.outcome
        else:
            job.state = "cancelled"
            job.outcome = "cancelled"
        return True

    def _release(self, job: JobRecord, at: float) -> None:
        """End an admitted or placed job's allocation: devices, quota, budget, fair share (exactly)."""
        if job.state == "placed":
            for a in job.assignments:
                self.cluster.release(a)
                self._node_free[a.node] += a.gpu_milli
                node_jobs = self._node_jobs.get(a.node)
                if node_jobs is not None:
                    node_jobs.pop(job.job_id, None)
                    if not node_jobs:
                        del self._node_jobs[a.node]
            self.budget.stop(job.job_id, at)
            self.fairshare.stop(job.tenant, job.usage(), at)
            running = self._running[job.tenant]
            del running[job.job_id]
            if not running:
                del self._running[job.tenant]
        else:
            del self._admitted[job.job_id]
        self.quota.refund(job.tenant, job.project, job.gpu_model, job.milli)
        job.assignments = ()
        job.gpu_model = None
        job.milli = 0
        job.borrowed_milli = 0
        job.cohort = None
        job.admitted_at = None
        job.placed_at = None
        job.started = False

    def _requeue(self, job: JobRecord, at: float) -> None:
        job.state = "pending"
        job.gen += 1
        job.pending_since = at
        job.last_queued = None
        self._pending.add(job)

    # ------------------------------------------------------------------------------ nodes

    def _registered(self, event: NodeRegistered) -> bool:
        try:
            devices = tuple(
                Device(d.uuid, d.model, d.memory_mib, tuple(MigSlot.of(s.profile, s.count) for s in d.mig))
                for d in event.devices
            )
            node = Node(
                event.node,
                devices,
                event.cpu_milli,
                event.memory_mib,
                event.cluster,
                event.region,
                labels_of(event.labels),
            )
        except PlacementError:
            return False
        name = node.name
        old = self._nodes.get(name)
        if old is None:
            try:
                self.cluster.add_node(node)
            except PlacementError:
                return False
            self._empty.add_node(node)
            self._adopt(node)
            return True
        if not self.cluster.allocations(name):
            usable = name not in self._lost
            self.cluster.remove_node(name)
            try:
                self.cluster.add_node(node)
            except PlacementError:
                self.cluster.add_node(old)
                self.cluster.set_healthy(name, usable)
                return False
            if usable:
                self._empty.remove_node(name)
                self._contribute(old, -1)
            self._lost.pop(name, None)
            self._empty.add_node(node)
            self._adopt(node)
            return True
        if old.devices != node.devices:
            return False
        if name in self._lost:
            del self._lost[name]
            self.cluster.set_healthy(name, True)
            self._empty.add_node(old)
            self._contribute(old, +1)
            self._nodes_changed()
        return True

    def _adopt(self, node: Node) -> None:
        """A node (new or replacing an idle one) is usable: index it, count its capacity."""
        self._nodes[node.name] = node
        self._node_free[node.name] = GPU_MILLI * len(node.devices)
        for device in node.devices:
            known = self._model_memory.get(device.model)
            if known is None or device.memory_mib > known:
                self._model_memory[device.model] = device.memory_mib  # 0 (unknown memory) still lists the model
        self._contribute(node, +1)
        self._nodes_changed()

    def _contribute(self, node: Node, sign: int) -> None:
        """Add (or take away) the node's capacity to the fair-share totals."""
        touched: dict[str, None] = {}
        for device in node.devices:
            key = "gpu:" + device.model
            self._capacity[key] = self._capacity.get(key, 0) + sign * GPU_MILLI
            touched[key] = None
        for key, amount in (("cpu", node.cpu_milli), ("mem", node.memory_mib)):
            self._capacity[key] = self._capacity.get(key, 0) + sign * amount
            touched[key] = None
        for key in touched:
            self.fairshare.set_capacity(key, max(0, self._capacity[key]))

    def _node_lost(self, event: NodeLost) -> bool:
        name = event.node
        node = self._nodes.get(name)
        if node is None or name in self._lost:
            return False
        self._lost[name] = None
        self.cluster.set_healthy(name, False)
        self._empty.remove_node(name)
        self._contribute(node, -1)
        self._nodes_changed()
        return True

    def _nodes_changed(self) -> None:
        self._plans.clear()
        self._feasible.clear()
        self._eligible.clear()

    def lose_node(self, node: str, silent_s: float) -> list[Event]:
        """The decisions for a node that stopped heart-beating for ``silent_s`` seconds.

        ``NodeLost`` then ``JobPreempted(reason="node_lost")`` for every job with a worker on it
        (by job id), all with :attr:`epoch`. Unknown node: ``[]``. Changes nothing.
        """
        if node not in self._nodes:
            return []
        out: list[Event] = [NodeLost(node=node, epoch=self.epoch, silent_s=silent_s)]
        for job_id in sorted(self._node_jobs.get(node, {})):
            job = self._jobs[job_id]
            out.append(
                JobPreempted(
                    job_id=job_id,
                    epoch=self.epoch,
                    reason="node_lost",
                    message=words.node_lost(node, silent_s),
                    preemptions=job.preemptions,
                )
            )
        return out

    # ------------------------------------------------------------------------------ plans

    def _plan(self, job: JobRecord) -> Plan:
        """The job's options in flavour order, or its static verdict (cached per tenant and shape)."""
        key = (job.tenant, job.shape)
        plan = self._plans.get(key)
        if plan is None:
            plan = self._plans[key] = self._make_plan(job)
        return plan

    def _make_plan(self, job: JobRecord) -> Plan:
        if job.invalid is not None:
            return Plan((), words.unschedulable(job, job.invalid))
        if not job.gpu:
            requests = job.requests(None, 0)
            if not self._fits_empty(requests):
                return Plan((), words.unschedulable(job, words.worker_text(requests), nodes=self._usable_nodes()))
            return Plan((Option(None, requests, 0),), None)
        models = job.allowed_models or tuple(sorted(self._model_memory))
        feasible: dict[str, tuple[Request, ...]] = {}
        for model in models:
            requests = job.requests(model, self._model_memory.get(model, 0))
            if self._fits_empty(requests):
                feasible[model] = requests
        if not feasible:
            sample = job.requests(None, 0)
            return Plan((), words.unschedulable(job, words.worker_text(sample), nodes=self._usable_nodes()))
        options = tuple(
            Option(m, feasible[m], job.quota_milli(feasible[m]))
            for m in self.quota.models_of(job.tenant)
            if m in feasible
        )
        if not options:
            return Plan((), words.no_quota(job, list(feasible)))
        return Plan(options, None)

    def _usable_nodes(self) -> int:
        """How many registered nodes are not lost (only asked on the rare unschedulable path)."""
        return sum(1 for name in self._nodes if not self.node_lost(name))

    def _fits_empty(self, requests: tuple[Request, ...]) -> bool:
        """Whether the usable nodes, empty, could hold the whole gang (cached until nodes change)."""
        fits = self._feasible.get(requests)
        if fits is None:
            fits = self._feasible[requests] = self._empty.place_gang(requests, self._first_fit) is not None
        return fits

    def _eligible_nodes(self, request: Request) -> tuple[str, ...]:
        """Usable nodes that could hold one worker ``request`` when empty (cached until nodes change)."""
        names = self._eligible.get(request)
        if names is None:
            names = self._eligible[request] = tuple(
                name for name, node in self._nodes.items() if name not in self._lost and can_hold(node, request)
            )
        return names

    # ------------------------------------------------------------------------------ decide

    def decide(self, now: float) -> list[Event]:
        """The decisions of one scheduling cycle at ``now`` (seconds), in the order to append them.

        Every decision carries :attr:`epoch`. The core is unchanged afterwards; apply the
        returned events (in order) to make them so. See the module docstring for the cycle.
        """
        if not self._pending.tenants and not self._admitted:
            return []
        cycle = Cycle(self, now)
        cycle.run()
        return cycle.out

    # ------------------------------------------------------------------------------ explain

    def explain(self, job_id: str, now: float) -> str:
        """Why the job waits (reason and the numbers of the moment) and what would let it run.

        For a job that is not pending: where it runs, or how it ended.
        """
        job = self._jobs.get(job_id)
        if job is None:
            return f"there is no job {job_id}."
        if job.state == "placed":
            return words.explain_placed(job, now)
        if job.state == "admitted":
            return f"job {job_id} is admitted ({gpus(job.milli)} {job.gpu_model} GPUs charged) and about to be placed."
        if job.state in ("finished", "cancelled"):
            return f"job {job_id} has ended ({job.outcome})."
        lines: list[str] = []
        plan = self._plan(job)
        if plan.verdict is not None:
            if plan.verdict != job.last_queued:
                lines.append(f"now: {plan.verdict[0]}: {plan.verdict[1]}")
        else:
            lines.extend(self._live_findings(job, plan, now))
        ahead = sum(1 for other in self._pending.jobs() if other.tenant == job.tenant and other.order < job.order)
        return words.explain_pending(job, now, ahead, lines)

    def _live_findings(self, job: JobRecord, plan: Plan, now: float) -> list[str]:
        lines: list[str] = []
        first = plan.options[0]
        budget = self.budget.check(job.tenant, job.project, first.milli, job.max_runtime_s, now)
        if not budget.ok:
            lines.append(f"now: BudgetExhausted: {budget.message}")
        for option in plan.options:
            label = option.model or "CPU"
            check = self.quota.check(job.tenant, job.project, option.model, option.milli)
            if not check.ok:
                lines.append(f"on {label}: {check.reason}: {check.message}")
                continue
            eligible = self._eligible_nodes(option.requests[0])
            free = sorted((self._node_free.get(n, 0) for n in eligible if self.cluster.is_healthy(n)), reverse=True)
            need = option.milli // max(1, job.workers)
            room = sum(1 for f in free if f >= need)
            most = gpus(free[0]) if free else "0.000"
            fits = (
                self.cluster.place_gang(option.requests, self.policy) is not None
                if len(option.requests) > 1
                else self.cluster.place(option.requests[0], self.policy) is not None
            )
            state = (
                "it fits now and is placed by the next cycle unless jobs ahead of it take the room"
                if fits
                else ("it does not fit now")
            )
            lines.append(
                f"on {label}: quota allows {gpus(option.milli)} GPUs ({gpus(check.borrowed_after)} of it borrowed); "
                f"{len(eligible)} node(s) could hold a worker, {room} have {gpus(need)} GPUs free now, the freest has "
                f"{most} free; {state}"
            )
        return lines

    # ------------------------------------------------------------------------------ checks

    def check_invariants(self) -> None:
        """Verify the core against itself (for tests).

        Per device allocated <= capacity (``ClusterState.check_invariants``); quota usage equals
        the sum of the live admissions (``QuotaBook.check_invariants``); the live allocations
        are exactly the placed jobs' assignments; queues hold exactly the pending jobs; nobody was
        preempted more than ``max_preemptions`` times.

        Raises:
            CoreInvariantError: the first inconsistency found (``AssertionError`` from the ledgers).
        """
        self.cluster.check_invariants()
        live = [
            (j.tenant, j.project, j.gpu_model, j.milli)
            for j in self._jobs.values()
            if j.state in ("admitted", "placed")
        ]
        self.quota.check_invariants(live)
        held: dict[Assignment, int] = {}
        for job in self._jobs.values():
            if job.state == "placed":
                if len(job.assignments) != job.workers:
                    raise CoreInvariantError(f"job {job.job_id}: {len(job.assignments)} assignments")
                for a in job.assignments:
                    held[a] = held.get(a, 0) + 1
            elif job.assignments:
                raise CoreInvariantError(f"job {job.job_id} ({job.state}) holds assignments")
            if job.preemptions > self.config.max_preemptions:
                raise CoreInvariantError(f"job {job.job_id} preempted {job.preemptions} times")
            if job.state == "admitted" and job.job_id not in self._admitted:
                raise CoreInvariantError(f"job {job.job_id}: admitted but not indexed")
            if job.state == "placed" and job.job_id not in self._running.get(job.tenant, {}):
                raise CoreInvariantError(f"job {job.job_id}: placed but not indexed")
        live_allocs: dict[Assignment, int] = {}
        for a in self.cluster.allocations():
            live_allocs[a] = live_allocs.get(a, 0) + 1
        if held != live_allocs:
            raise CoreInvariantError("live allocations differ from the placed jobs' assignments")
        queued = {j.job_id for q in self._pending.subqueues() for j in q.members.values()}
        pending = {j.job_id for j in self._jobs.values() if j.state == "pending"}
        if queued != pending:
            raise CoreInvariantError(f"queues hold {len(queued)} jobs, {len(pending)} are pending")
        for name, free in self._node_free.items():
            used = sum(a.gpu_milli for a in self.cluster.allocations(name)) if name in self._nodes else 0
            if free != GPU_MILLI * len(self._nodes[name].devices) - used:
                raise CoreInvariantError(f"node {name}: free milli {free}")
