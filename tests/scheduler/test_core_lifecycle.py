"""The core as a fold: node loss, fencing, validation of decisions, JobQueued on change, purity of decide."""

from __future__ import annotations

import copy

from tessera_contracts.events.scheduler import (
    DeviceShareInfo,
    JobAdmitted,
    JobPlaced,
    JobPreempted,
    JobQueued,
    LeaderElected,
    NodeLost,
    WorkerPlacement,
)
from tessera_contracts.events.tenancy import GpuQuota, QuotaSet
from tessera_scheduler.domain import SchedulerCore
from tests.scheduler.test_core_support import World, node_event, placed_ids, queued


def _world() -> World:
    w = World()
    w.nodes([node_event("n1", 4), node_event("n2", 4)])
    w.quota("t", {"A100": (8, None, None)})
    return w


def test_node_loss_requeues_refunds_and_does_not_count_as_preemption() -> None:
    w = _world()
    gang = w.submit("t", gpus=4, workers=2)
    w.cycle()
    assert w.core.quota.usage("t", "A100") == 8000
    events = w.core.lose_node("n1", silent_s=60)
    assert isinstance(events[0], NodeLost) and events[0].node == "n1"
    assert [(e.job_id, e.reason) for e in events[1:]] == [(gang, "node_lost")]  # type: ignore[attr-defined]
    for e in events:
        assert w.apply(e)
    w.core.check_invariants()
    job = w.core.job(gang)
    assert job is not None and job.state == "pending" and job.preemptions == 0
    assert w.core.quota.usage("t", "A100") == 0 and w.core.cluster.allocated_milli == 0
    # n1 is unusable: the gang can no longer ever fit; a one-node job goes to n2
    small = w.submit("t", gpus=4)
    events = w.cycle(advance=1)
    assert queued(events) == {gang: "Unschedulable"} and placed_ids(events) == [small]
    assert all(p.node == "n2" for e in events if isinstance(e, JobPlaced) for p in e.placements)
    # the node comes back (same devices, nothing on it): usable again
    w.finish(small)
    assert w.apply(node_event("n1", 4))
    assert placed_ids(w.cycle(advance=1)) == [gang]


def test_reregistration_replaces_an_idle_node_and_keeps_a_busy_one() -> None:
    w = _world()
    assert w.apply(node_event("n1", 8))  # idle: replaced
    assert w.core.cluster.node("n1").gpus == 8
    j = w.submit("t", gpus=8)
    w.cycle()
    assert w.state(j) == "placed"
    assert not w.apply(node_event("n1", 2))  # busy and different: ignored, old inventory kept
    assert w.core.cluster.node("n1").gpus == 8
    assert w.apply(node_event("n1", 8))  # busy, same devices: fine
    w.core.check_invariants()


def test_fencing_ignores_decisions_of_another_epoch() -> None:
    w = _world()
    j = w.submit("t")
    assert w.apply(LeaderElected(epoch=2, holder="b"))
    stale = JobAdmitted(job_id=j, epoch=1, gpu_model="A100", milli=1000)
    assert not w.apply(stale)
    assert w.state(j) == "pending"
    events = w.core.decide(w.now)
    assert events and all(getattr(e, "epoch", 2) == 2 for e in events)
    for e in events:
        assert w.apply(e)
    assert w.state(j) == "placed"
    assert not w.apply(JobPreempted(job_id=j, epoch=1, reason="priority"))
    assert w.state(j) == "placed"


def test_job_queued_only_when_the_verdict_changes() -> None:
    w = World()
    w.nodes([node_event("n1", 2)])
    w.quota("t", {"A100": (8, None, None)})
    w.submit("t", gpus=2)
    w.cycle()
    waiting = [w.submit("t") for _ in range(3)]
    assert queued(w.cycle(advance=1)) == dict.fromkeys(waiting, "NoFit")
    assert w.cycle(advance=1) == []
    assert w.cycle(advance=1) == []
    newcomer = w.submit("t")
    assert queued(w.cycle(advance=1)) == {newcomer: "NoFit"}
    assert w.apply(QuotaSet(tenant="t", gpus=(GpuQuota(gpu_model="A100", nominal_milli=2000),)))
    assert queued(w.cycle(advance=1)) == dict.fromkeys([*waiting, newcomer], "QuotaExceeded")
    assert w.cycle(advance=1) == []


