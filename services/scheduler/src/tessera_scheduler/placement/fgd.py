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

**Host capacity (Tessera's extension, on by default: ``Fgd(host_capacity=True)``).** The
paper's measure sees host CPU and memory only as "does one task of m still fit". On a GPU node
whose CPU runs out before its GPUs do (the Alibaba trace's pods ask ~11 cores per task whatever
their GPU share, and its G2 nodes have 12 cores per GPU), that is too late: each fractional
task placed there takes the CPU that a whole-GPU task would have needed, and the node ends with
GPUs no task can use, which the paper's measure only notices at the last step. So a shape m can
use at most the GPUs of as many of its tasks as the host still holds:
``usable_n(m) = min(Σ_g free_g · [g usable by m], T_n(m) · gpu_m)``, with
``T_n(m) = min(cpu_free // cpu_m, mem_free // mem_m)`` (no limit for a zero demand) and
``gpu_m`` m's milli-GPU per task; ``F_n(m) = Σ_g free_g - usable_n(m)``. When ``T_n(m) = 0`` this
is the paper's "m cannot run on n at all"; when the host holds enough tasks, the paper's
measure. It is the same question ("which free GPU could tasks of m not use?") asked of every
resource the task needs, not a tuned penalty. Effect on the trace's fill run (``tessera simulate
--compare``): best-fit leaves 8.25 % of the GPUs unallocated, FGD with the paper's measure
6.51 % (21 % fewer), FGD with host capacity 4.89 % (41 % fewer): fractional tasks go to nodes
with CPU to spare (T4, P100, G3) and G2 nodes are kept for tasks that use their GPUs whole. The
price is speed: ``F`` now depends on the exact free CPU and memory (not a class index), costs
O(task shapes) to evaluate and is memoised per (GPU signature, free CPU, free memory).

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
distribution is re-read after 1, 2, 4, … observations, then checked every ``refresh_every``
and re-read only when it has drifted from the one in use by more than ``drift`` (total
variation distance, default 0.05): re-reading drops every cached bound, and a snapshot within
δ of the current distribution misjudges no node's ``F_n(M)`` by more than δ times its free GPU
capacity (``|Σ_m (p_m - p'_m) F_n(m)| <= δ · free_n``). CPU-only and MIG tasks are left out of
M: a CPU-only task can use no GPU on any node, which shifts every candidate's Δ by the same
amount, and MIG devices serve only MIG requests.

**Exact arithmetic.** Weights are counts, so ``W · F`` (W the total count) is an integer and Δ
compares exactly, with no floating-point ties. With the paper's measure host resources enter
only as "does m fit", so ``F`` depends on free CPU (memory) only through the number of distinct
task CPU (memory) demands that fit — a small class index — and is memoised per (GPU signature,
CPU class, memory class), as a dot product of per-class part weights with the signature's
usable milli per GPU part (memoised per signature).

**Bound for the index.** Less host CPU or memory can only make ``F`` larger (fewer tasks fit),
so Δ computed as if the task took only a *floor* of its host demand is a lower bound of the
exact Δ. The index keeps one set of heaps per (GPU shape, floor): a task shape with at least
``FLOOR_SHARE`` (1 %) of the workload is its own floor, so its bound *is* its exact score and the
search ends at the first group that fits; a rarer request uses the most demanding frequent shape
of its GPU part that it dominates (else no host demand). The index orders groups by the bound
and stops as soon as no bound can beat the best exact score found (``index.best_group``), so the
decision is the exact argmin over all nodes whatever the floor; the floors only decide how much
work that takes (few heaps to keep up to date versus few groups to score).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from operator import mul

from tessera_scheduler.placement.index import Search
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

    def __contains__(self, shape: object) -> bool:
        return shape in self._counts


def _shape_order(shape: TaskShape) -> tuple[int, int, int, int, tuple[str, ...]]:
    return (shape.gpus, shape.milli, shape.cpu_milli, shape.host_memory_mib, tuple(sorted(shape.allowed_models)))


FLOOR_SHARE = 0.01
"""A task shape with at least this share of the workload gets search heaps of its own (``_Snapshot.floor``)."""


class _Snapshot:
    """A distribution frozen for scoring.

    Shapes are grouped by their GPU part — per-device need ``d`` (milli for a fraction, 1000 for
    whole GPUs), whole-device count ``k`` (0 for a fraction) and allowed models. For each GPU
    part, ``weights[g][cc][mc]`` is the total count of its shapes whose CPU demand is among the
    ``cc`` smallest distinct CPU demands and whose memory demand is among the ``mc`` smallest:
    the weight of the shapes that fit a host of CPU class ``cc`` and memory class ``mc``.
    """

    def __init__(self, distribution: WorkloadDistribution, floor_share: float = FLOOR_SHARE) -> None:
        shapes = list(distribution.items())
        self.weight = sum(count for _shape, count in shapes)
        self.counts = {shape: count for shape, count in shapes}
        floors: dict[tuple[int, int, frozenset[str]], list[tuple[int, int]]] = {}
        for shape, count in shapes:
            if count >= floor_share * self.weight:
                gpu_part = (shape.gpus, shape.milli, shape.allowed_models)
                floors.setdefault(gpu_part, []).append((shape.cpu_milli, shape.host_memory_mib))
        for levels in floors.values():
            levels.sort(reverse=True)
        self._floors = floors
        self._floor_memo: dict[tuple[int, int, frozenset[str], int, int], tuple[int, int]] = {}
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
        self.by_class = [[tuple(table[a][b] for table in counts) for b in range(cols)] for a in range(rows)]
        """``by_class[cc][mc]``: the weight of each GPU part that fits a host of those classes."""
        part_tasks: list[list[tuple[int, int, int, int]]] = [[] for _ in self.parts]
        for shape, count in shapes:
            g = parts[(shape.milli, shape.gpus if shape.milli == GPU_MILLI else 0, shape.allowed_models)]
            part_tasks[g].append((count, shape.cpu_milli, shape.host_memory_mib, shape.gpus * shape.milli))
        self.part_tasks = part_tasks
        """Per GPU part, its task shapes: ``(count, milli-CPU, host MiB, milli-GPU per task)``."""
        self.part_weight = [sum(task[0] for task in tasks) for tasks in part_tasks]
        self.part_host = [
            (
                max(cpu / milli for _c, cpu, _m, milli in tasks),
                max(cpu for _c, cpu, _m, _g in tasks),
                max(mem / milli for _c, _p, mem, milli in tasks),
                max(mem for _c, _p, mem, _g in tasks),
            )
            for tasks in part_tasks
        ]
        """Per GPU part: the most CPU and memory any of its tasks needs per milli-GPU, and per task."""

    def host_fragmentation(self, total: int, per_part: tuple[int, ...], cpu_free: int, mem_free: int) -> int:
        """``W x F_n(M)`` counting host capacity: a shape uses at most what its tasks the host can still take hold.

        ``per_part`` is :meth:`usable`'s second value for the node's GPU signature; ``cpu_free``
        (milli-CPU) and ``mem_free`` (MiB) are the host's.
        """
        usable = 0
        for g, room in enumerate(per_part):
            if not room:
                continue
            cpu_per_milli, cpu_max, mem_per_milli, mem_max = self.part_host[g]
            if cpu_free >= cpu_per_milli * room + cpu_max and mem_free >= mem_per_milli * room + mem_max:
                usable += self.part_weight[g] * room  # the host holds every task that fits the room
                continue
            for count, cpu, mem, milli in self.part_tasks[g]:
                take = room
                if cpu:
                    held = cpu_free // cpu * milli
                    if held < take:
                        take = held
                if mem:
                    held = mem_free // mem * milli
                    if held < take:
                        take = held
                usable += count * take
        return self.weight * total - usable

    def floor(self, request: Request) -> tuple[int, int]:
        """Host floors ``(milli-CPU, MiB)`` at most the request's: the heaps its search reads are per floor.

        The most demanding frequent shape (at least ``floor_share`` of the workload) of the same
        GPU part that the request dominates in CPU and memory, else ``(0, 0)``. A frequent shape's
        own requests get their exact demand (their bound is then the exact score).
        """
        key = (request.gpus, request.milli, request.allowed_models, request.cpu_milli, request.host_memory_mib)
        found = self._floor_memo.get(key)
        if found is None:
            found = (0, 0)
            if request.mig_profile is None:
                for cpu, mem in self._floors.get(key[:3], ()):
                    if cpu <= key[3] and mem <= key[4]:
                        found = (cpu, mem)
                        break
            self._floor_memo[key] = found
        return found

    def drift(self, distribution: WorkloadDistribution) -> float:
        """Total variation distance between this snapshot's distribution and ``distribution`` (0..1)."""
        if not self.weight or not distribution.total:
            return 0.0 if self.weight == distribution.total else 1.0
        seen = 0.0
        for shape, count in distribution.items():
            seen += abs(count / distribution.total - self.counts.get(shape, 0) / self.weight)
        for shape, count in self.counts.items():
            if shape not in distribution:
                seen += count / self.weight
        return seen / 2

    def usable(self, sig: GpuSig) -> tuple[int, tuple[int, ...]]:
        """Free milli-GPU of a GPU signature, and per GPU part the milli a task of that part could use.

        ``fragmentation(sig, cc, mc) == weight x total - sum(by_class[cc][mc][g] x usable[g])``.
        """
        total = 0
        for entry in sig:
            total += entry[0]
        per_part: list[int] = []
        for d, k, models in self.parts:
            if k:
                n = 0
                for entry in sig:
                    if entry[0] == GPU_MILLI and (not models or entry[3] in models):
                        n += 1
                per_part.append(GPU_MILLI * n if n >= k else 0)
            else:
                u = 0
                for entry in sig:
                    if entry[0] < d:
                        break  # sorted by free milli, decreasing
                    if not models or entry[3] in models:
                        u += entry[0]
                per_part.append(u)
        return total, tuple(per_part)

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
    distribution is checked every that many, and re-read when it has drifted from the one in use
    by more than ``drift`` (total variation distance). ``max_exact``: score at most this many node groups
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
        drift: float = 0.05,
        max_exact: int | None = None,
        host_capacity: bool = True,
    ) -> None:
        self.max_exact = max_exact
        self._host_capacity = host_capacity
        self._drift = drift
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
            if total < self._refresh_every or self._snapshot.drift(self._distribution) > self._drift:
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
        if self._host_capacity:
            total, per_part = snap.usable(sig)
            return snap.host_fragmentation(total, per_part, usage.cpu_free, usage.memory_free_mib) / snap.weight
        cpu_class = snap.cpu_class(usage.cpu_free)
        mem_class = snap.mem_class(usage.memory_free_mib)
        return snap.fragmentation(sig, cpu_class, mem_class) / snap.weight

    def prepare(self, state: ClusterState, request: Request, shape: int) -> Search:
        """The search for ``request``: bound with the heap shape's host floors, exact with the request's own."""
        snap = self._snapshot
        sigs = state.index.sigs
        version = self._version
        cpu_levels = snap.cpu
        mem_levels = snap.mem
        cpu = request.cpu_milli
        mem = request.host_memory_mib
        cpu_floor, mem_floor = snap.floor(request)
        heap_shapes: dict[tuple[int, int, int], int] = sigs.memo("fgd-heap-shape", version)
        heap_key = (shape, cpu_floor, mem_floor)
        heap_shape = heap_shapes.get(heap_key)
        if heap_shape is None:
            heap_shape = heap_shapes[heap_key] = len(heap_shapes)
        frag: dict[tuple[int, int, int], int] = sigs.memo("fgd-fragmentation", version)
        usable_memo: dict[int, tuple[int, tuple[int, ...]]] = sigs.memo("fgd-usable", version)
        weight = snap.weight
        by_class = snap.by_class
        usable = snap.usable

        host_capacity = self._host_capacity
        host_fragmentation = snap.host_fragmentation

        def fragmentation(gpu: int, cc: int, mc: int) -> int:
            found = usable_memo.get(gpu)
            if found is None:
                found = usable_memo[gpu] = usable(gpu_sigs[gpu])
            if host_capacity:
                return host_fragmentation(found[0], found[1], cc, mc)
            usable_weighted: int = sum(map(mul, by_class[cc][mc], found[1]))
            return weight * found[0] - usable_weighted

        deltas: dict[tuple[int, int, int, int, int, int, int], tuple[Score, Choice] | None] = sigs.memo(
            "fgd-delta", version
        )
        gpu_sigs = sigs.gpu
        placements = sigs.placements

        def delta(key: GroupKey, cpu_taken: int, mem_taken: int) -> tuple[Score, Choice] | None:
            if host_capacity:
                cc, mc, cc_after, mc_after = key[3], key[4], key[3] - cpu_taken, key[4] - mem_taken
            else:
                cc = bisect_right(cpu_levels, key[3])
                mc = bisect_right(mem_levels, key[4])
                cc_after = bisect_right(cpu_levels, key[3] - cpu_taken)
                mc_after = bisect_right(mem_levels, key[4] - mem_taken)
            memo_key = (key[1], key[2], cc, mc, cc_after, mc_after, shape)
            if memo_key in deltas:
                return deltas[memo_key]
            before_key = (key[1], cc, mc)
            before = frag.get(before_key)
            if before is None:
                before = frag[before_key] = fragmentation(key[1], cc, mc)
            best: tuple[Score, Choice] | None = None
            for bf, choice, after in placements(key, request, shape):
                after_key = (after, cc_after, mc_after)
                value = frag.get(after_key)
                if value is None:
                    value = frag[after_key] = fragmentation(after, cc_after, mc_after)
                score = (value - before, *bf)
                if best is None or score < best[0]:
                    best = (score, choice)
            deltas[memo_key] = best
            return best

        def bound(key: GroupKey) -> Score | None:
            if key[3] < cpu_floor or key[4] < mem_floor:
                return None
            found = delta(key, cpu_floor, mem_floor)
            return None if found is None else found[0]

        def exact(key: GroupKey) -> tuple[Score, Choice] | None:
            return delta(key, cpu, mem)

        return Search(heap_shape, bound, exact)
