"""``tessera simulate``'s entry point: a trace, a cluster and a named policy in; figures out.

Simulator policies (a queue discipline with the core's placement policy, ``CoreConfig.placement``):

===========  =================================================  =====================
name         queue                                              placement
===========  =================================================  =====================
``fifo``     strict (head-of-line blocking, emulated by the     ``first-fit``
             simulator in front of the core; ``engine.py``)
``best-fit`` the core's (ordering, backfill, preemption)        ``best-fit``
``default``  the core's (ordering, backfill, preemption)        ``fgd`` (Tessera's)
===========  =================================================  =====================

Each run is two simulations with a fresh policy each: the **fill run** (``fill.py``: arrivals
only, until demand equals capacity, placement layer alone as the FGD paper measures it; gives
``unallocated_gpu_fraction``) and the **replay** (``engine.py``: the trace's arrivals and run
times through ``SchedulerCore``; gives allocation ratio, queueing delays, job counts and
preemptions). The core runs with ``CoreConfig``'s defaults apart from the placement policy.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from tessera_scheduler.domain.core import CoreConfig
from tessera_scheduler.placement.model import Node
from tessera_scheduler.placement.policies import policy_named
from tessera_scheduler.simulator.engine import replay
from tessera_scheduler.simulator.fill import fill_run
from tessera_scheduler.simulator.jobs import jobs_from_trace
from tessera_scheduler.simulator.trace import TracePod


@dataclass(frozen=True, slots=True)
class SimulatorPolicy:
    """A simulator policy: queue discipline (``strict``: head-of-line blocking) and the core's placement policy."""

    name: str
    strict: bool
    placement: str


SIMULATOR_POLICIES = {
    "fifo": SimulatorPolicy("fifo", strict=True, placement="first-fit"),
    "best-fit": SimulatorPolicy("best-fit", strict=False, placement="best-fit"),
    "default": SimulatorPolicy("default", strict=False, placement="fgd"),
}


class UnknownPolicy(ValueError):
    """A simulator policy name that does not exist."""


def simulator_policy(name: str) -> SimulatorPolicy:
    """The simulator policy called ``name``."""
    found = SIMULATOR_POLICIES.get(name)
    if found is None:
        raise UnknownPolicy(f"unknown policy {name!r} (known: {', '.join(SIMULATOR_POLICIES)})")
    return found


def simulate(
    pods: Sequence[TracePod],
    nodes: Sequence[Node],
    policy: str,
    *,
    samples: int = 100,
    compress: float = 1.0,
    quotas: bool = False,
    config: CoreConfig | None = None,
) -> dict[str, Any]:
    """Fill run and replay of ``pods`` on ``nodes`` under simulator policy ``policy``; a JSON-ready dict.

    ``compress`` divides the replay's arrival times (``jobs.jobs_from_trace``); ``quotas`` makes
    the tenants' quotas bind (``engine.py``). ``config`` overrides the core's tunables (its
    ``placement`` is replaced by the policy's). Times in the result are seconds.
    """
    chosen = simulator_policy(policy)
    if not pods:
        raise ValueError("the trace has no pods to simulate")
    if not nodes:
        raise ValueError("the cluster has no nodes")
    started = time.perf_counter()
    fill = fill_run(nodes, [pod.request for pod in pods], policy_named(chosen.placement))
    fill_s = time.perf_counter() - started
    started = time.perf_counter()
    core_config = replace(config or CoreConfig(), placement=chosen.placement)
    replayed = replay(
        nodes,
        jobs_from_trace(pods, compress),
        core_config,
        strict=chosen.strict,
        quotas=quotas,
        samples=samples,
    )
    replay_s = time.perf_counter() - started
    return {
        "queue": "strict" if chosen.strict else "backfill",
        "placement": chosen.placement,
        "engine": "SchedulerCore",
        "quotas": "cohort" if quotas else "unbounded",
        "compress": compress,
        "unallocated_gpu_fraction": fill.unallocated_gpu_fraction,
        "fill": fill.as_dict(),
        **replayed.as_dict(),
        "wall_s": {"fill": round(fill_s, 2), "replay": round(replay_s, 2)},
    }


def compare(
    pods: Sequence[TracePod],
    nodes: Sequence[Node],
    policies: Sequence[str],
    *,
    samples: int = 100,
    compress: float = 1.0,
    quotas: bool = False,
) -> dict[str, Any]:
    """:func:`simulate` for each policy: ``{"policies": {name: figures}}``."""
    for name in policies:
        simulator_policy(name)
    return {
        "policies": {
            name: simulate(pods, nodes, name, samples=samples, compress=compress, quotas=quotas) for name in policies
        }
    }