def test_apply_validates_decisions_against_the_state_it_meets() -> None:
    w = _world()
    j = w.submit("t")
    events = w.core.decide(w.now)
    admitted, placed = events
    assert isinstance(admitted, JobAdmitted) and isinstance(placed, JobPlaced)
    w.cancel(j)  # a cancel lands between the decision and its append
    assert not w.apply(admitted) and not w.apply(placed)
    w.core.check_invariants()
    k = w.submit("t")
    other = w.submit("t")
    events = w.core.decide(w.now)
    assert [type(e) for e in events] == [JobAdmitted, JobPlaced, JobAdmitted, JobPlaced]
    for e in events[:2]:
        assert w.apply(e)
    # a placement onto the devices k holds is refused; other stays admitted, then is placed elsewhere
    taken = events[1].placements[0]  # type: ignore[attr-defined]
    assert w.apply(events[2])
    clash = JobPlaced(job_id=other, epoch=0, gpu_model="A100", placements=(taken,))
    assert not w.apply(clash)
    assert w.state(other) == "admitted"
    w.core.check_invariants()
    events = w.cycle()
    assert placed_ids(events) == [other] and w.state(k) == "placed"
    # JobAdmitted only for pending jobs
    assert not w.apply(JobAdmitted(job_id=k, epoch=0, gpu_model="A100", milli=1000))
    bogus = WorkerPlacement(worker=0, node="n2", devices=(DeviceShareInfo(uuid="nope", milli=1000, memory_mib=1),))
    assert not w.apply(JobPlaced(job_id=k, epoch=0, gpu_model="A100", placements=(bogus,)))


def test_an_admitted_job_that_cannot_be_placed_goes_back_to_pending() -> None:
    w = World()
    w.nodes([node_event("n1", 1)])
    w.quota("t", {"A100": (8, None, None)})
    a = w.submit("t")
    b = w.submit("t")
    first = w.core.decide(w.now)
    assert w.apply(first[0]) and w.apply(first[1])
    assert w.apply(JobAdmitted(job_id=b, epoch=0, gpu_model="A100", milli=1000))  # e.g. a lost race
    events = w.cycle()
    assert [type(e) for e in events] == [JobQueued] and w.state(b) == "pending"
    assert w.core.quota.usage("t", "A100") == 1000 and w.state(a) == "placed"


def _snapshot(core: SchedulerCore) -> object:
    jobs = [
        (j.job_id, j.state, j.gpu_model, j.milli, j.assignments, j.last_queued, j.preemptions, j.gen)
        for j in core.jobs()
    ]
    usage = [(t, core.quota.usage(t, "A100"), core.quota.jobs(t)) for t in ("t", "u")]
    return (jobs, usage, sorted(map(repr, core.cluster.allocations())), [n.name for n in core.cluster.nodes()])


def test_decide_leaves_the_core_unchanged_and_is_deterministic() -> None:
    w = World()
    w.nodes([node_event("n1", 4), node_event("n2", 4)])
    w.quota("t", {"A100": (4, None, None)}, cohort="c")
    w.quota("u", {"A100": (4, None, None)}, cohort="c")
    for i in range(6):
        w.submit("u", priority=i % 3)
    w.cycle()
    for _ in range(3):
        w.submit("t", gpus=2)
    w.submit("t", gpus=4, workers=2)
    w.now += 1000
    before = _snapshot(w.core)
    first = w.core.decide(w.now)
    assert _snapshot(w.core) == before
    assert w.core.decide(w.now) == first
    assert any(isinstance(e, JobPreempted) for e in first)
    replay = SchedulerCore(copy.deepcopy(w.core.config))
    for event, at in w.log:
        assert replay.apply(event, at)
    assert replay.decide(w.now) == first
