"""Anti-starvation: a big job that waits too long under a stream of small ones gets nodes reserved."""

from __future__ import annotations

from tessera_scheduler.domain import CoreConfig
from tests.scheduler.test_core_support import World, node_event, placed_ids, queued


def _stream(w: World, big: str, until: float, running: list[str], step: float = 10, run_s: float = 100) -> float | None:
    """Submit two 1-GPU jobs every ``step`` s, each running ``run_s``; return when ``big`` is placed.

    ``running`` jobs end one per step at first (so that capacity frees steadily).
    """
    started: dict[str, float] = {j: w.now - run_s + step * (i + 1) for i, j in enumerate(running)}
    end = w.now + until
    while w.now < end:
        for job_id, t in list(started.items()):
            if w.now - t >= run_s:
                w.finish(job_id)
                del started[job_id]
        for _ in range(2):
            w.submit("t")
        events = w.cycle(advance=step)
        for job_id in placed_ids(events):
            if job_id == big:
                return w.now
            started[job_id] = w.now
    return None


def _world(starvation_s: float) -> World:
    w = World(CoreConfig(placement="best-fit", starvation_s=starvation_s))
    w.nodes([node_event("n1", 4), node_event("n2", 4)])
    w.quota("t", {"A100": (64, None, None)})
    return w


def test_without_reservation_a_big_job_starves_under_small_ones() -> None:
    w = _world(starvation_s=10**9)
    first = [w.submit("t") for _ in range(8)]
    w.cycle()
    big = w.submit("t", gpus=4)
    assert _stream(w, big, until=3000, running=first) is None


def test_reservation_eventually_runs_the_starving_job() -> None:
    w = _world(starvation_s=300)
    first = [w.submit("t") for _ in range(8)]
    w.cycle()
    big = w.submit("t", gpus=4)
    submitted = w.now
    placed_at = _stream(w, big, until=3000, running=first)
    assert placed_at is not None
    assert placed_at - submitted >= 300  # it starved first...
    assert placed_at - submitted <= 300 + 100 + 30  # ...then one node drained for it


def test_jobs_held_back_by_a_reservation_are_told_so() -> None:
    w = _world(starvation_s=100)
    small = [w.submit("t") for _ in range(8)]
    w.cycle()
    big = w.submit("t", gpus=4)
    assert queued(w.cycle(advance=1)) == {big: "NoFit"}
    w.now += 200
    w.finish(small[0])  # n1 (or n2) has one free GPU, reserved for the big job
    latecomer = w.submit("t")
    events = w.cycle(advance=1)
    assert queued(events) == {latecomer: "Reserved"}
    text = w.core.explain(latecomer, w.now)
    assert "Reserved" in text and "held for an older job" in text and big not in text  # may be another tenant's


def test_a_quota_starved_job_holds_its_tenants_quota_against_lower_priority_jobs() -> None:
    w = World(CoreConfig(placement="best-fit", starvation_s=100))
    w.nodes([node_event("n1", 8)])
    w.quota("t", {"A100": (4, None, None)})
    running = [w.submit("t", priority=1) for _ in range(4)]
    w.cycle()
    big = w.submit("t", gpus=4, priority=1)
    assert queued(w.cycle(advance=1)) == {big: "QuotaExceeded"}
    w.now += 200
    w.finish(running[0])
    small = w.submit("t", priority=1)
    urgent = w.submit("t", priority=9)
    events = w.cycle(advance=1)
    assert placed_ids(events) == [urgent]  # higher priority is not held back
    assert queued(events) == {small: "Reserved"}
    assert big in w.core.explain(small, w.now)  # a quota hold is within the tenant: it names the job
    w.finish(urgent)
    events = w.cycle(advance=1)
    assert placed_ids(events) == [] and w.state(small) == "pending"  # the freed quota waits for big
    for j in running[1:]:
        w.finish(j)
    events = w.cycle(advance=1)
    assert placed_ids(events)[0] == big
