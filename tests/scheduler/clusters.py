"""Small clusters, random requests and a brute-force reference for the placement tests."""

from __future__ import annotations

import random
from collections.abc import Iterable

from tessera_scheduler.placement import (
    GPU_MILLI,
    Assignment,
    ClusterState,
    Device,
    MigSlot,
    Node,
    NodeUsage,
    Request,
    Selector,
    WorkloadDistribution,
    labels_of,
)

FRACTIONS = (50, 100, 250, 300, 470, 500, 650, 810)


def node(
    name: str,
    gpus: int,
    model: str = "A100",
    memory_mib: int = 81920,
    cpu_milli: int = 64_000,
    host_memory_mib: int = 262_144,
    cluster: str = "c1",
    region: str = "r1",
    labels: dict[str, str] | None = None,
    mig: tuple[MigSlot, ...] = (),
    healthy: bool = True,
) -> Node:
    devices = tuple(Device(f"{name}-gpu{i}", model, memory_mib, mig) for i in range(gpus))
    return Node(name, devices, cpu_milli, host_memory_mib, cluster, region, labels_of(labels), healthy)


def mixed_cluster() -> list[Node]:
    """Twelve nodes: several models, clusters, regions, labels, one MIG node, one unhealthy node."""
    mig = (MigSlot.of("1g.10gb", 3), MigSlot.of("2g.20gb", 2))
    return [
        node("a0", 8, cpu_milli=96_000),
        node("a1", 8, cpu_milli=32_000, labels={"zone": "x"}),
        node("a2", 4, labels={"zone": "x", "ib": "yes"}),
        node("t0", 2, "T4", 16384, cpu_milli=16_000, host_memory_mib=65_536),
        node("t1", 2, "T4", 16384, cluster="c2"),
        node("t2", 4, "T4", 16384, region="r2"),
        node("v0", 1, "V100", 32768, cpu_milli=8_000),
        node("v1", 8, "V100", 32768, region="r2", labels={"zone": "y"}),
        node("m0", 2, "A100", 81920, mig=mig),
        node("h0", 8, "H100", 81920, cluster="c2", cpu_milli=128_000),
        node("u0", 8, "A100", healthy=False),
        node("c0", 0, cpu_milli=32_000),
    ]


def random_request(rng: random.Random) -> Request:
    """A request of any kind the placement layer supports."""
    kind = rng.random()
    models: frozenset[str] = frozenset()
    if rng.random() < 0.2:
        models = frozenset(rng.sample(["A100", "T4", "V100", "H100"], rng.randint(1, 2)))
    selector = Selector()
    roll = rng.random()
    if roll < 0.1:
        selector = Selector(cluster=rng.choice(["c1", "c2"]))
    elif roll < 0.2:
        selector = Selector(region=rng.choice(["r1", "r2"]))
    elif roll < 0.3:
        selector = Selector(labels=labels_of({"zone": rng.choice(["x", "y"])}))
    cpu = rng.choice([0, 1000, 4000, 8000, 16_000])
    mem = rng.choice([0, 4096, 16384, 65536])
    if kind < 0.45:
        return Request(
            gpus=1,
            milli=rng.choice(FRACTIONS),
            memory_mib=rng.choice([None, None, 2048, 8192]),
            allowed_models=models,
            selector=selector,
            cpu_milli=cpu,
            host_memory_mib=mem,
        )
    if kind < 0.85:
        return Request(
            gpus=rng.choice([1, 1, 2, 4, 8]),
            allowed_models=models,
            selector=selector,
            cpu_milli=cpu,
            host_memory_mib=mem,
            memory_mib=rng.choice([None, None, 20000]),
        )
    if kind < 0.93:
        return Request(gpus=1, mig_profile=rng.choice(["1g.10gb", "2g.20gb"]), cpu_milli=cpu)
    return Request(gpus=0, cpu_milli=cpu, host_memory_mib=mem, selector=selector)


# -- the reference: every placement on every node, by brute force -------------------------------


