"""FGD: fragmentation gradient descent, Tessera's default placement policy.

Source: Q. Weng, L. Yang, Y. Yu, W. Wang, X. Tang, G. Yang, L. Zhang, "Beware of Fragmentation:
Scheduling GPU-Sharing Workloads with Fragmentation Gradient Descent", USENIX ATC '23. The
idea and the measure are the paper's; this implementation is Tessera's own.

**Fragmentation of a node for one task.** A node's free GPU capacity (milli-GPU of its devices
not in MIG mode) is *fragmented for task m* when m could not use it:

- if m cannot run on node n at all — too little free host CPU or memory, no allowed GPU model,
  no device with enough free milli (a fraction), or fewer than k empty devices (k whole GPUs) —
  every free milli-GPU of the node is a fragment: ``F_n(m) = Σ_g free_g``;
- otherwise only the devices whose free capacity is below what m needs per device are
  fragments: ``F_n(m) = Σ_g free_g · [free_g < d_m or g's model not allowed for m]``, where
  ``d_m`` is m's milli for a fraction and 1000 for whole GPUs.

**Expected fragmentation for a workload.** With ``p_m`` the popularity of task shape m in the
workload M (the share of tasks of that shape), ``F_n(M) = Σ_m p_m · F_n(m)``: the free GPU
capacity of node n that a task drawn from M is expected not to be able to use. The cluster's
fragmentation is the sum over nodes.

**Placement.** For an incoming task, every feasible (node, device choice) is scored by the
increase of fragmentation it causes, ``Δ = F_n'(M) - F_n(M)`` (n' is the node after the
placement; other nodes do not change), and the least increase wins — the steepest descent
of cluster fragmentation. Ties go to best-fit (least free GPU left on the node, then on the
device), then to the node signature and the lowest-numbered node.

**The workload M.** :class:`WorkloadDistribution` counts task shapes (GPUs, milli, host CPU and
memory, allowed models). :class:`Fgd` either uses a fixed distribution (e.g. of a trace's pods)
or learns one from the requests it observes (``observe``, called on every arrival); a learned
distribution is re-read after 1, 2, 4, … observations and then every ``refresh_every``, so
bounds cached for one distribution are rebuilt rarely. CPU-only and MIG tasks are left out of M:
a CPU-only task can use no GPU on any node, which shifts every candidate's Δ by the same amount,
and MIG devices serve only MIG requests.

**Exact arithmetic.** Weights are counts, so ``W · F`` (W the total count) is an integer and Δ
compares exactly, with no floating-point ties. Host resources enter only as "does m fit", so
``F`` depends on free CPU (memory) only through the number of distinct task CPU (memory)
demands that fit — a small class index — and is memoised per (GPU signature, CPU class, memory
class).

**Bound for the index.** Less host CPU or memory can only make fewer shapes fit, so ``F`` never
decreases when a placement consumes host resources: Δ computed as if the task took no host
resources is a lower bound of the exact Δ, and depends only on the group and the request's GPU
shape. The index orders groups by it and stops as soon as no bound can beat the best exact
score found (``index.best_group``), so the decision is the exact argmin over all nodes.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

from tessera_scheduler.placement.model import GPU_MILLI, Request
from tessera_scheduler.placement.policies import ScoredPolicy
from tessera_scheduler.placement.signature import Choice, GpuSig, GroupKey, Score
from tessera_scheduler.placement.state import ClusterState


@dataclass(frozen=True, slots=True)
class TaskShape:
    """One kind of task in a workload: GPUs x milli, host CPU and memory, allowed models."""

    gpus: int
    milli: int
    cpu_milli: int
    host_memory_mib: int
    allowed_models: frozenset[str] = frozenset()

    @classmethod
    def of(cls, request: Request) -> TaskShape | None:
        """The shape of a request, or ``None`` for CPU-only and MIG requests (not in FGD's workload)."""
        if request.gpus == 0 or request.mig_profile is not None:
            return None
        return cls(request.gpus, request.milli, request.cpu_milli, request.host_memory_mib, request.allowed_models)


class WorkloadDistribution:
    """How often each task shape occurs (counts; the popularity of a shape is its share)."""

    def __init__(self, counts: Mapping[TaskShape, int] | None = None) -> None:
        self._counts: dict[TaskShape, int] = dict(counts or {})
        self.total = sum(self._counts.values())

    @classmethod
    def of(cls, requests: Iterable[Request]) -> WorkloadDistribution:
        """The distribution of a list of requests."""
        distribution = cls()
        for request in requests:
            distribution.observe(request)
        return distribution

    def observe(self, request: Request, weight: int = 1) -> None:
        """Count one more task of ``request``'s shape (CPU-only and MIG requests are ignored)."""
        shape = TaskShape.of(request)
        if shape is not None:
            self._counts[shape] = self._counts.get(shape, 0) + weight
            self.total += weight

    def items(self) -> Iterator[tuple[TaskShape, int]]:
        """``(shape, count)`` pairs, most frequent first, then by shape."""
        return iter(sorted(self._counts.items(), key=lambda item: (-item[1], _shape_order(item[0]))))

    def __len__(self) -> int:
        return len(self._counts)


def _shape_order(shape: TaskShape) -> tuple[int, int, int, int, tuple[str, ...]]:
    return (shape.gpus, shape.milli, shape.cpu_milli, shape.host_memory_mib, tuple(sorted(shape.allowed_models)))


class _Snapshot:
    """A distribution frozen for scoring.

    Shapes are grouped by their GPU part — per-device need ``d`` (milli for a fraction, 1000 for
    whole GPUs), whole-device count ``k`` (0 for a fraction) and allowed models. For each GPU
    part, ``weights[g][cc][mc]`` is the total count of its shapes whose CPU demand is among the
    ``cc`` smallest distinct CPU demands and whose memory demand is among the ``mc`` smallest:
    the weight of the shapes that fit a host of CPU class ``cc`` and memory class ``mc``.
    """

    def __init__(self, distribution: WorkloadDistribution) -> None:
        shapes = list(distribution.items())
        self.weight = sum(count for _shape, count in shapes)
        self.cpu = sorted({shape.cpu_milli for shape, _count in shapes})
        self.mem = sorted({shape.host_memory_mib for shape, _count in shapes})
        parts: dict[tuple[int, int, frozenset[str]], int] = {}
        for shape, _count in shapes:
            part = (shape.milli, shape.gpus if shape.milli == GPU_MILLI else 0, shape.allowed_models)
            parts.setdefault(part, len(parts))
        self.parts = list(parts)
        rows, cols = len(self.cpu) + 1, len(self.mem) + 1
        counts = [[[0] * cols for _ in range(rows)] for _ in self.parts]
        for shape, count in shapes:
            g = parts[(shape.milli, shape.gpus if shape.milli == GPU_MILLI else 0, shape.allowed_models)]
            ci = bisect_left(self.cpu, shape.cpu_milli)
            mi = bisect_left(self.mem, shape.host_memory_mib)
            counts[g][ci + 1][mi + 1] += count
        for table in counts:  # 2-D prefix sums: table[a][b] = weight with cpu index < a and memory index < b
            for a in range(1, rows):
                for b in range(1, cols):
                    table[a][b] += table[a - 1][b] + table[a][b - 1] - table[a - 1][b - 1]
        self.weights = counts

    def cpu_class(self, cpu_free: int) -> int:
        """How many distinct task CPU demands fit in ``cpu_free``."""
        return bisect_right(self.cpu, cpu_free)

    def mem_class(self, mem_free: int) -> int:
        """How many distinct task host-memory demands fit in ``mem_free``."""
        return bisect_right(self.mem, mem_free)

    def fragmentation(self, sig: GpuSig, cpu_class: int, mem_class: int) -> int:
        """``W · F_n(M)`` in milli-GPU x count, for a node with this GPU signature and host classes."""
        total = 0
        for entry in sig:
            total += entry[0]
        usable = 0
        for g, (d, k, models) in enumerate(self.parts):
            w = self.weights[g][cpu_class][mem_class]
            if not w:
                continue  # no shape of this GPU part fits the host: all of it is a fragment for them
            if k:
                n = 0
                for entry in sig:
                    if entry[0] == GPU_MILLI and (not models or entry[3] in models):
                        n += 1
                if n >= k:
                    usable += w * GPU_MILLI * n
            else:
                u = 0
                for entry in sig:
                    if entry[0] < d:
                        break  # sorted by free milli, decreasing
                    if not models or entry[3] in models:
                        u += entry[0]
                usable += w * u
        return self.weight * total - usable


class Fgd(ScoredPolicy):
    """Fragmentation gradient descent (see the module docstring for the measure and the source).

    ``distribution``: the workload to measure fragmentation against. Without one, the policy
    learns it from ``observe`` (what a live scheduler and the simulator do); with one, it keeps it
    fixed unless ``learn=True``. ``refresh_every``: once past that many observations, the learned
    distribution is re-read every that many. ``max_exact``: score at most this many node groups
    exactly per decision (after the first that fits), trading quality for speed on very large
    clusters; ``None`` (the default) always finds the exact argmin.
    """

    name = "fgd"

    def __init__(
        self,
        distribution: WorkloadDistribution | None = None,
        *,
        learn: bool | None = None,
        refresh_every: int = 1000,
        max_exact: int | None = None,
    ) -> None:
        self.max_exact = max_exact
        self._distribution = distribution if distribution is not None else WorkloadDistribution()
        self._learn = distribution is None if learn is None else learn
        self._refresh_every = max(1, refresh_every)
        self._version = 0
        self._snapshot = _Snapshot(self._distribution)
        self._next_refresh = max(1, 2 * self._distribution.total)

    @property
    def version(self) -> object:
        """Changes whenever the policy re-reads its workload distribution."""
        return self._version

    @property
    def distribution(self) -> WorkloadDistribution:
        """The workload distribution fragmentation is measured against."""
        return self._distribution

    def observe(self, request: Request) -> None:
        """Count the request's shape when learning; re-read the distribution on schedule."""
        if not self._learn:
            return
        self._distribution.observe(request)
        total = self._distribution.total
        if total >= self._next_refresh:
            self._snapshot = _Snapshot(self._distribution)
            self._version += 1
            self._next_refresh = 2 * total if total < self._refresh_every else total + self._refresh_every

    def fragmentation(self, state: ClusterState, node: str) -> float:
        """``F_n(M)`` of a node now, in milli-GPU (for reports and tests)."""
        snap = self._snapshot
        usage = state.usage(node)
        if not snap.weight:
            return 0.0
        sig = tuple(
            sorted(
                (
                    (d.free_milli, d.free_mib, d.device.memory_mib, d.device.model)
                    for d in usage.devices
                    if not d.device.mig
                ),
                reverse=True,
            )
        )
        cpu_class = snap.cpu_class(usage.cpu_free)
        mem_class = snap.mem_class(usage.memory_free_mib)
        return snap.fragmentation(sig, cpu_class, mem_class) / snap.weight

    def _frag(self, state: ClusterState, gpu_id: int, cpu_class: int, mem_class: int) -> int:
        sigs = state.index.sigs
        memo: dict[tuple[int, int, int], int] = sigs.memo("fgd-fragmentation", self._version)
        memo_key = (gpu_id, cpu_class, mem_class)
        value = memo.get(memo_key)
        if value is None:
            value = self._snapshot.fragmentation(sigs.gpu[gpu_id], cpu_class, mem_class)
            memo[memo_key] = value
        return value

    def bound(self, state: ClusterState, key: GroupKey, request: Request, shape: int) -> Score | None:
        """Δ as if the request took no host resources (a lower bound), then best-fit."""
        snap = self._snapshot
        cc = snap.cpu_class(key[3])
        mc = snap.mem_class(key[4])
        memo: dict[tuple[int, int, int, int, int], Score | None] = state.index.sigs.memo("fgd-bound", self._version)
        memo_key = (key[1], key[2], cc, mc, shape)
        if memo_key in memo:
            return memo[memo_key]
        before = self._frag(state, key[1], cc, mc)
        best: Score | None = None
        for bf, _choice, after in state.index.sigs.placements(key, request, shape):
            score = (self._frag(state, after, cc, mc) - before, *bf)
            if best is None or score < best:
                best = score
        memo[memo_key] = best
        return best

    def exact(self, state: ClusterState, key: GroupKey, request: Request, shape: int) -> tuple[Score, Choice] | None:
        """Δ of the best device choice on the group, then best-fit."""
        snap = self._snapshot
        cc = snap.cpu_class(key[3])
        mc = snap.mem_class(key[4])
        cc_after = snap.cpu_class(key[3] - request.cpu_milli)
        mc_after = snap.mem_class(key[4] - request.host_memory_mib)
        memo: dict[tuple[int, int, int, int, int, int, int], tuple[Score, Choice] | None] = state.index.sigs.memo(
            "fgd-exact", self._version
        )
        memo_key = (key[1], key[2], cc, mc, cc_after, mc_after, shape)
        if memo_key in memo:
            return memo[memo_key]
        before = self._frag(state, key[1], cc, mc)
        best: tuple[Score, Choice] | None = None
        for bf, choice, after in state.index.sigs.placements(key, request, shape):
            score = (self._frag(state, after, cc_after, mc_after) - before, *bf)
            if best is None or score < best[0]:
                best = (score, choice)
        memo[memo_key] = best
        return best
