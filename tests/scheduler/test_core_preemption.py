"""Preemption by the core: reclaim across a cohort, priority within a tenant, anti-thrash, minimal victims."""

from __future__ import annotations

from tessera_contracts.events.scheduler import JobAdmitted, JobPlaced, JobPreempted
from tessera_scheduler.domain import CoreConfig
from tests.scheduler.test_core_support import World, node_event, placed_ids, preempted, queued


def _cohort_world(config: CoreConfig | None = None) -> World:
    w = World(config)
    w.nodes([node_event("n1", 8), node_event("n2", 8)])
    w.quota("lender", {"A100": (8, None, None)}, cohort="c")
    w.quota("borrower", {"A100": (8, None, None)}, cohort="c")
    return w


def test_borrower_takes_idle_cohort_capacity_then_the_lender_reclaims_only_what_it_needs() -> None:
    w = _cohort_world()
    low = [w.submit("borrower", priority=1) for _ in range(8)]
    high = [w.submit("borrower", priority=5) for _ in range(8)]
    events = w.cycle()
    assert sorted(placed_ids(events)) == sorted(low + high)
    quota = w.core.quota
    assert quota.usage("borrower", "A100") == 16_000 and quota.borrowed("borrower", "A100") == 8000
    borrowed = [e for e in events if isinstance(e, JobAdmitted) and e.borrowed_milli > 0]
    assert len(borrowed) == 8 and all(e.cohort == "c" for e in borrowed)

    gang = w.submit("lender", workers=3)
    events = w.cycle(advance=600)
    victims = preempted(events)
    # the borrower's lowest-priority, most recently submitted jobs, exactly as many as needed
    assert [v.job_id for v in victims] == list(reversed(low))[:3]
    assert all(v.reason == "reclaim" and v.preemptor_job_id == gang and v.preemptor_tenant == "lender" for v in victims)
    assert all(v.preemptions == 1 for v in victims)
    # in the same decide(): the victims first, then the preemptor's admission and placement
    kinds = [type(e) for e in events]
    assert kinds[:5] == [JobPreempted] * 3 + [JobAdmitted, JobPlaced]
    assert w.state(gang) == "placed"
    for v in victims:
        assert w.state(v.job_id) == "pending"
    assert quota.usage("lender", "A100") == 3000 and quota.borrowed("borrower", "A100") == 5000


def test_reclaim_stops_when_the_borrower_no_longer_borrows() -> None:
    w = _cohort_world()
    jobs = [w.submit("borrower", priority=1) for _ in range(10)]  # borrows 2 GPUs
    w.cycle()
    assert w.core.quota.borrowed("borrower", "A100") == 2000
    # the lender wants its whole nominal quota: 8 GPUs; 6 are free, 2 must be reclaimed
    big = w.submit("lender", workers=8)
    events = w.cycle(advance=600)
    victims = preempted(events)
    assert len(victims) == 2 and w.state(big) == "placed"
    assert {v.job_id for v in victims} <= set(jobs)
    assert w.core.quota.borrowed("borrower", "A100") == 0


def test_a_borrowing_tenant_cannot_reclaim() -> None:
    w = _cohort_world()
    for _ in range(16):
        w.submit("borrower", priority=1)
    w.cycle()
    # the lender is above nominal with this job (9 GPUs): it may not reclaim
    j = w.submit("lender", workers=9)
    events = w.cycle(advance=600)
    assert preempted(events) == [] and w.state(j) == "pending"
    assert queued(events)[j] == "QuotaExceeded"


def test_priority_preemption_within_a_tenant_takes_lower_priority_newest_first() -> None:
    w = World()
    w.nodes([node_event("n1", 4)])
    w.quota("t", {"A100": (4, None, None)})
    low = [w.submit("t", priority=1) for _ in range(2)]
    mid = [w.submit("t", priority=3) for _ in range(2)]
    w.cycle()
    boss = w.submit("t", gpus=2, priority=10)
    events = w.cycle(advance=600)
    victims = preempted(events)
    assert [v.job_id for v in victims] == list(reversed(low))
    assert all(v.reason == "priority" and v.preemptor_job_id == boss for v in victims)
    assert w.state(boss) == "placed" and all(w.state(j) == "placed" for j in mid)


