"""A small world around a SchedulerCore for the core's tests: nodes, quotas, jobs and a clock.

Not a test module by itself (no tests here): the scenario and property tests import it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from decimal import Decimal

from tessera_contracts.events.scheduler import (
    DeviceInfo,
    JobCancelled,
    JobFinished,
    JobPlaced,
    JobPreempted,
    JobQueued,
    JobSubmitted,
    MigSlotInfo,
    NodeRegistered,
    NodeSelector,
    WorkerSpec,
)
from tessera_contracts.events.tenancy import GpuQuota, QuotaSet
from tessera_contracts.registry import Event
from tessera_scheduler.domain import CoreConfig, SchedulerCore

T0 = 1_767_225_600.0  # 2026-01-01 00:00 UTC


def node_event(
    name: str,
    gpus: int = 8,
    model: str = "A100",
    memory_mib: int = 81920,
    cpu_milli: int = 64_000,
    host_memory_mib: int = 262_144,
    cluster: str = "c1",
    region: str = "r1",
    labels: dict[str, str] | None = None,
    mig: Sequence[tuple[str, int]] = (),
) -> NodeRegistered:
    devices = tuple(
        DeviceInfo(
            uuid=f"{name}-gpu{i}",
            model=model,
            memory_mib=memory_mib,
            mig=tuple(MigSlotInfo(profile=p, count=c) for p, c in mig),
        )
        for i in range(gpus)
    )
    return NodeRegistered(
        node=name,
        cluster=cluster,
        region=region,
        labels=labels or {},
        cpu_milli=cpu_milli,
        memory_mib=host_memory_mib,
        devices=devices,
    )


def quota_event(
    tenant: str,
    gpus: dict[str, tuple[float, float | None, float | None]] | None = None,
    *,
    cohort: str | None = None,
    project: str | None = None,
    budget: Decimal | None = None,
    max_jobs: int | None = None,
    weight: int = 1,
) -> QuotaSet:
    """``gpus``: model -> (nominal, borrowing limit, lending limit) in GPUs (None = no limit)."""

    def milli(x: float | None) -> int | None:
        return None if x is None else round(x * 1000)

    entries = tuple(
        GpuQuota(
            gpu_model=m, nominal_milli=round(n * 1000), borrowing_limit_milli=milli(b), lending_limit_milli=milli(ll)
        )
        for m, (n, b, ll) in (gpus or {}).items()
    )
    return QuotaSet(
        tenant=tenant,
        project=project,
        cohort=cohort,
        gpus=entries,
        monthly_gpu_hour_budget=budget,
        max_concurrent_jobs=max_jobs,
        fair_share_weight=weight,
    )


class World:
    """A core, a clock (seconds) and helpers that apply events and check invariants after each step."""

    def __init__(self, config: CoreConfig | None = None, now: float = T0) -> None:
        self.core = SchedulerCore(config or CoreConfig(placement="best-fit"))
        self.now = now
        self.log: list[tuple[Event, float]] = []
        self._seq = 0

    def apply(self, event: Event) -> bool:
        ok = self.core.apply(event, self.now)
        if ok:
            self.log.append((event, self.now))
        return ok

    def nodes(self, events: Iterable[NodeRegistered]) -> None:
        for e in events:
            assert self.apply(e)

    def quota(self, *args: object, **kwargs: object) -> None:
        assert self.apply(quota_event(*args, **kwargs))  # type: ignore[arg-type]

    def submit(
        self,
        tenant: str,
        *,
        gpus: int = 1,
        milli: int | None = 1000,
        workers: int = 1,
        priority: int = 0,
        preemptible: bool = True,
        models: tuple[str, ...] = (),
        gpu_memory_mib: int | None = None,
        mig: str | None = None,
        project: str = "p",
        cpu_milli: int = 0,
        memory_mib: int = 0,
        selector: NodeSelector | None = None,
        max_runtime_s: int | None = None,
        job_id: str | None = None,
    ) -> str:
        self._seq += 1
        job_id = job_id or f"j_{self._seq:026x}"
        event = JobSubmitted(
            job_id=job_id,
            tenant=tenant,
            project=project,
            name=f"job{self._seq}",
            priority_class="default",
            priority=priority,
            preemptible=preemptible,
            workers=workers,
            worker=WorkerSpec(
                gpus=gpus,
                milli=milli,
                gpu_memory_mib=gpu_memory_mib,
                mig_profile=mig,
                gpu_models=models,
                cpu_milli=cpu_milli,
                memory_mib=memory_mib,
            ),
            selector=selector or NodeSelector(),
            max_runtime_s=max_runtime_s,
            submitted_by="u_1",
        )
        assert self.apply(event)
        return job_id

    def cycle(self, advance: float = 0.0) -> list[Event]:
        """Advance the clock, decide, apply every decision (each must apply), check invariants."""
        self.now += advance
        events = self.core.decide(self.now)
        for e in events:
            assert self.apply(e), e
        self.core.check_invariants()
        return events

    def finish(self, job_id: str, outcome: str = "succeeded") -> None:
        assert self.apply(JobFinished(job_id=job_id, outcome=outcome))  # type: ignore[arg-type]
        self.core.check_invariants()

    def cancel(self, job_id: str) -> None:
        assert self.apply(JobCancelled(job_id=job_id, by="u_1"))
        self.core.check_invariants()

    def state(self, job_id: str) -> str:
        job = self.core.job(job_id)
        assert job is not None
        return job.state


def of_type(events: Iterable[Event], kind: type[Event]) -> list[Event]:
    return [e for e in events if isinstance(e, kind)]


def placed_ids(events: Iterable[Event]) -> list[str]:
    return [e.job_id for e in events if isinstance(e, JobPlaced)]


def preempted(events: Iterable[Event]) -> list[JobPreempted]:
    return [e for e in events if isinstance(e, JobPreempted)]


def queued(events: Iterable[Event]) -> dict[str, str]:
    return {e.job_id: e.reason for e in events if isinstance(e, JobQueued)}
