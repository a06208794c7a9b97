"""Victim selection for preemption: who may be evicted for a pending job, and the fewest that suffice.

Rules (Kueue's, https://kueue.sigs.k8s.io/docs/concepts/preemption/, with its default
``withinClusterQueue: LowerPriority`` and ``reclaimWithinCohort: Any``):

- **Priority** (within a tenant): a pending job may evict preemptible jobs of its own tenant
  with a strictly lower priority.
- **Reclaim** (across tenants): a tenant that stays within its nominal quota with the job may
  evict preemptible jobs, of any priority, of cohort members that are borrowing (usage above
  nominal) the job's GPU model; a member's jobs are taken only while it still borrows.
- **Anti-thrash**: a victim must have run at least ``min_runtime_s`` and have been preempted
  fewer than ``max_preemptions`` times; a job evicted in this cycle is not a candidate again.
- **Order** (Kueue's candidate ordering): other tenants' jobs (reclaim) before the tenant's own,
  then lowest priority first, then most recently placed first, then most recently submitted.
- **Fewest victims** (Kueue's minimal preemptions): take candidates in order until the preemptor
  fits (quota and placement), then drop, in reverse order, every victim without which it still
  fits. Nothing is evicted when even every candidate would not make it fit.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from tessera_contracts.events.scheduler import PreemptionReason
from tessera_scheduler.domain.jobs import JobRecord


@dataclass(frozen=True, slots=True)
class Victim:
    """A job to evict and why (``priority`` or ``reclaim``)."""

    job: JobRecord
    reason: PreemptionReason


def evictable(job: JobRecord, now: float, min_runtime_s: float, max_preemptions: int) -> bool:
    """Whether a running job may be a victim at all: placed, preemptible, ran long enough, under the cap."""
    return (
        job.state == "placed"
        and job.preemptible
        and job.placed_at is not None
        and now - job.placed_at >= min_runtime_s
        and job.preemptions < max_preemptions
    )


def victim_order(job: JobRecord) -> tuple[int, float, int]:
    """Eviction order among candidates: lowest priority, then most recently placed, then most recently submitted."""
    placed = job.placed_at if job.placed_at is not None else 0.0
    return (job.priority, -placed, -job.seq)


def evictable_sorted(
    jobs: Iterable[JobRecord], model: str | None, *, now: float, min_runtime_s: float, max_preemptions: int
) -> list[JobRecord]:
    """The jobs that may be victims at all (on ``model``; any model when None), in :func:`victim_order`."""
    out = [
        job
        for job in jobs
        if (model is None or job.gpu_model == model) and evictable(job, now, min_runtime_s, max_preemptions)
    ]
    out.sort(key=victim_order)
    return out


def candidates(
    preemptor: JobRecord,
    own: Sequence[JobRecord],
    borrowers: Mapping[str, tuple[int, Sequence[JobRecord]]],
    exclude: Mapping[str, object],
) -> Iterator[Victim]:
    """The preemptor's candidates, lazily, in eviction order (see the module docstring).

    Args:
        preemptor: the pending job.
        own: the evictable running jobs of its tenant on its GPU model, from :func:`evictable_sorted`.
        borrowers: per cohort member that borrows the model (empty unless the preemptor's tenant
            stays within nominal): ``(milli-GPU borrowed, its evictable jobs from evictable_sorted)``.
        exclude: job ids evicted earlier in this cycle.

    A member contributes its jobs in eviction order only while it still borrows (what it would
    borrow after the earlier ones are gone is > 0), so each member's part is a short prefix of
    its list; the parts are merged, then the tenant's own lower-priority jobs follow.
    """
    parts: list[list[JobRecord]] = []
    for borrowed, jobs in borrowers.values():
        part: list[JobRecord] = []
        left = borrowed
        for job in jobs:
            if left <= 0:
                break
            if job.job_id in exclude:
                continue
            part.append(job)
            left -= job.milli
        parts.append(part)
    for job in heapq.merge(*parts, key=victim_order):
        yield Victim(job, "reclaim")
    for job in own:
        if job.priority >= preemptor.priority:
            break  # sorted by priority: the rest are not lower
        if job.job_id not in exclude:
            yield Victim(job, "priority")


def minimal_victims(
    cands: Iterable[Victim],
    fits: Callable[[Sequence[Victim]], bool],
    narrow: Callable[[list[Victim]], list[Victim]] | None = None,
) -> list[Victim] | None:
    """The fewest candidates, taken in order, with which ``fits``; None when none suffice.

    ``fits(victims)`` must tell whether the preemptor fits (quota and placement) once
    ``victims`` are gone; it is assumed not to fit without any. The prefix is found by doubling
    then bisection (O(log n) calls, the last of them with every candidate when none suffice),
    then each victim is dropped in reverse order if the rest still suffice (Kueue's minimal
    preemption pass, O(victims) calls). ``narrow``, when given, proposes a subset of the prefix
    (e.g. the victims on the nodes the preemptor would use); it is taken if it suffices, which
    keeps the pass short when most of the prefix only freed capacity elsewhere.
    """
    source = iter(cands)
    pool: list[Victim] = []

    def grow(k: int) -> None:
        while len(pool) < k:
            victim = next(source, None)
            if victim is None:
                return
            pool.append(victim)

    grow(1)
    if not pool:
        return None
    lo, hi = 0, 1
    while not fits(pool[:hi]):
        grow(hi * 2)
        if hi >= len(pool):
            return None
        lo, hi = hi, min(len(pool), hi * 2)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fits(pool[:mid]):
            hi = mid
        else:
            lo = mid
    chosen = pool[:hi]
    if narrow is not None and len(chosen) > 1:
        smaller = narrow(chosen)
        if len(smaller) < len(chosen) and fits(smaller):
            chosen = smaller
    for i in range(len(chosen) - 2, -1, -1):
        trial = chosen[:i] + chosen[i + 1 :]
        if fits(trial):
            chosen = trial
    return chosen
