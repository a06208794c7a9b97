"""``tessera simulate``'s entry point: a trace, a cluster and a named policy in; figures out.

Simulator policies (a queue discipline with a placement policy):

===========  ===============================  =====================
name         queue                            placement
===========  ===============================  =====================
``fifo``     strict (head-of-line blocking)   ``first-fit``
``best-fit`` backfill                         ``best-fit``
``default``  backfill                         ``fgd`` (Tessera's)
===========  ===============================  =====================

Each run is two simulations with a fresh policy each: the **fill run** (``fill.py``: arrivals
only, until demand equals capacity; gives ``unallocated_gpu_fraction``) and the **replay**
(``engine.py``: the trace's arrivals and run times; gives allocation ratio, queueing delays and
job counts).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tessera_scheduler.placement.model import Node
from tessera_scheduler.placement.policies import Policy, policy_named
from tessera_scheduler.simulator.engine import replay
from tessera_scheduler.simulator.fill import fill_run
from tessera_scheduler.simulator.jobs import jobs_from_trace
from tessera_scheduler.simulator.queue import Admission
from tessera_scheduler.simulator.trace import TracePod


@dataclass(frozen=True, slots=True)
class SimulatorPolicy:
    """A simulator policy: queue discipline and placement policy."""

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
    admission: Admission | None = None,
    placement: Policy | None = None,
    samples: int = 100,
    compress: float = 1.0,
) -> dict[str, Any]:
    """Fill run and replay of ``pods`` on ``nodes`` under simulator policy ``policy``; a JSON-ready dict.

    ``compress`` divides the replay's arrival times (``jobs.jobs_from_trace``). ``placement``
    overrides the policy's placement and is then used by both runs (a fresh one per run is
    made otherwise).
    """
    chosen = simulator_policy(policy)
    if not pods:
        raise ValueError("the trace has no pods to simulate")
    if not nodes:
        raise ValueError("the cluster has no nodes")
    started = time.perf_counter()
    fill = fill_run(nodes, [pod.request for pod in pods], placement or policy_named(chosen.placement))
    fill_s = time.perf_counter() - started
    started = time.perf_counter()
    replayed = replay(
        nodes,
        jobs_from_trace(pods, compress),
        placement or policy_named(chosen.placement),
        strict=chosen.strict,
        admission=admission,
        samples=samples,
    )
    replay_s = time.perf_counter() - started
    return {
        "queue": "strict" if chosen.strict else "backfill",
        "placement": chosen.placement,
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
) -> dict[str, Any]:
    """:func:`simulate` for each policy: ``{"policies": {name: figures}}``."""
    for name in policies:
        simulator_policy(name)
    return {"policies": {name: simulate(pods, nodes, name, samples=samples, compress=compress) for name in policies}}
