"""Kueue's scheduler performance baseline through the live scheduler service (``--mode live``).

The scenario is :func:`tessera_bench.kueue.kueue_scenario` (5 cohorts x 6 ClusterQueues, 15,000
workloads; see that module for the source and the mapping). Here it runs in real time against
real NATS and Postgres:

- **setup**: the tenants, projects, priority classes and quotas are appended as the tenancy
  service would append them, the nodes as their agents would register them;
- **the service**: one scheduler instance in this process (projector, RPC server, lease,
  decision loop with the real core), exactly as ``python -m tessera_scheduler`` wires it, with
  ``min_runtime_s`` 0 (Kueue has no minimum run time before preemption);
- **submit**: every workload through the scheduler's ``submit_job`` RPC (what the gateway
  forwards to), at its submit time times ``time_scale``, up to 64 requests in flight;
- **agents**: a pretend node-agent fleet reads ``JobPlaced`` from the log and appends
  ``JobFinished`` once the workload's run time times ``time_scale`` has passed (a preempted
  workload's pending finish is dropped; it runs its whole time again when placed again).

``wall_s`` runs from the first submit to the last ``JobFinished`` applied. The scenario cannot
finish sooner than ``bound_s``: each cohort's demand (GPU-seconds) over its 120 nominal GPUs, or
the last submit, whichever is later, times ``time_scale``; ``overhead_s = wall_s - bound_s`` is
what the scheduler and the log add. Kueue publishes 351 s of wall time for the scenario at
``time_scale`` 1, where ``bound_s`` is 66 s.
"""

from __future__ import annotations

import asyncio
import heapq
import math
import tempfile
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tessera_bench.kueue import NOMINAL_GPUS, QUEUES_PER_COHORT, WORKLOAD_CLASSES, kueue_scenario
from tessera_bench.scheduler import peak_rss_mib
from tessera_contracts import codec
from tessera_contracts.api.scheduler import SelectorBody, SubmitJob, WorkerBody
from tessera_contracts.envelope import envelope
from tessera_contracts.events import scheduler as ev
from tessera_contracts.events.tenancy import PriorityClassDefined, ProjectCreated, QuotaSet, TenantCreated
from tessera_contracts.rbac import Principal, RoleBinding
from tessera_contracts.registry import Event
from tessera_contracts.subjects import SYSTEM_TENANT, AggregateRef
from tessera_runtime import connect
from tessera_runtime.devstack import EmbeddedStack
from tessera_runtime.eventlog import AppendRequest, EventLog
from tessera_runtime.projector import Projector
from tessera_runtime.rpc import call
from tessera_scheduler import refs
from tessera_scheduler.app import SchedulerSettings, build
from tessera_scheduler.projections import SCHEDULER

KUEUE_PUBLISHED_S = 351.0
"""Kueue's published wall time for the baseline scenario (the issue's figure)."""
IN_FLIGHT = 64
SOURCE = "tessera/bench"
BENCH_PRINCIPAL = Principal(
    id="bench",
    tenant=SYSTEM_TENANT,
    name="bench",
    kind="service_account",
    roles=(RoleBinding(role="platform-admin", tenant=SYSTEM_TENANT),),
)


def bound_s(time_scale: float, *, fraction: float = 1.0) -> float:
    """The earliest the scenario can finish, seconds: quota-bound makespan or last submit, scaled.

    Every cohort has the same workload, so one cohort's demand over its nominal GPUs is the bound.
    """
    demand = sum(math.ceil(count * fraction) * gpus * run for _c, count, _i, _p, gpus, _w, run in WORKLOAD_CLASSES)
    last_submit = max(math.ceil(count * fraction) * interval for _c, count, interval, *_ in WORKLOAD_CLASSES)
    return round(max(demand / NOMINAL_GPUS, last_submit) * time_scale, 3)


def _setup_subject(event: Event) -> tuple[str, str]:
    """``(subject, tenant)`` of a setup event, as its owner would append it."""
    match event:
        case TenantCreated():
            return AggregateRef("tenancy", event.tenant, "tenant", event.tenant).subject, event.tenant
        case ProjectCreated():
            return refs.project_ref(event.tenant, event.project).subject, event.tenant
        case QuotaSet():
            return AggregateRef("tenancy", event.tenant, "quota", "tenant").subject, event.tenant
        case PriorityClassDefined():
            return refs.priority_class_ref(event.name).subject, SYSTEM_TENANT
        case ev.NodeRegistered():
            return refs.node_ref(event.node).subject, SYSTEM_TENANT
    raise ValueError(f"no subject for setup event {type(event).__name__}")


