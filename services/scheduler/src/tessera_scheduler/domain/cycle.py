"""One scheduling cycle of :class:`~tessera_scheduler.domain.core.SchedulerCore` (``decide``).

The cycle runs inside ``ClusterState.trial()`` and logs every quota charge it simulates, so the
core is unchanged afterwards; what it decided is :attr:`Cycle.out`, in append order. The steps
are described in ``core.py``'s module docstring.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING

from tessera_contracts.events.scheduler import (
    DeviceShareInfo,
    JobAdmitted,
    JobPlaced,
    JobPreempted,
    JobQueued,
    WorkerPlacement,
)
from tessera_contracts.registry import Event
from tessera_scheduler.domain import explain as words
from tessera_scheduler.domain.jobs import JobRecord, Verdict
from tessera_scheduler.domain.plan import CoreInvariantError, Option
from tessera_scheduler.domain.preemption import Victim, candidates, evictable_sorted, minimal_victims
from tessera_scheduler.domain.queues import Rank, ShapeQueue, Sweep, reserve_nodes
from tessera_scheduler.domain.quota import QuotaCheck
from tessera_scheduler.placement import (
    Assignment,
    Request,
)

if TYPE_CHECKING:
    from tessera_scheduler.domain.core import SchedulerCore

_STARVING_REASONS = ("NoFit", "GangIncomplete", "Reserved")


class Cycle:
    """One ``decide``: the simulated decisions and everything needed to undo them."""

    def __init__(self, core: SchedulerCore, now: float) -> None:
        self.core = core
        self.now = now
        self.out: list[Event] = []
        self.quota_log: list[tuple[int, str, str, str | None, int]] = []
        self.closed: dict[str, str] = {}
        self.reserved_for: dict[str, list[str]] = {}
        self.holds: dict[tuple[str, str | None], JobRecord] = {}
        self.blocked: dict[tuple[Request, ...], Verdict] = {}
        self.decided: dict[str, None] = {}
        self.evicted: dict[str, None] = {}
        self.shares: dict[str, float] = {}
        self.budget_extra: dict[tuple[str, str | None], float] = {}
        self.failed_preemption: dict[tuple[object, ...], None] = {}
        self.victims: dict[tuple[str, str | None], list[JobRecord]] = {}

    # -- driver ---------------------------------------------------------------------------------

    def run(self) -> None:
        """Decide: place admitted jobs, reserve for starving ones, then sweep the pending queues."""
        core = self.core
        with core.cluster.trial():
            try:
                self._place_admitted()
                self._reserve()
                sweep = Sweep(core._pending, self._rank)
                try:
                    while (item := sweep.next()) is not None:
                        job, queue = item
                        verdict = self._try(job, sweep)
                        if verdict is None:
                            sweep.advance(queue)
                        else:
                            self._verdict(queue, verdict)
                            sweep.close(queue)
                finally:
                    sweep.restore()
            finally:
                for name in self.closed:
                    core.cluster.set_healthy(name, True)
                self._undo_quota()

    def _rank(self, job: JobRecord) -> Rank:
        core = self.core
        share = self.shares.get(job.tenant)
        if share is None:
            share = self.shares[job.tenant] = core.fairshare.dominant_share(job.tenant, self.now)
        borrow = 1
        plan = core._plan(job)
        if plan.verdict is None:
            option = plan.options[0]
            model = option.model
            quota = core.quota
            if model is None or quota.usage(job.tenant, model) + option.milli <= quota.nominal(job.tenant, model):
                borrow = 0
        return (borrow, share, -job.priority, job.submitted_at, job.job_id)

    # -- quota simulation -------------------------------------------------------------------------

    def _charge(self, job: JobRecord, model: str | None, milli: int) -> int:
        self.quota_log.append((+1, job.tenant, job.project, model, milli))
        return self.core.quota.charge(job.tenant, job.project, model, milli)

    def _refund(self, tenant: str, project: str, model: str | None, milli: int) -> None:
        self.core.quota.refund(tenant, project, model, milli)
        self.quota_log.append((-1, tenant, project, model, milli))

    def _undo_quota(self) -> None:
        quota = self.core.quota
        while self.quota_log:
            sign, tenant, project, model, milli = self.quota_log.pop()
            if sign > 0:
                quota.refund(tenant, project, model, milli)
            else:
                quota.charge(tenant, project, model, milli)

    # -- step 1: admitted but not placed --------------------------------------------------------

    def _place_admitted(self) -> None:
        core = self.core
        for job in list(core._admitted.values()):
            requests = job.requests(job.gpu_model, core._model_memory.get(job.gpu_model or "", 0))
            found = self._place_now(requests)
            if found is not None:
                core.cluster.allocate_all(found)
                self._emit_placed(job, job.gpu_model, found)
                continue
            self._refund(job.tenant, job.project, job.gpu_model, job.milli)
            reason, message = words.no_fit(requests, partial=False)
            self.out.append(JobQueued(job_id=job.job_id, epoch=core.epoch, reason=reason, message=message))

    # -- step 2: reservations -------------------------------------------------------------------

    def _reserve(self) -> None:
        core = self.core
        config = core.config
        if config.max_reservations <= 0:
            return
        starving: list[JobRecord] = []
        for queue in core._pending.subqueues():
            head = queue.peek()
            if head is None or head.last_queued is None or head.last_queued[0] not in _STARVING_REASONS:
                continue
            if self.now - head.submitted_at >= config.starvation_s:
                starving.append(head)
        starving.sort(key=self._rank)
        for job in starving[: config.max_reservations]:
            plan = core._plan(job)
            if plan.verdict is not None:
                continue
            option = next(
                (o for o in plan.options if core.quota.check(job.tenant, job.project, o.model, o.milli).ok), None
            )
            if option is None:
                continue
            eligible = core._eligible_nodes(option.requests[0])
            names = reserve_nodes(eligible, core._node_free, job.workers, self.closed)
            mine: list[str] = []
            for name in names:
                if core.cluster.is_healthy(name):
                    core.cluster.set_healthy(name, False)
                    self.closed[name] = job.job_id
                    mine.append(name)
            if mine:
                self.reserved_for[job.job_id] = mine

    @contextmanager
    def _opened(self, job: JobRecord) -> Iterator[None]:
        """Open the job's own reserved nodes while it is tried; close them again unless it was placed."""
        mine = self.reserved_for.get(job.job_id)
        if not mine:
            yield
            return
        cluster = self.core.cluster
        for name in mine:
            cluster.set_healthy(name, True)
            del self.closed[name]
        try:
            yield
        finally:
            if job.job_id in self.decided:
                del self.reserved_for[job.job_id]
            else:
                for name in mine:
                    cluster.set_healthy(name, False)
                    self.closed[name] = job.job_id

    # -- step 3: one job ------------------------------------------------------------------------

    def _try(self, job: JobRecord, sweep: Sweep) -> Verdict | None:
        """Admit and place ``job`` (emitting its decisions) and return None, or return its verdict."""
        core = self.core
        plan = core._plan(job)
        if plan.verdict is not None:
            return plan.verdict
        options = plan.options
        if not self._budget_ok(job, options[0]):
            return words.budget_wait(job)
        with self._opened(job):
            owner = job.job_id in self.reserved_for
            quota_fail: tuple[Option, QuotaCheck] | None = None
            place_fail: Verdict | None = None
            held: Verdict | None = None
            open_options: list[Option] = []
            for option in options:
                hold = self.holds.get((job.tenant, option.model))
                if hold is not None and hold is not job and job.priority <= hold.priority:
                    held = held or words.reserved(hold, quota=True)
                    continue
                open_options.append(option)
                check = core.quota.check(job.tenant, job.project, option.model, option.milli)
                if not check.ok:
                    quota_fail = quota_fail or (option, check)
                    continue
                found = self._place(option.requests, use_cache=not owner)
                if isinstance(found, list):
                    self._admit(job, option, found)
                    return None
                place_fail = place_fail or found
            for option in open_options:
                if self._preempt(job, option, sweep):
                    return None
        if place_fail is not None:
            return place_fail
        if held is not None and quota_fail is None:
            return held
        assert quota_fail is not None
        option, check = quota_fail
        if (
            check.reason == "QuotaExceeded"
            and self.now - job.submitted_at >= core.config.starvation_s
            and len({h.job_id for h in self.holds.values()}) < core.config.max_reservations
        ):
            for o in options:
                self.holds.setdefault((job.tenant, o.model), job)
        return words.quota_wait(job, check, option.model, option.milli)

    def _budget_ok(self, job: JobRecord, option: Option) -> bool:
        runtime = job.max_runtime_s
        extra = max(
            self.budget_extra.get((job.tenant, None), 0.0), self.budget_extra.get((job.tenant, job.project), 0.0)
        )
        if runtime is not None and extra and option.milli:
            runtime += math.ceil(extra / option.milli)
        return self.core.budget.check(job.tenant, job.project, option.milli, runtime, self.now).ok

    def _place_now(self, requests: tuple[Request, ...]) -> list[Assignment] | None:
        core = self.core
        if len(requests) == 1:
            one = core.cluster.place(requests[0], core.policy)
            return None if one is None else [one]
        return core.cluster.place_gang(requests, core.policy)

    def _place(self, requests: tuple[Request, ...], *, use_cache: bool) -> list[Assignment] | Verdict:
        """Where the gang goes now, or why it does not fit (cached per shape for the cycle)."""
        if use_cache:
            cached = self.blocked.get(requests)
            if cached is not None:
                return cached
        found = self._place_now(requests)
        if found is not None:
            return found
        verdict = self._classify(requests)
        if use_cache:
            self.blocked[requests] = verdict
        return verdict

    def _classify(self, requests: tuple[Request, ...]) -> Verdict:
        """Why a gang that does not fit now waits: ``Reserved``, ``GangIncomplete`` or ``NoFit``."""
        core = self.core
        if self.closed:
            cluster = core.cluster
            names = list(self.closed)
            for name in names:
                cluster.set_healthy(name, True)
            try:
                found = self._place_now(requests)
            finally:
                for name in names:
                    cluster.set_healthy(name, False)
            if found is not None:
                owners = [self.closed[a.node] for a in found if a.node in self.closed]
                if owners:
                    return words.reserved(core._jobs[owners[0]], quota=False)
        partial = len(requests) > 1 and core.cluster.place(requests[0], core.policy) is not None
        return words.no_fit(requests, partial=partial)

    def _admit(self, job: JobRecord, option: Option, found: list[Assignment]) -> None:
        core = self.core
        core.cluster.allocate_all(found)
        borrowed = self._charge(job, option.model, option.milli)
        if job.max_runtime_s is not None and option.milli:
            spend = float(option.milli) * job.max_runtime_s
            for key in ((job.tenant, None), (job.tenant, job.project)):
                self.budget_extra[key] = self.budget_extra.get(key, 0.0) + spend
        self.decided[job.job_id] = None
        self.out.append(
            JobAdmitted(
                job_id=job.job_id,
                epoch=core.epoch,
                gpu_model=option.model,
                milli=option.milli,
                borrowed_milli=borrowed,
                cohort=core.quota.cohort_of(job.tenant),
            )
        )
        self._emit_placed(job, option.model, found)

    def _emit_placed(self, job: JobRecord, model: str | None, found: Sequence[Assignment]) -> None:
        placements = tuple(
            WorkerPlacement(
                worker=i,
                node=a.node,
                devices=tuple(
                    DeviceShareInfo(uuid=d.uuid, milli=d.milli, memory_mib=d.memory_mib, mig_profile=d.mig_profile)
                    for d in a.devices
                ),
                cpu_milli=a.cpu_milli,
                memory_mib=a.host_memory_mib,
            )
            for i, a in enumerate(found)
        )
        self.out.append(JobPlaced(job_id=job.job_id, epoch=self.core.epoch, gpu_model=model, placements=placements))

    def _verdict(self, queue: ShapeQueue, verdict: Verdict) -> None:
        """The sub-queue waits with ``verdict``: ``JobQueued`` for each of its jobs whose verdict changes."""
        epoch = self.core.epoch
        reason, message = verdict
        for job in queue.differing(verdict, self.decided):
            self.out.append(JobQueued(job_id=job.job_id, epoch=epoch, reason=reason, message=message))

    # -- preemption -----------------------------------------------------------------------------

    def _evictable(self, tenant: str, model: str | None) -> list[JobRecord]:
        """The tenant's possible victims on ``model`` in eviction order (computed once per cycle)."""
        key = (tenant, model)
        found = self.victims.get(key)
        if found is None:
            config = self.core.config
            found = self.victims[key] = evictable_sorted(
                self.core._running.get(tenant, {}).values(),
                model,
                now=self.now,
                min_runtime_s=config.min_runtime_s,
                max_preemptions=config.max_preemptions,
            )
        return found

    def _preempt(self, job: JobRecord, option: Option, sweep: Sweep) -> bool:
        """Evict the fewest victims that make ``job`` fit on ``option`` and place it; False if none do."""
        core = self.core
        quota = core.quota
        tenant = job.tenant
        model = option.model
        within = model is None or quota.usage(tenant, model) + option.milli <= quota.nominal(tenant, model)
        borrowers: dict[str, tuple[int, Sequence[JobRecord]]] = {}
        if within and model is not None:
            for member in quota.cohort_members(tenant):
                if member == tenant or member not in core._running:
                    continue
                borrowed = quota.borrowed(member, model)
                if borrowed > 0:
                    borrowers[member] = (borrowed, self._evictable(member, model))
        own = self._evictable(tenant, model)
        if not borrowers and not (own and own[0].priority < job.priority):
            return False
        key = (tenant, job.project, model, job.priority, option.requests, within)
        if key in self.failed_preemption:
            return False
        cands = candidates(job, own, borrowers, self.evicted)

        def fits(victims: Sequence[Victim]) -> bool:
            refunded: list[JobRecord] = []
            try:
                for v in victims:
                    quota.refund(v.job.tenant, v.job.project, v.job.gpu_model, v.job.milli)
                    refunded.append(v.job)
                check = quota.check(tenant, job.project, model, option.milli)
            finally:
                for victim in reversed(refunded):
                    quota.charge(victim.tenant, victim.project, victim.gpu_model, victim.milli)
            if not check.ok:
                return False
            released = [a for v in victims for a in v.job.assignments]
            found = core.cluster.fits_if_released(option.requests, released, core.policy)
            if found is None:
                return False
            used.clear()
            used.update((a.node, None) for a in found)
            return True

        def narrow(victims: list[Victim]) -> list[Victim]:
            """The victims on the nodes the preemptor went to in the last fitting trial."""
            return [v for v in victims if any(a.node in used for a in v.job.assignments)]

        used: dict[str, None] = {}
        chosen = minimal_victims(cands, fits, narrow)
        if chosen is None:
            self.failed_preemption[key] = None
            return False
        for victim in chosen:
            v = victim.job
            for a in v.assignments:
                core.cluster.release(a)
            self._refund(v.tenant, v.project, v.gpu_model, v.milli)
            self.evicted[v.job_id] = None
            self.out.append(
                JobPreempted(
                    job_id=v.job_id,
                    epoch=core.epoch,
                    reason=victim.reason,
                    preemptor_job_id=job.job_id,
                    preemptor_tenant=job.tenant,
                    message=words.preempted(v, job, victim.reason),
                    preemptions=v.preemptions + 1,
                )
            )
        found = self._place_now(option.requests)
        if found is None:  # cannot happen: fits_if_released saw this very state
            raise CoreInvariantError(f"job {job.job_id} does not fit after evicting its victims")
        self._admit(job, option, found)
        self.blocked.clear()
        sweep.rerank(dict.fromkeys(v.job.tenant for v in chosen))
        return True