def options(state: ClusterState, usage: NodeUsage, request: Request) -> list[Assignment]:
    """Every distinct way ``request`` fits on this node (devices identical in state give one option)."""
    n = usage.node
    if not usage.healthy or usage.cpu_free < request.cpu_milli or usage.memory_free_mib < request.host_memory_mib:
        return []
    if not request.selector.matches(n):
        return []
    allowed = request.allowed_models
    found: list[Assignment] = []
    if request.mig_profile is not None:
        for d in usage.devices:
            if not d.device.mig or (allowed and d.device.model not in allowed):
                continue
            for profile, _used, free in d.mig_used:
                if profile == request.mig_profile and free > 0:
                    slot = next(s for s in d.device.mig if s.profile == profile)
                    share = (d.device.uuid, slot.milli, slot.memory_mib, profile)
                    found.append(_assignment(n.name, [share], request))
        return found
    if request.gpus == 0:
        return [_assignment(n.name, [], request)]
    usable = [d for d in usage.devices if not d.device.mig and (not allowed or d.device.model in allowed)]
    if request.milli == GPU_MILLI:
        empty = [
            d
            for d in usable
            if d.allocated_milli == 0 and d.allocated_mib == 0 and d.device.memory_mib >= (request.memory_mib or 0)
        ]
        if len(empty) < request.gpus:
            return []
        return [
            _assignment(
                n.name, [(d.device.uuid, GPU_MILLI, d.device.memory_mib, None) for d in empty[: request.gpus]], request
            )
        ]
    for d in usable:
        need = (
            request.memory_mib if request.memory_mib is not None else d.device.memory_mib * request.milli // GPU_MILLI
        )
        if d.free_milli >= request.milli and d.free_mib >= need:
            found.append(_assignment(n.name, [(d.device.uuid, request.milli, need, None)], request))
    return found


def _assignment(name: str, shares: Iterable[tuple[str, int, int, str | None]], request: Request) -> Assignment:
    from tessera_scheduler.placement import DeviceShare

    return Assignment(
        name,
        tuple(DeviceShare(u, m, mib, p) for u, m, mib, p in shares),
        request.cpu_milli,
        request.host_memory_mib,
    )


def all_options(state: ClusterState, request: Request) -> list[Assignment]:
    """Every placement of ``request`` on every node, in node order."""
    result: list[Assignment] = []
    for n in state.nodes():
        result.extend(options(state, state.usage(n.name), request))
    return result


def best_fit_score(state: ClusterState, a: Assignment, request: Request) -> tuple[int, int]:
    """(free milli-GPU left on the node, free left on the chosen device) after ``a``."""
    usage = state.usage(a.node)
    taken = {s.uuid: s for s in a.devices}
    node_left = 0
    device_left = 0
    for d in usage.devices:
        if d.device.mig:
            for profile, _used, free in d.mig_used:
                slot = next(s for s in d.device.mig if s.profile == profile)
                left = free - (1 if d.device.uuid in taken and taken[d.device.uuid].mig_profile == profile else 0)
                node_left += left * slot.milli
                if d.device.uuid in taken and taken[d.device.uuid].mig_profile == profile:
                    device_left = left
        else:
            free = d.free_milli - (taken[d.device.uuid].milli if d.device.uuid in taken else 0)
            node_left += free
            if d.device.uuid in taken and request.milli < GPU_MILLI and request.mig_profile is None:
                device_left = free
    return node_left, device_left


def fragmentation(
    usage: NodeUsage, distribution: WorkloadDistribution, extra: Assignment | None = None, host_capacity: bool = True
) -> float:
    """``F_n(M)`` straight from the definition (floats, no memo), optionally after ``extra``.

    ``host_capacity=False`` is the paper's measure; with it, a shape can use at most the GPUs of
    as many of its tasks as the host's free CPU and memory still hold (``fgd.py``).
    """
    taken = {s.uuid: s.milli for s in extra.devices} if extra else {}
    free = [(d.free_milli - taken.get(d.device.uuid, 0), d.device.model) for d in usage.devices if not d.device.mig]
    cpu = usage.cpu_free - (extra.cpu_milli if extra else 0)
    mem = usage.memory_free_mib - (extra.host_memory_mib if extra else 0)
    total_free = sum(f for f, _m in free)
    total = distribution.total
    value = 0.0
    for shape, count in distribution.items():
        p = count / total
        usable = [f for f, model in free if not shape.allowed_models or model in shape.allowed_models]
        if shape.milli < GPU_MILLI:
            fits = any(f >= shape.milli for f in usable)
        else:
            fits = sum(1 for f in usable if f == GPU_MILLI) >= shape.gpus
        fits = fits and cpu >= shape.cpu_milli and mem >= shape.host_memory_mib
        if not fits:
            value += p * total_free
        else:
            need = shape.milli if shape.milli < GPU_MILLI else GPU_MILLI
            usable_sum = sum(f for f in usable if f >= need)
            if host_capacity:
                tasks = min(
                    cpu // shape.cpu_milli if shape.cpu_milli else usable_sum,
                    mem // shape.host_memory_mib if shape.host_memory_mib else usable_sum,
                )
                usable_sum = min(usable_sum, tasks * shape.gpus * shape.milli)
            value += p * (total_free - usable_sum)
    return value