def _submit_body(job: ev.JobSubmitted) -> SubmitJob:
    worker = job.worker
    return SubmitJob(
        name=job.name,
        priority_class=job.priority_class,
        workers=job.workers,
        worker=WorkerBody(gpus=worker.gpus, cpu_milli=worker.cpu_milli, memory_mib=worker.memory_mib),
        selector=SelectorBody(),
    )


class _Fleet:
    """Pretend node agents: finish each placed job its run time after placement (see the module docstring)."""

    def __init__(self, log: EventLog, start_seq: int, run_s_by_name: dict[str, float]) -> None:
        self.log = log
        self.start_seq = start_seq
        self.run_s_by_name = run_s_by_name
        self.run_s: dict[str, float] = {}
        self.tenant: dict[str, str] = {}
        self.due: list[tuple[float, int, str]] = []
        self.current: dict[str, int] = {}
        self.epoch = 0
        self.counts: Counter[str] = Counter()
        self.finished = 0
        self.last_finish = 0.0

    async def follow(self, stop: asyncio.Event) -> None:
        """Read the scheduler's events from ``start_seq`` and keep ``due`` (finish times) up to date."""
        reader = self.log.reader(("ev.scheduler.>",), start_seq=self.start_seq)
        await reader.open()
        try:
            while not stop.is_set():
                for msg in await reader.fetch(1000, timeout_s=0.05):
                    env = codec.decode_envelope(msg.data)
                    event = codec.payload(env)
                    if isinstance(event, ev.LeaderElected):
                        self.epoch = event.epoch
                    if not ev.is_current(event, self.epoch):
                        continue
                    self.counts[type(event).__name__] += 1
                    if isinstance(event, ev.JobSubmitted) and event.name in self.run_s_by_name:
                        self.run_s[event.job_id] = self.run_s_by_name[event.name]
                        self.tenant[event.job_id] = event.tenant
                    elif isinstance(event, ev.JobPlaced) and event.job_id in self.run_s:
                        self.current[event.job_id] = msg.seq
                        heapq.heappush(self.due, (time.monotonic() + self.run_s[event.job_id], msg.seq, event.job_id))
                    elif isinstance(event, ev.JobPreempted):
                        self.current.pop(event.job_id, None)
                    elif isinstance(event, ev.JobFinished) and event.job_id in self.run_s:
                        self.finished += 1
                        self.last_finish = time.monotonic()
        finally:
            await reader.close()

    async def finish(self, stop: asyncio.Event) -> None:
        """Append ``JobFinished`` for every job whose run time is over, pipelined."""
        while not stop.is_set():
            now = time.monotonic()
            requests = []
            while self.due and self.due[0][0] <= now:
                _at, seq, job_id = heapq.heappop(self.due)
                if self.current.get(job_id) != seq:
                    continue  # preempted since: its finish is void
                del self.current[job_id]
                ref = refs.job_ref(self.tenant[job_id], job_id)
                env = envelope(
                    ev.JobFinished(job_id=job_id, outcome="succeeded", exit_code=0),
                    subject=ref.subject,
                    source=SOURCE,
                    tenant=self.tenant[job_id],
                    time=datetime.now(UTC),
                    correlation_id=job_id,
                )
                requests.append(AppendRequest(ref.subject, [env], None))
            if requests:
                for result in await self.log.append_many(requests):
                    if isinstance(result, Exception):
                        raise result
            await asyncio.sleep(0.005)


