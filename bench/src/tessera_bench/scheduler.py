"""Scheduler-core benchmark: decisions per second of ``SchedulerCore`` on a synthetic cluster.

Run: ``tessera bench scheduler --nodes 10000 --gpus-per-node 8 --pending 100000 --tenants 50
--json`` (prints one JSON object).

Method (one process, pure code, no servers, virtual time):

- :func:`scheduler_scenario` builds the events, seeded (``random.Random(seed)``, the only
  randomness): a cluster of ``nodes`` nodes of ``gpus_per_node`` devices of three GPU models
  (H100 80 GiB 50 %, A100 80 GiB 30 %, L40S 48 GiB 20 %), in two regions and two clusters, a
  quarter of them labelled ``ib=yes``, with 16 cores and 128 GiB of host memory per GPU;
  ``tenants`` tenants in cohorts of up to ten, each with a nominal quota per model
  (capacity shared out by a random weight), a third of them allowed to borrow without limit,
  a third up to their nominal, a third not at all; three priority classes (``high`` 1000 not
  preemptible, ``normal`` 100 and ``low`` 10 preemptible); and ``pending`` jobs drawn from a
  mix: 30 % fractional (250 or 500 milli-GPU), 35 % one whole GPU, 12 % two, 8 % four, 10 %
  eight, 5 % gangs of 2-4 workers of eight GPUs; 30 % of the jobs allow one GPU model only, 10 %
  select a region, 5 % need ``ib=yes``; 8 cores and 64 GiB of host memory per GPU (4 cores and
  16 GiB for a fraction).
- The events are applied to a fresh ``SchedulerCore`` (untimed: ``setup_s``), then cycles of
  ``decide(now)`` followed by ``apply`` of every decision run at ``now = 1, 2, 3, ...`` seconds
  until a cycle admits, places and preempts nothing (the queue is stable) or ``max_cycles``.
  ``decisions`` counts the events ``decide`` returned (every type: admitted, placed, queued,
  preempted); ``decisions_per_s`` divides them by the time spent in ``decide`` and ``apply``.
"""

from __future__ import annotations

import random
import resource
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from tessera_contracts.events.scheduler import (
    DeviceInfo,
    JobPlaced,
    JobPreempted,
    JobSubmitted,
    NodeRegistered,
    NodeSelector,
    WorkerSpec,
)
from tessera_contracts.events.tenancy import GpuQuota, PriorityClassDefined, QuotaSet
from tessera_contracts.registry import Event

MODELS = (("H100", 81920, 0.5), ("A100", 81920, 0.3), ("L40S", 49152, 0.2))
"""``(model, device MiB, share of nodes)`` of the synthetic cluster."""
REGIONS = ("us-east", "eu-west")
PRIORITY_CLASSES = (("high", 1000, False), ("normal", 100, True), ("low", 10, True))
"""``(name, value, preemptible)``."""


@dataclass
class Scenario:
    """The events of a benchmark scenario, in the order to apply them, and the jobs' run times.

    ``setup`` are the priority classes, quotas and nodes; ``jobs`` the ``JobSubmitted`` events
    in submit order; ``run_s[job_id]`` how long each job runs once placed (seconds; empty when
    the scenario does not finish jobs); ``submit_at[job_id]`` when it is submitted (seconds of
    virtual time; 0 when everything is submitted at once).
    """

    setup: list[Event] = field(default_factory=list)
    jobs: list[JobSubmitted] = field(default_factory=list)
    run_s: dict[str, float] = field(default_factory=dict)
    submit_at: dict[str, float] = field(default_factory=dict)


def job_id(n: int) -> str:
    """The ``n``-th job's id in the contract's form (``j_`` and 26 lower-case hex digits)."""
    return f"j_{n:026x}"


