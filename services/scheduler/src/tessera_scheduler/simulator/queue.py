"""The pending queue and one scheduling cycle over it.

Jobs wait in :class:`PendingQueue`, ordered by QoS rank, then arrival (``SimJob.order``). A cycle
takes them in that order and asks the placement layer for each:

- ``strict`` (Tessera's ``fifo``): the first job that cannot be placed blocks everything behind
  it (head-of-line blocking).
- ``backfill``: a job that cannot be placed is skipped and later jobs may go ahead of it (EASY
  backfill without reservations; aging and reservations are the admission layer's business).

Within a cycle the cluster only fills up, so once a job of some shape (its tuple of worker
requests) fails to fit, every later job of the same shape would fail too: the queue keeps one
sub-queue per shape and a cycle merges the sub-queues' heads, dropping a shape at its first
failure; the shape stays blocked until capacity is freed (:meth:`PendingQueue.unblock`). A cycle
costs O((placed + shapes) · log shapes) placement attempts, not O(queue).

Admission (quotas, budgets, fair share) plugs in through :class:`Admission`: ``admit`` is asked
before placement, ``started``/``finished`` are told what happened. A job admission holds back
does not block its shape (another job of that shape may belong to someone else).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Protocol

from tessera_scheduler.placement.model import Assignment, Request
from tessera_scheduler.simulator.jobs import SimJob

Shape = tuple[Request, ...]
PlaceFn = Callable[[SimJob], list[Assignment] | None]
"""Places a job (all workers or none) and commits it; ``None`` when it does not fit."""


class Admission(Protocol):
    """The admission step of a cycle (quotas, budgets, fair share, preemption come here)."""

    def admit(self, job: SimJob, now: float) -> str | None:
        """``None`` to let the job be placed now, or the reason it must wait (e.g. ``QuotaExceeded``)."""
        ...

    def started(self, job: SimJob, assignments: list[Assignment], now: float) -> None:
        """The job was placed."""
        ...

    def finished(self, job: SimJob, now: float) -> None:
        """The job ended and its allocations were released."""
        ...


class AdmitAll:
    """No quotas: every job may be placed as soon as it fits."""

    def admit(self, job: SimJob, now: float) -> str | None:
        """Always admitted."""
        return None

    def started(self, job: SimJob, assignments: list[Assignment], now: float) -> None:
        """Nothing to record."""

    def finished(self, job: SimJob, now: float) -> None:
        """Nothing to record."""


class PendingQueue:
    """Jobs waiting to be placed, one sub-queue (a heap by ``SimJob.order``) per shape."""

    def __init__(self) -> None:
        self._by_shape: dict[Shape, list[tuple[tuple[int, float, int], SimJob]]] = {}
        self._blocked: set[Shape] = set()
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def push(self, job: SimJob) -> None:
        """Enqueue a job."""
        heap = self._by_shape.setdefault(job.workers, [])
        heapq.heappush(heap, (job.order, job))
        self._count += 1

    def unblock(self) -> None:
        """Capacity was freed: shapes that did not fit may fit now."""
        self._blocked.clear()

    def jobs(self) -> list[SimJob]:
        """Every waiting job, in queue order."""
        return [job for _order, job in sorted(entry for heap in self._by_shape.values() for entry in heap)]

    def cycle(self, place: PlaceFn, admission: Admission, now: float, *, strict: bool) -> list[SimJob]:
        """One scheduling pass; returns the jobs placed, in the order they were placed.

        A shape that did not fit stays blocked, without new attempts, until :meth:`unblock`.
        """
        blocked = self._blocked
        heads = [
            (heap[0][0], shape) for shape, heap in self._by_shape.items() if heap and (strict or shape not in blocked)
        ]
        heapq.heapify(heads)
        placed: list[SimJob] = []
        held: list[tuple[tuple[int, float, int], SimJob]] = []
        while heads:
            _order, shape = heapq.heappop(heads)
            if shape in blocked:
                break  # strict: the head of the queue cannot fit
            heap = self._by_shape[shape]
            _, job = heapq.heappop(heap)
            if admission.admit(job, now) is not None:
                held.append((job.order, job))
                if strict:
                    break
                if heap:
                    heapq.heappush(heads, (heap[0][0], shape))
                continue
            assignments = place(job)
            if assignments is None:
                heapq.heappush(heap, (job.order, job))
                blocked.add(shape)
                if strict:
                    break
                continue  # this shape cannot fit any more in this cycle
            admission.started(job, assignments, now)
            placed.append(job)
            self._count -= 1
            if heap:
                heapq.heappush(heads, (heap[0][0], shape))
        for entry in held:
            heapq.heappush(self._by_shape[entry[1].workers], entry)
        for shape in [shape for shape, heap in self._by_shape.items() if not heap]:
            del self._by_shape[shape]
        return placed
