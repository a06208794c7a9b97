"""The replay: an event-driven simulation in virtual time (seconds) over the placement layer.

Events are job arrivals and job ends, taken in time order (ends before arrivals at the same
instant, so freed capacity is seen by the jobs arriving then). After the events of an instant,
one scheduling cycle runs (``queue.PendingQueue.cycle``): admission (a plug-in, by default none),
then placement of whole jobs (all workers or none) by the placement policy. A placed job runs
for its run time and then releases exactly what it was given. Nothing is preempted here.

A job that could not run even on the empty cluster (no node is large enough) is rejected at
arrival instead of waiting forever — a strict FIFO queue would otherwise stop for good behind it.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from tessera_scheduler.placement.model import Assignment, Node, Request
from tessera_scheduler.placement.policies import FirstFit, Policy
from tessera_scheduler.placement.state import ClusterState
from tessera_scheduler.simulator.jobs import QOS_PRIORITY, SimJob
from tessera_scheduler.simulator.metrics import AllocationTimeline, percentile
from tessera_scheduler.simulator.queue import Admission, AdmitAll, PendingQueue

_END, _ARRIVAL = 0, 1


@dataclass
class ReplayResult:
    """What a replay measured (seconds of virtual time; ratios of GPU capacity)."""

    jobs_submitted: int = 0
    jobs_completed: int = 0
    jobs_still_queued: int = 0
    jobs_rejected: int = 0
    preemptions: int = 0
    delays: dict[str, list[float]] = field(default_factory=dict)
    window: tuple[float, float] = (0.0, 0.0)
    allocation_mean: float = 0.0
    series_step_s: float = 0.0
    series: list[float] = field(default_factory=list)

    def as_dict(self) -> dict[str, object]:
        """A JSON-ready dictionary (delays p50/p99 overall and by QoS class)."""
        everything = [d for values in self.delays.values() for d in values]
        by_qos = {
            qos: {"jobs": len(values), "p50": _round(percentile(values, 50)), "p99": _round(percentile(values, 99))}
            for qos, values in sorted(self.delays.items(), key=lambda item: QOS_PRIORITY.get(item[0], 99))
        }
        return {
            "jobs_submitted": self.jobs_submitted,
            "jobs_completed": self.jobs_completed,
            "jobs_still_queued": self.jobs_still_queued,
            "jobs_rejected": self.jobs_rejected,
            "preemptions": self.preemptions,
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
            },
        }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def replay(
    nodes: Iterable[Node],
    jobs: Sequence[SimJob],
    placement: Policy,
    *,
    strict: bool,
    admission: Admission | None = None,
    samples: int = 100,
) -> ReplayResult:
    """Replay ``jobs`` (arrivals and run times) on ``nodes``; see the module docstring.

    ``strict``: FIFO with head-of-line blocking; otherwise backfill. The allocation ratio's
    mean and its ``samples`` samples cover the window from the first to the last arrival.
    """
    nodes = list(nodes)
    admission = admission or AdmitAll()
    state = ClusterState(nodes)
    empty = ClusterState(nodes)
    first_fit = FirstFit()
    feasible: dict[tuple[Request, ...], bool] = {}
    queue = PendingQueue()
    timeline = AllocationTimeline(state.capacity_milli)
    result = ReplayResult()
    running: dict[int, list[Assignment]] = {}
    events: list[tuple[float, int, int, SimJob]] = [(job.arrival_s, _ARRIVAL, job.seq, job) for job in jobs]
    heapq.heapify(events)

    def place(job: SimJob) -> list[Assignment] | None:
        if len(job.workers) == 1:
            one = state.place(job.workers[0], placement)
            assignments = None if one is None else [one]
        else:
            assignments = state.place_gang(job.workers, placement)
        if assignments is not None:
            state.allocate_all(assignments)
            running[job.seq] = assignments
        return assignments

    while events:
        now = events[0][0]
        released = False
        while events and events[0][0] == now:
            _t, kind, _seq, job = heapq.heappop(events)
            if kind == _END:
                for assignment in running.pop(job.seq):
                    state.release(assignment)
                admission.finished(job, now)
                result.jobs_completed += 1
                released = True
                continue
            result.jobs_submitted += 1
            for worker in job.workers:
                placement.observe(worker)
            fits = feasible.get(job.workers)
            if fits is None:
                fits = empty.place_gang(job.workers, first_fit) is not None
                feasible[job.workers] = fits
            if fits:
                queue.push(job)
            else:
                result.jobs_rejected += 1
        if released:
            queue.unblock()
        for job in queue.cycle(place, admission, now, strict=strict):
            result.delays.setdefault(job.qos, []).append(now - job.arrival_s)
            heapq.heappush(events, (now + job.run_s, _END, job.seq, job))
        timeline.record(now, state.allocated_milli)

    result.jobs_still_queued = len(queue)
    if jobs:
        start = min(job.arrival_s for job in jobs)
        end = max(job.arrival_s for job in jobs)
        result.window = (start, end)
        result.allocation_mean = timeline.mean(start, end)
        step = (end - start) / max(1, samples - 1)
        result.series_step_s = round(step, 3)
        result.series = timeline.series(start, end, step) if step > 0 else []
    return result