def scheduler_scenario(nodes: int, gpus_per_node: int, pending: int, tenants: int, seed: int = 1) -> Scenario:
    """The synthetic cluster, tenants and pending jobs described in the module docstring.

    Args:
        nodes: number of nodes (>= 1).
        gpus_per_node: devices per node (>= 1).
        pending: number of jobs submitted (>= 0).
        tenants: number of tenants (>= 1), in cohorts of up to ten.
        seed: seed of the generator's ``random.Random``.

    Raises:
        ValueError: a count out of range.
    """
    if nodes < 1 or gpus_per_node < 1 or tenants < 1 or pending < 0:
        raise ValueError("nodes, gpus_per_node and tenants must be >= 1 and pending >= 0")
    rng = random.Random(seed)
    scenario = Scenario()
    for name, value, preemptible in PRIORITY_CLASSES:
        scenario.setup.append(PriorityClassDefined(name=name, value=value, preemptible=preemptible))
    capacity: Counter[str] = Counter()
    node_events: list[Event] = []
    for i in range(nodes):
        model, memory, _share = rng.choices(MODELS, weights=[m[2] for m in MODELS])[0]
        name = f"node-{i:05d}"
        labels = {"ib": "yes"} if rng.random() < 0.25 else {}
        node_events.append(
            NodeRegistered(
                node=name,
                cluster=f"c{i % 2 + 1}",
                region=REGIONS[(i // 2) % len(REGIONS)],
                labels=labels,
                cpu_milli=16_000 * gpus_per_node,
                memory_mib=131_072 * gpus_per_node,
                devices=tuple(
                    DeviceInfo(uuid=f"{name}-gpu{j}", model=model, memory_mib=memory) for j in range(gpus_per_node)
                ),
            )
        )
        capacity[model] += 1000 * gpus_per_node
    names = [f"tenant-{t:03d}" for t in range(tenants)]
    weights = [rng.uniform(0.5, 2.0) for _ in names]
    total_weight = sum(weights)
    for t, tenant in enumerate(names):
        mode = t % 3
        quotas = []
        for model, _memory, _share in MODELS:
            nominal = int(capacity[model] * weights[t] / total_weight)
            borrowing = None if mode == 0 else nominal if mode == 1 else 0
            quotas.append(GpuQuota(gpu_model=model, nominal_milli=nominal, borrowing_limit_milli=borrowing))
        scenario.setup.append(
            QuotaSet(tenant=tenant, cohort=f"cohort-{t // 10}", gpus=tuple(quotas), fair_share_weight=1 + t % 3)
        )
    scenario.setup.extend(node_events)
    for n in range(pending):
        scenario.jobs.append(_job(rng, n, names))
        scenario.submit_at[scenario.jobs[-1].job_id] = 0.0
    return scenario


def _job(rng: random.Random, n: int, tenants: list[str]) -> JobSubmitted:
    roll = rng.random()
    workers = 1
    if roll < 0.30:
        spec = WorkerSpec(gpus=1, milli=rng.choice((250, 500)), cpu_milli=4000, memory_mib=16_384)
    else:
        if roll < 0.65:
            gpus = 1
        elif roll < 0.77:
            gpus = 2
        elif roll < 0.85:
            gpus = 4
        else:
            gpus = 8
            if roll >= 0.95:
                workers = rng.randint(2, 4)
        spec = WorkerSpec(gpus=gpus, milli=1000, cpu_milli=8000 * gpus, memory_mib=65_536 * gpus)
    if rng.random() < 0.3:
        spec = WorkerSpec(
            gpus=spec.gpus,
            milli=spec.milli,
            cpu_milli=spec.cpu_milli,
            memory_mib=spec.memory_mib,
            gpu_models=(rng.choices(MODELS, weights=[m[2] for m in MODELS])[0][0],),
        )
    selector = NodeSelector()
    where = rng.random()
    if where < 0.10:
        selector = NodeSelector(region=rng.choice(REGIONS))
    elif where < 0.15:
        selector = NodeSelector(labels={"ib": "yes"})
    name, value, preemptible = rng.choices(PRIORITY_CLASSES, weights=(1, 6, 3))[0]
    tenant = rng.choice(tenants)
    return JobSubmitted(
        job_id=job_id(n),
        tenant=tenant,
        project="default",
        name=f"job-{n}",
        priority_class=name,
        priority=value,
        preemptible=preemptible,
        workers=workers,
        worker=spec,
        selector=selector,
        submitted_by="bench",
    )


def peak_rss_mib() -> float:
    """Peak resident set size of this process so far, in MiB (``getrusage``)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(peak / (1024 * 1024 if sys.platform == "darwin" else 1024), 1)


def run_scheduler(
    *,
    nodes: int = 10_000,
    gpus_per_node: int = 8,
    pending: int = 100_000,
    tenants: int = 50,
    seed: int = 1,
    placement: str = "fgd",
    max_cycles: int = 100,
) -> dict[str, Any]:
    """Build :func:`scheduler_scenario`, run decide/apply cycles until stable, return the figures (JSON-ready).

    Raises:
        ValueError: a count out of range (see :func:`scheduler_scenario`).
    """
    from tessera_scheduler.domain.core import CoreConfig, SchedulerCore

    started = time.perf_counter()
    scenario = scheduler_scenario(nodes, gpus_per_node, pending, tenants, seed)
    core = SchedulerCore(CoreConfig(placement=placement))
    for event in scenario.setup:
        core.apply(event, 0.0)
    for job in scenario.jobs:
        core.apply(job, 0.0)
    setup_s = time.perf_counter() - started
    kinds: Counter[str] = Counter()
    cycles = 0
    busy = 0.0
    decide_s = 0.0
    for cycle in range(1, max_cycles + 1):
        now = float(cycle)
        t0 = time.perf_counter()
        events = core.decide(now)
        t1 = time.perf_counter()
        for event in events:
            core.apply(event, now)
        busy += time.perf_counter() - t0
        decide_s += t1 - t0
        cycles = cycle
        changed = 0
        for event in events:
            kind = type(event).__name__
            kinds[kind] += 1
            if kind != "JobQueued":
                changed += 1
        if not changed:
            break
    states = Counter(job.state for job in core.jobs())
    decisions = sum(kinds.values())
    return {
        "benchmark": "scheduler",
        "decisions": decisions,
        "decisions_per_s": round(decisions / busy) if busy else 0,
        "cycles": cycles,
        "placed": kinds[JobPlaced.__name__],
        "running": states.get("placed", 0),
        "queued": states.get("pending", 0),
        "preemptions": kinds[JobPreempted.__name__],
        "decisions_by_type": dict(sorted(kinds.items())),
        "wall_s": round(busy, 3),
        "decide_s": round(decide_s, 3),
        "setup_s": round(setup_s, 3),
        "peak_rss_mib": peak_rss_mib(),
        "config": {
            "nodes": nodes,
            "gpus_per_node": gpus_per_node,
            "pending": pending,
            "tenants": tenants,
            "seed": seed,
            "placement": placement,
            "max_cycles": max_cycles,
        },
    }
