"""Stateful property tests of SchedulerCore: random submit/cancel/finish/decide/node/quota/time sequences.

After every step: devices never over-allocated, quota usage equal to the live allocations (no leak
after preemption, cancel, failure or node loss: Kueue #14811, #6035, HAMi #2923, #1458), the
preemption cap, no preemption loop (Kueue #3779, Volcano #4947), reclaim within one cycle,
``decide`` leaves the core unchanged, and a fresh core fed the same log decides the same.
"""

from __future__ import annotations

from collections import Counter

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from tessera_contracts.events.scheduler import JobAdmitted, JobPlaced, JobPreempted, JobQueued, NodeLost
from tessera_scheduler.domain import CoreConfig, JobRecord, SchedulerCore
from tessera_scheduler.domain.preemption import evictable
from tests.scheduler.test_core_support import World, node_event, quota_event

TENANTS = ("a", "b", "c")
NODES = ("n1", "n2", "n3")
CONFIG = CoreConfig(placement="fgd", min_runtime_s=60, max_preemptions=2, starvation_s=900, max_reservations=2)


def _snapshot(core: SchedulerCore) -> object:
    jobs = [
        (j.job_id, j.state, j.gpu_model, j.milli, j.assignments, j.last_queued, j.preemptions, j.gen, j.placed_at)
        for j in core.jobs()
    ]
    usage = [(t, m, core.quota.usage(t, m), core.quota.jobs(t)) for t in TENANTS for m in ("A100", "T4")]
    healthy = [(n.name, core.cluster.is_healthy(n.name)) for n in core.cluster.nodes()]
    return jobs, usage, sorted(map(repr, core.cluster.allocations())), healthy


def _reclaim_fit(core: SchedulerCore, job: JobRecord, now: float) -> bool:
    """Whether ``job``'s tenant is within nominal with it and it fits once every allowed victim is gone."""
    plan = core._plan(job)
    if plan.verdict is not None or not plan.options:
        return False
    quota = core.quota
    config = core.config
    if not core.budget.check(job.tenant, job.project, plan.options[0].milli, job.max_runtime_s, now).ok:
        return False
    running = [j for j in core.jobs() if j.state == "placed"]
    for option in plan.options:
        model = option.model
        if model is None or quota.usage(job.tenant, model) + option.milli > quota.nominal(job.tenant, model):
            continue
        victims: list[JobRecord] = []
        for member in quota.cohort_members(job.tenant):
            borrowed = quota.borrowed(member, model)
            if member == job.tenant or borrowed <= 0:
                continue
            mine = sorted(
                (
                    j
                    for j in running
                    if j.tenant == member
                    and j.gpu_model == model
                    and evictable(j, now, config.min_runtime_s, config.max_preemptions)
                ),
                key=lambda j: (j.priority, -(j.placed_at or 0.0), -j.seq),
            )
            for j in mine:
                if borrowed <= 0:
                    break
                victims.append(j)
                borrowed -= j.milli
        victims += [
            j
            for j in running
            if j.tenant == job.tenant
            and j.priority < job.priority
            and j.gpu_model == model
            and evictable(j, now, config.min_runtime_s, config.max_preemptions)
        ]
        for v in victims:
            quota.refund(v.tenant, v.project, v.gpu_model, v.milli)
        check = quota.check(job.tenant, job.project, model, option.milli)
        for v in reversed(victims):
            quota.charge(v.tenant, v.project, v.gpu_model, v.milli)
        if not check.ok:
            continue
        released = [a for v in victims for a in v.assignments]
        if core.cluster.fits_if_released(option.requests, released, core.policy) is not None:
            return True
    return False