def test_no_preemption_of_equal_or_higher_priority_or_other_tenants_by_priority() -> None:
    w = World()
    w.nodes([node_event("n1", 2)])
    w.quota("t", {"A100": (2, None, None)})
    w.quota("u", {"A100": (2, None, None)})
    w.submit("t", priority=5)
    w.submit("u", priority=1)
    w.cycle()
    j = w.submit("t", priority=5)
    events = w.cycle(advance=600)
    assert preempted(events) == [] and w.state(j) == "pending"


def test_minimum_runtime_is_respected() -> None:
    w = World(CoreConfig(placement="best-fit", min_runtime_s=300))
    w.nodes([node_event("n1", 2)])
    w.quota("t", {"A100": (2, None, None)})
    low = [w.submit("t", priority=1) for _ in range(2)]
    w.cycle()
    boss = w.submit("t", gpus=2, priority=9)
    assert preempted(w.cycle(advance=100)) == []
    assert w.state(boss) == "pending"
    events = w.cycle(advance=200)
    assert sorted(v.job_id for v in preempted(events)) == sorted(low)


def test_preemption_cap_is_respected() -> None:
    w = World(CoreConfig(placement="best-fit", min_runtime_s=0, max_preemptions=1))
    w.nodes([node_event("n1", 1)])
    w.quota("t", {"A100": (1, None, None)})
    low = w.submit("t", priority=1)
    w.cycle()
    first = w.submit("t", priority=5)
    assert [v.job_id for v in preempted(w.cycle(advance=10))] == [low]
    w.finish(first)
    assert placed_ids(w.cycle(advance=10)) == [low]
    second = w.submit("t", priority=5)
    events = w.cycle(advance=10)
    assert preempted(events) == [] and w.state(second) == "pending" and w.state(low) == "placed"
    job = w.core.job(low)
    assert job is not None and job.preemptions == 1


def test_no_eviction_when_the_preemptor_would_still_not_fit() -> None:
    w = World(CoreConfig(placement="best-fit", min_runtime_s=0))
    w.nodes([node_event("n1", 4)])
    w.quota("t", {"A100": (8, None, None)})
    w.submit("t", gpus=2, priority=1, preemptible=False)
    soft = [w.submit("t", priority=1) for _ in range(2)]
    w.cycle()
    boss = w.submit("t", gpus=4, priority=9)
    events = w.cycle(advance=10)
    assert preempted(events) == [] and w.state(boss) == "pending"
    assert all(w.state(j) == "placed" for j in soft)


def test_a_preempted_job_keeps_its_submit_time_and_goes_before_later_jobs() -> None:
    w = World(CoreConfig(placement="best-fit", min_runtime_s=0))
    w.nodes([node_event("n1", 1)])
    w.quota("t", {"A100": (1, None, None)})
    victim = w.submit("t", priority=1)
    w.cycle()
    submitted = w.core.job(victim).submitted_at  # type: ignore[union-attr]
    boss = w.submit("t", priority=5)
    w.cycle(advance=50)
    later = w.submit("t", priority=1)
    w.cycle(advance=50)
    record = w.core.job(victim)
    assert record is not None and record.state == "pending" and record.submitted_at == submitted
    w.finish(boss)
    assert placed_ids(w.cycle(advance=10)) == [victim]
    assert w.state(later) == "pending"


def test_preemptor_is_placed_in_the_same_cycle_and_nobody_else_takes_the_room() -> None:
    w = World(CoreConfig(placement="best-fit", min_runtime_s=0))
    w.nodes([node_event("n1", 2)])
    w.quota("t", {"A100": (2, None, None)})
    w.quota("u", {"A100": (2, None, None)})
    lows = [w.submit("t", priority=1) for _ in range(2)]
    w.cycle()
    boss = w.submit("t", gpus=2, priority=9)
    other = w.submit("u")
    events = w.cycle(advance=10)
    assert sorted(v.job_id for v in preempted(events)) == sorted(lows)
    assert placed_ids(events) == [boss] and w.state(other) == "pending"
    # next cycle: nothing flips back
    events = w.cycle(advance=10)
    assert preempted(events) == [] and placed_ids(events) == []