async def _measure(nats_url: str, database_url: str, time_scale: float, fraction: float, seed: int) -> dict[str, Any]:
    scenario = kueue_scenario(seed, fraction=fraction)
    nc = await connect.connect_nats(nats_url, "bench-kueue", deadline_s=10)
    pool = await connect.connect_postgres(database_url, deadline_s=10)
    stop = asyncio.Event()
    tasks: list[asyncio.Task[None]] = []
    try:
        log = EventLog(nc)
        await log.ensure_streams()
        tenants = sorted({job.tenant for job in scenario.jobs})
        setup: list[Event] = [TenantCreated(tenant=t, display_name=t) for t in tenants]
        setup += [ProjectCreated(tenant=t, project="default", display_name="default") for t in tenants]
        setup += scenario.setup
        requests = []
        now = datetime.now(UTC)
        for event in setup:
            subject, tenant = _setup_subject(event)
            env = envelope(event, subject=subject, source=SOURCE, tenant=tenant, time=now, correlation_id="bench-setup")
            requests.append(AppendRequest(subject, [env], None))
        for result in await log.append_many(requests):
            if isinstance(result, Exception):
                raise result
        run_s_by_name = {job.name: scenario.run_s[job.job_id] * time_scale for job in scenario.jobs}
        fleet = _Fleet(log, await log.head() + 1, run_s_by_name)
        settings = SchedulerSettings(node_timeout_s=1e9, min_runtime_s=0.0, cycle_s=0.05)
        projector = Projector(SCHEDULER, pool, log, idle_fetch_s=0.1)
        scheduler = await build(nc, log, pool, projector, settings, holder="bench")
        tasks += [asyncio.create_task(projector.run(stop)), asyncio.create_task(scheduler.elector.run(stop))]
        await projector.wait_until(await log.head(), 60)
        tasks += [asyncio.create_task(fleet.follow(stop)), asyncio.create_task(fleet.finish(stop))]

        slots = asyncio.Semaphore(IN_FLIGHT)

        async def submit(job: ev.JobSubmitted) -> None:
            async with slots:
                await call(
                    nc,
                    "scheduler",
                    "submit_job",
                    _submit_body(job),
                    principal=BENCH_PRINCIPAL,
                    scope={"tenant": job.tenant, "project": job.project},
                    timeout_s=30,
                )

        began = time.monotonic()
        pending: list[asyncio.Task[None]] = []
        for job in scenario.jobs:
            at = began + scenario.submit_at[job.job_id] * time_scale
            if (delay := at - time.monotonic()) > 0:
                await asyncio.sleep(delay)
            pending.append(asyncio.create_task(submit(job)))
        await asyncio.gather(*pending)
        submit_s = time.monotonic() - began
        total = len(scenario.jobs)
        while fleet.finished < total:
            if time.monotonic() - began > 3600:
                raise TimeoutError(f"only {fleet.finished} of {total} workloads finished within an hour")
            await asyncio.sleep(0.05)
        wall = fleet.last_finish - began
        bound = bound_s(time_scale, fraction=fraction)
        return {
            "benchmark": "kueue-baseline",
            "mode": "live",
            "workloads": total,
            "time_scale": time_scale,
            "wall_s": round(wall, 3),
            "bound_s": bound,
            "overhead_s": round(wall - bound, 3),
            "submit_s": round(submit_s, 3),
            "admitted": fleet.counts["JobAdmitted"],
            "placed": fleet.counts["JobPlaced"],
            "preempted": fleet.counts["JobPreempted"],
            "queued_events": fleet.counts["JobQueued"],
            "finished": fleet.finished,
            "ignored_by_core": scheduler.decider.ignored,
            "peak_rss_mib": peak_rss_mib(),
            "kueue_published_wall_s": KUEUE_PUBLISHED_S,
            "config": {
                "cluster_queues": len(tenants),
                "cohorts": len(tenants) // QUEUES_PER_COHORT,
                "fraction": fraction,
                "seed": seed,
                "submit_path": "rpc.scheduler.submit_job",
                "in_flight": IN_FLIGHT,
            },
        }
    finally:
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        await pool.close()
        await nc.drain()


def run_live(
    *,
    time_scale: float = 1.0,
    fraction: float = 1.0,
    seed: int = 1,
    nats_url: str | None = None,
    database_url: str | None = None,
) -> dict[str, Any]:
    """Run the live baseline; the figures, JSON-ready (see the module docstring).

    Unless both URLs are given, private embedded NATS and Postgres are started in a temporary
    folder. ``time_scale`` multiplies every submit time and run time; ``fraction`` shrinks each
    workload class (for tests).

    Raises:
        ValueError: ``time_scale`` not positive or ``fraction`` not in (0, 1].
        TimeoutError: the workloads did not all finish within an hour.
    """
    if not time_scale > 0:
        raise ValueError("time_scale must be positive")
    if nats_url and database_url:
        return asyncio.run(_measure(nats_url, database_url, time_scale, fraction, seed))
    with tempfile.TemporaryDirectory(prefix="tessera-bench-") as tmp, EmbeddedStack(Path(tmp) / "kueue") as stack:
        info = stack.info
        return asyncio.run(_measure(info.nats_url, info.database_url, time_scale, fraction, seed))