class CoreMachine(RuleBasedStateMachine):
    """A small platform: three tenants in one cohort, three nodes of two models."""

    def __init__(self) -> None:
        super().__init__()
        self.w = World(CONFIG)
        self.pairs: dict[tuple[str, str], int] = {}
        self.evictions: Counter[str] = Counter()

    @initialize()
    def setup(self) -> None:
        self.w.nodes([node_event("n1", 4), node_event("n2", 4), node_event("n3", 2, model="T4", memory_mib=16384)])
        for i, tenant in enumerate(TENANTS):
            self.w.quota(tenant, {"A100": (2 + i, None, None), "T4": (1, None, None)}, cohort="co")

    # -- the outside world ------------------------------------------------------------------------

    @rule(
        jobs=st.lists(
            st.tuples(
                st.sampled_from(TENANTS),
                st.sampled_from([0, 1, 1, 1, 2, 4]),
                st.sampled_from([1000, 1000, 500, 250]),
                st.sampled_from([1, 1, 1, 2]),
                st.integers(0, 2),
                st.booleans(),
                st.sampled_from([(), (), ("A100",), ("T4",)]),
                st.sampled_from([None, None, 3600]),
            ),
            min_size=1,
            max_size=4,
        )
    )
    def submit(self, jobs: list[tuple[str, int, int, int, int, bool, tuple[str, ...], int | None]]) -> None:
        for tenant, gpus, fraction, workers, priority, preemptible, models, runtime in jobs:
            self.w.submit(
                tenant,
                gpus=gpus,
                milli=fraction if gpus == 1 else 1000,
                workers=workers,
                priority=priority,
                preemptible=preemptible,
                models=models,
                cpu_milli=1000 * gpus,
                max_runtime_s=runtime,
            )

    @rule(tenant=st.sampled_from(TENANTS), count=st.integers(3, 8), priority=st.integers(0, 2))
    def burst(self, tenant: str, count: int, priority: int) -> None:
        """Many one-GPU jobs of one tenant: it borrows, and others then reclaim."""
        for _ in range(count):
            self.w.submit(tenant, priority=priority, models=("A100",), cpu_milli=1000)

    def _pick(self, data: st.DataObject, states: tuple[str, ...]) -> JobRecord | None:
        jobs = [j for j in self.w.core.jobs() if j.state in states]
        if not jobs:
            return None
        return data.draw(st.sampled_from(jobs))

    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        job = self._pick(data, ("pending", "placed", "admitted"))
        if job is not None:
            self.w.cancel(job.job_id)

    @rule(data=st.data(), outcome=st.sampled_from(["succeeded", "failed", "killed"]))
    def finish(self, data: st.DataObject, outcome: str) -> None:
        job = self._pick(data, ("placed",))
        if job is not None:
            self.w.finish(job.job_id, outcome)

    @rule(node=st.sampled_from(NODES), really=st.sampled_from([True, False, False]))
    def lose_node(self, node: str, really: bool) -> None:
        if not really:  # node loss is rarer than the rest
            return
        events = self.w.core.lose_node(node, silent_s=30)
        for e in events:
            if isinstance(e, JobPreempted):
                self.evictions[e.job_id] += 1
            self.w.apply(e)

    @rule(node=st.sampled_from(NODES), gpus=st.sampled_from([2, 4]))
    def register_node(self, node: str, gpus: int) -> None:
        model = "T4" if node == "n3" else "A100"
        self.w.apply(node_event(node, gpus, model=model, memory_mib=16384 if model == "T4" else 81920))

    @rule(
        tenant=st.sampled_from(TENANTS),
        nominal=st.integers(0, 6),
        borrow=st.sampled_from([None, 0, 2]),
        lend=st.sampled_from([None, 0, 1]),
        max_jobs=st.sampled_from([None, None, 3]),
    )
    def set_quota(self, tenant: str, nominal: int, borrow: int | None, lend: int | None, max_jobs: int | None) -> None:
        lending = None if lend is None else min(lend, nominal)
        event = quota_event(
            tenant, {"A100": (nominal, borrow, lending), "T4": (1, None, None)}, cohort="co", max_jobs=max_jobs
        )
        assert self.w.apply(event)

    # -- the scheduler ------------------------------------------------------------------------------

    @rule(seconds=st.sampled_from([0, 1, 30, 61, 300, 1000]))
    def decide_and_apply(self, seconds: int) -> None:
        w = self.w
        w.now += seconds
        core = w.core
        now = w.now
        before = _snapshot(core)
        starving = any(
            j.last_queued is not None
            and j.last_queued[0] in ("NoFit", "GangIncomplete", "Reserved", "QuotaExceeded")
            and now - j.submitted_at >= CONFIG.starvation_s
            for j in core.pending()
        )
        reclaimers = [] if starving else [j for j in core.pending() if _reclaim_fit(core, j, now)]
        events = core.decide(now)
        assert _snapshot(core) == before, "decide() changed the core"
        assert core.decide(now) == events, "decide() is not repeatable"

        replay = SchedulerCore(CONFIG)
        for event, at in w.log:
            replay.apply(event, at)
        assert replay.decide(now) == events, "a fresh core fed the same log decides differently"

        self._check_decisions(events)
        for e in events:
            assert w.apply(e), e
            if isinstance(e, JobPreempted):
                self.evictions[e.job_id] += 1
        core.check_invariants()

        admitted = {e.job_id for e in events if isinstance(e, JobAdmitted)}
        for job in reclaimers:
            mine = {j.job_id for j in core.jobs() if j.tenant == job.tenant} & admitted
            assert mine or admitted, f"{job.job_id} of {job.tenant} could fit by reclaim but nothing was admitted"

    def _check_decisions(self, events: list[object]) -> None:
        core = self.w.core
        preempted: list[str] = []
        admitted: list[str] = []
        for i, e in enumerate(events):
            if isinstance(e, JobPreempted):
                victim = core.job(e.job_id)
                assert victim is not None and victim.state == "placed"
                assert e.reason in ("priority", "reclaim") and e.preemptor_job_id is not None
                preemptor = core.job(e.preemptor_job_id)
                assert preemptor is not None and preemptor.state == "pending"
                assert e.preemptions == victim.preemptions + 1 <= CONFIG.max_preemptions
                assert victim.placed_at is not None and self.w.now - victim.placed_at >= CONFIG.min_runtime_s
                assert victim.preemptible
                if e.reason == "priority":
                    assert victim.tenant == preemptor.tenant and victim.priority < preemptor.priority
                else:
                    assert victim.tenant != preemptor.tenant
                    assert victim.tenant in core.quota.cohort_members(preemptor.tenant)
                pair = (preemptor.job_id, victim.job_id)
                # the same preemptor evicts the same victim again only if it was itself evicted since
                seen = self.pairs.get(pair)
                assert seen is None or self.evictions[preemptor.job_id] > seen, f"preemption loop {pair}"
                self.pairs[pair] = self.evictions[preemptor.job_id]
                preempted.append(e.job_id)
                # the preemptor is admitted and placed right after its victims
                rest = events[i + 1 :]
                assert any(isinstance(x, JobAdmitted) and x.job_id == preemptor.job_id for x in rest)
            elif isinstance(e, JobAdmitted):
                admitted.append(e.job_id)
                assert i + 1 < len(events)
                nxt = events[i + 1]
                assert isinstance(nxt, JobPlaced) and nxt.job_id == e.job_id
            elif isinstance(e, JobQueued):
                job = core.job(e.job_id)
                assert job is not None and job.last_queued != (e.reason, e.message), "JobQueued without change"
            else:
                assert isinstance(e, JobPlaced | NodeLost)
        assert len(preempted) == len(set(preempted)), "a job preempted twice in one cycle"
        assert not set(preempted) & set(admitted), "a victim admitted in the cycle it was evicted"
        assert len(admitted) == len(set(admitted))

    @invariant()
    def consistent(self) -> None:
        self.w.core.check_invariants()


# 1,000 random sequences of up to 40 steps each (about a minute on the 2-core reference machine).
CoreMachine.TestCase.settings = settings(
    max_examples=1000,
    stateful_step_count=40,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
TestCoreMachine = CoreMachine.TestCase
