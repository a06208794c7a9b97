"""Placement benchmark: decisions per second of the scheduler core's placement layer.

Run: ``python -m tessera_bench.simulate placement [--nodes 10000] [--gpus-per-node 8] [--json]``
(prints one JSON object).

Method (one process, pure code, no servers):

- a cluster of ``nodes`` identical nodes with ``gpus_per_node`` devices each (80 GiB, model
  ``A100``) and the host of the trace's most common GPU node (96 cores, 384 GiB per 8 GPUs);
- requests drawn with a seeded RNG from the GPU pods of the Alibaba v2023 trace (``num_gpu`` x
  ``gpu_milli``, host CPU and memory: 25 GPU shapes, 126 with host resources; ``--gpu-only``
  drops the host requests);
- the cluster is first filled, with the policy under test, to ``utilisation`` of its GPU
  capacity; then each timed step releases random live allocations until the cluster is back
  under that level and makes one **decision**: ``place`` (the policy's choice) followed by
  ``allocate`` when it found a place. Releases, decisions and allocations are all inside the
  timed loop; ``place_only_per_s`` is the rate of the ``place`` calls alone.
- FGD measures fragmentation against the distribution the requests are drawn from (fixed).
  ``fgd`` is exact (the argmin over every node) with host capacity in its measure (``fgd.py``);
  ``fgd-classes`` uses the paper's measure (``Fgd(host_capacity=False)``); ``fgd-16`` caps the
  groups it scores exactly at 16 per decision (``Fgd(max_exact=16)``), trading quality for speed.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import random
import time
from pathlib import Path
from typing import Any

from tessera_scheduler.placement import (
    POLICY_NAMES,
    Assignment,
    ClusterState,
    Device,
    Fgd,
    Node,
    Policy,
    Request,
    WorkloadDistribution,
    policy_named,
)
from tessera_scheduler.simulator.trace import load_pods

DEFAULT_TRACE = Path(__file__).resolve().parents[3] / "data" / "traces" / "openb_pod_list_default.csv"


def cluster(nodes: int, gpus_per_node: int) -> list[Node]:
    """``nodes`` identical nodes of ``gpus_per_node`` 80 GiB devices, 12 cores and 48 GiB per GPU."""
    return [
        Node(
            f"node-{i:05d}",
            tuple(Device(f"node-{i:05d}-gpu{j}", "A100", 81920) for j in range(gpus_per_node)),
            cpu_milli=12_000 * gpus_per_node,
            memory_mib=49_152 * gpus_per_node,
        )
        for i in range(nodes)
    ]


BENCH_POLICIES = (*POLICY_NAMES, "fgd-classes", "fgd-16")


def _policy(name: str, shapes: list[Request]) -> Policy:
    if name == "fgd":
        return Fgd(WorkloadDistribution.of(shapes))
    if name == "fgd-classes":
        return Fgd(WorkloadDistribution.of(shapes), host_capacity=False)
    if name == "fgd-16":
        return Fgd(WorkloadDistribution.of(shapes), max_exact=16)
    return policy_named(name)


def measure(
    name: str, nodes: list[Node], shapes: list[Request], decisions: int, utilisation: float, seed: int
) -> dict[str, Any]:
    """Fill, then time ``decisions`` steady-state decisions of policy ``name``."""
    rng = random.Random(seed)
    state = ClusterState(nodes)
    policy = _policy(name, shapes)
    live: list[Assignment] = []
    target = int(state.capacity_milli * utilisation)
    started = time.perf_counter()
    misses = 0
    while state.allocated_milli < target and misses < 1000:
        assignment = state.place(rng.choice(shapes), policy)
        if assignment is None:
            misses += 1
            continue
        state.allocate(assignment)
        live.append(assignment)
    fill_s = time.perf_counter() - started
    placed = 0
    place_s = 0.0
    started = time.perf_counter()
    for _ in range(decisions):
        while state.allocated_milli >= target and live:
            k = rng.randrange(len(live))
            live[k], live[-1] = live[-1], live[k]
            state.release(live.pop())
        request = rng.choice(shapes)
        t0 = time.perf_counter()
        assignment = state.place(request, policy)
        place_s += time.perf_counter() - t0
        if assignment is not None:
            state.allocate(assignment)
            live.append(assignment)
            placed += 1
    elapsed = time.perf_counter() - started
    return {
        "decisions": decisions,
        "placed": placed,
        "decisions_per_s": round(decisions / elapsed),
        "place_only_per_s": round(decisions / place_s),
        "fill_decisions": len(live),
        "fill_s": round(fill_s, 2),
        "allocation_ratio": round(state.allocated_milli / state.capacity_milli, 4),
        "node_groups": len(state.index.groups),
    }


def run_placement(
    *,
    nodes: int = 10_000,
    gpus_per_node: int = 8,
    decisions: int = 50_000,
    utilisation: float = 0.85,
    policies: tuple[str, ...] = BENCH_POLICIES,
    trace: str | Path = DEFAULT_TRACE,
    seed: int = 1,
    host_resources: bool = True,
) -> dict[str, Any]:
    """Run the placement benchmark for each policy and return its figures (JSON-ready).

    ``host_resources=False`` drops the pods' host CPU and memory requests (GPU shapes only).
    """
    shapes = [pod.request for pod in load_pods(trace)]
    if not host_resources:
        shapes = [dataclasses.replace(shape, cpu_milli=0, host_memory_mib=0) for shape in shapes]
    machine = cluster(nodes, gpus_per_node)
    result: dict[str, Any] = {
        "benchmark": "placement",
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "nodes": nodes,
        "gpus_per_node": gpus_per_node,
        "utilisation": utilisation,
        "request_shapes": len(set(shapes)),
        "host_resources": host_resources,
        "seed": seed,
        "policies": {},
    }
    for name in policies:
        result["policies"][name] = measure(name, machine, shapes, decisions, utilisation, seed)
    return result


def main(argv: list[str] | None = None) -> int:
    """``python -m tessera_bench.simulate placement ...``: run and print the JSON figures."""
    parser = argparse.ArgumentParser(prog="python -m tessera_bench.simulate")
    sub = parser.add_subparsers(dest="benchmark", required=True)
    p = sub.add_parser("placement", help="placement decisions per second")
    p.add_argument("--nodes", type=int, default=10_000)
    p.add_argument("--gpus-per-node", type=int, default=8)
    p.add_argument("--decisions", type=int, default=50_000, help="timed decisions per policy")
    p.add_argument("--utilisation", type=float, default=0.85, help="GPU allocation kept during the timed loop")
    p.add_argument("--policies", default=",".join(BENCH_POLICIES), help="comma-separated")
    p.add_argument("--trace", default=str(DEFAULT_TRACE), help="pod list the requests are drawn from")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--gpu-only", action="store_true", help="drop the pods' host CPU and memory requests")
    p.add_argument("--json", action="store_true", help="one line of JSON (default: indented)")
    args = parser.parse_args(argv)
    policies = tuple(name for name in args.policies.split(",") if name)
    unknown = [name for name in policies if name not in BENCH_POLICIES]
    if unknown:
        parser.error(f"unknown policies: {', '.join(unknown)} (known: {', '.join(BENCH_POLICIES)})")
    result = run_placement(
        nodes=args.nodes,
        gpus_per_node=args.gpus_per_node,
        decisions=args.decisions,
        utilisation=args.utilisation,
        policies=policies,
        trace=args.trace,
        seed=args.seed,
        host_resources=not args.gpu_only,
    )
    print(json.dumps(result) if args.json else json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
