"""The index that keeps placement sub-linear in the number of nodes.

- **Pools**: nodes with the same cluster, region, labels and GPU models. A request's selector and
  allowed models pick its pools once (cached), never node by node.
- **Groups**: within a pool, healthy nodes with the same signature (``signature.py``; signatures
  are interned as small ids). Nodes of a group are interchangeable for every decision; a group
  hands out its lowest-numbered member.
- **Score heaps**: per policy and pool — and per *heap shape* when the policy's bound depends
  on the request (FGD: GPU shape and host floor, ``Search.heap_shape``) — the non-empty groups
  ordered by a *lower bound* of the policy's score. Shared heaps (best-fit, first-fit) are
  partitioned by capability (empty devices, largest free milli on a device) and free host CPU
  (half-octave buckets), the others by CPU only, so a request skips every partition that cannot
  hold it without looking at its groups; the partitions a request may use are cached per need,
  and a search visits them in order of their best entry. Groups that appear are appended to the
  pool's activation log and read into each heap the next time that heap is used (a rarely
  requested shape costs nothing meanwhile). Best-fit and first-fit need one set per pool
  whatever the request (``shared``): a change to a node costs them one heap push.
- :func:`best_group` pops groups in bound order, scores them exactly, and stops as soon as no
  remaining bound can beat the best exact score: the first fitting group when the bound is
  exact (best-fit, first-fit), a best-first branch-and-bound when the exact score also depends
  on host resources (FGD).

A policy's bound is either *pure* (a function of the group key and the request shape, so an
entry only goes stale by its group emptying) or, for first-fit, the group's lowest member index:
that changes with membership, so entries are re-checked when popped and a node joining below a
group's minimum re-logs the group.

Ties between groups are broken by their state (``SigTable.sort_key``), then their key, so a
decision depends on the cluster state, not on the order of the events that led to it (except
for groups whose devices differ only in model, which fall back to first-seen order).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from tessera_scheduler.placement.model import GPU_MILLI, Labels, Node, Request
from tessera_scheduler.placement.signature import GroupKey, Score, SigTable

PoolKey = tuple[str, str, Labels, frozenset[str]]
"""``(cluster, region, labels, GPU models)``."""
Entry = tuple[Any, ...]
"""``(*score, sort key, group key)``: heap entries and candidates compare as plain tuples."""


BoundFn = Callable[[GroupKey], "Score | None"]
"""A scorer's bound for one request: a group key to a lower bound of its exact score, or ``None``."""
ExactFn = Callable[[GroupKey], "tuple[Score, Any] | None"]
"""A scorer's exact score for one request: a group key to ``(score, choice)``, or ``None``."""


@dataclass(frozen=True, slots=True)
class Search:
    """One request's search, as a policy prepares it for :func:`best_group`.

    ``heap_shape`` names the set of heaps (per pool) the search reads; every request with the
    same ``heap_shape`` must get the same ``bound`` for every group (the heaps cache it). ``bound``
    must never exceed ``exact``'s score; ``exact`` returns ``None`` where the request does not fit
    the group (host resources are checked by the index before it is called).
    """

    heap_shape: int
    bound: BoundFn
    exact: ExactFn


class GroupScorer(Protocol):
    """What :func:`best_group` needs from a policy.

    When ``pure`` the bound depends only on the group key and the heap shape, so a cached entry
    only goes stale by its group emptying; otherwise (first-fit) entries are re-checked when
    popped. ``version`` changes when the scoring function does (cached bounds are then
    dropped). ``max_exact`` caps the groups scored exactly per decision once a candidate is
    found (``None``: no cap, the result is the exact argmin). ``shared``: the bound does not
    depend on the request at all, so one set of heaps per pool serves every request.
    """

    @property
    def name(self) -> str:
        """Names the scorer's heaps."""
        ...

    @property
    def version(self) -> object:
        """Changes when the scoring function changes."""
        ...

    @property
    def pure(self) -> bool:
        """Whether ``bound`` is a function of the key and the heap shape only."""
        ...

    @property
    def max_exact(self) -> int | None:
        """Cap on exact scores per decision once a candidate is found (``None``: none)."""
        ...

    @property
    def shared(self) -> bool:
        """Whether ``bound`` ignores the request entirely."""
        ...

    def prepare(self, request: Request, shape: int) -> Search:
        """The search for ``request`` (``shape``: its id in the index's ``SigTable``)."""
        ...


_LOG_MIN = 1024


class Group:
    """The healthy nodes of one pool that have the same signature."""

    __slots__ = ("_order", "members")

    def __init__(self) -> None:
        self.members: dict[int, None] = {}
        self._order: list[int] = []

    def add(self, node: int) -> bool:
        """Add a node (by index); True if it is now the lowest member."""
        lowest = not self.members or node < self.first()
        self.members[node] = None
        heapq.heappush(self._order, node)
        return lowest

    def remove(self, node: int) -> None:
        """Remove a node (by index)."""
        del self.members[node]

    def first(self) -> int:
        """The lowest node index in the group (the group must not be empty)."""
        order = self._order
        while order[0] not in self.members:
            heapq.heappop(order)
        return order[0]


def cpu_bucket(milli: int) -> int:
    """Half-octave bucket of a CPU amount: non-decreasing in ``milli``, 2 buckets per doubling."""
    width = milli.bit_length()
    return width * 4 + ((milli << 2) >> width) if milli else 0


class ShapeHeaps:
    """One policy's bounds over one pool (for one heap shape, unless the bounds are shared).

    Entries are partitioned by the group's capability — its number of empty devices and its
    largest free milli on one device — and its free host CPU (:func:`cpu_bucket`), so that a
    search skips whole partitions that cannot hold the request without looking at their groups.
    The partitions a request may use are cached per need (empty devices, milli, CPU bucket) until
    a partition appears or disappears.
    """

    __slots__ = ("_eligible", "cursor", "keys", "partitioned", "parts", "size")

    def __init__(self, cursor: int, partitioned: bool = True) -> None:
        self.cursor = cursor
        self.partitioned = partitioned
        """False: partitions by CPU only (the bounds themselves exclude the groups whose devices cannot fit)."""
        self.parts: dict[tuple[int, int, int], list[Entry]] = {}
        """``(empty devices, largest free milli on a device, CPU bucket)`` to a heap of entries."""
        self._eligible: dict[tuple[int, int, int], list[list[Entry]]] = {}
        self.keys: set[GroupKey] = set()
        self.size = 0

    def push(self, entry: Entry, sigs: SigTable) -> None:
        """Add an entry to its group's partition."""
        key: GroupKey = entry[-1]
        gpu = key[1]
        bucket = cpu_bucket(key[3])
        part = (sigs.empty[gpu], sigs.top[gpu], bucket) if self.partitioned else (GPU_MILLI, GPU_MILLI, bucket)
        heap = self.parts.get(part)
        if heap is None:
            heap = self.parts[part] = [entry]
            empty, top, bucket = part
            for (need_empty, milli, low), heaps in self._eligible.items():
                if empty >= need_empty and top >= milli and bucket >= low:
                    heaps.append(heap)
        else:
            heapq.heappush(heap, entry)
        self.size += 1

    def candidates(self, request: Request) -> list[tuple[Entry, int, list[Entry]]]:
        """The non-empty partitions that may hold ``request``, as a heap of ``(top entry, n, heap)``.

        Popping it gives the partitions in order of their best entry (emptied ones are dropped).
        """
        need_empty = request.gpus if request.whole else 0
        milli = request.milli if request.gpus and request.mig_profile is None else 0
        low = cpu_bucket(request.cpu_milli)
        need = (need_empty, milli, low)
        heaps = self._eligible.get(need)
        if heaps is None:
            heaps = [
                heap
                for (empty, top, bucket), heap in self.parts.items()
                if empty >= need_empty and top >= milli and bucket >= low
            ]
            self._eligible[need] = heaps
        found = [(heap[0], n, heap) for n, heap in enumerate(heaps) if heap]
        if 2 * len(found) < len(heaps) and len(heaps) > 8:
            for part in [part for part, heap in self.parts.items() if not heap]:
                del self.parts[part]
            self._eligible.clear()
        heapq.heapify(found)
        return found

    def entries(self) -> list[Entry]:
        """Every entry (for compaction)."""
        return [entry for heap in self.parts.values() for entry in heap]

    def clear(self) -> None:
        """Drop every entry."""
        self.parts = {}
        self._eligible = {}
        self.keys = set()
        self.size = 0


class NodeIndex:
    """Pools, groups, activation logs and score heaps of one cluster state."""

    def __init__(self) -> None:
        self.sigs = SigTable()
        self.pool_ids: dict[PoolKey, int] = {}
        self.pools: list[PoolKey] = []
        self.pool_nodes: list[list[int]] = []
        self.pool_groups: list[dict[GroupKey, Group]] = []
        self.groups: dict[GroupKey, Group] = {}
        self.node_key: list[GroupKey | None] = []
        self._logs: list[list[GroupKey]] = []
        self._log_base: list[int] = []
        self._heaps: dict[str, tuple[object, dict[tuple[int, int], ShapeHeaps]]] = {}
        self._eligible: dict[tuple[object, frozenset[str], bool], list[int]] = {}

    # -- pools -----------------------------------------------------------------------------------

    def pool_of(self, node: Node) -> int:
        """The pool id of ``node``, creating the pool on first sight."""
        key: PoolKey = (node.cluster, node.region, node.labels, frozenset(d.model for d in node.devices))
        pool = self.pool_ids.get(key)
        if pool is None:
            pool = len(self.pools)
            self.pool_ids[key] = pool
            self.pools.append(key)
            self.pool_nodes.append([])
            self.pool_groups.append({})
            self._logs.append([])
            self._log_base.append(0)
            self._eligible.clear()
        return pool

    def eligible_pools(self, request: Request) -> list[int]:
        """Pools whose nodes match the request's selector and have a device of an allowed model."""
        cache_key = (request.selector, request.allowed_models, request.gpus > 0)
        pools = self._eligible.get(cache_key)
        if pools is None:
            selector = request.selector
            allowed = request.allowed_models
            pools = []
            for pool, (cluster, region, labels, models) in enumerate(self.pools):
                if selector.cluster is not None and selector.cluster != cluster:
                    continue
                if selector.region is not None and selector.region != region:
                    continue
                if not selector.labels <= labels:
                    continue
                if request.gpus > 0 and (not models or (allowed and not allowed & models)):
                    continue
                pools.append(pool)
            self._eligible[cache_key] = pools
        return pools

    # -- groups ----------------------------------------------------------------------------------

    def move(self, node: int, key: GroupKey | None) -> None:
        """Put ``node`` into the group of ``key`` (``None``: out of every group, e.g. unhealthy)."""
        old = self.node_key[node]
        if old == key:
            return
        if old is not None:
            group = self.groups[old]
            group.remove(node)
            if not group.members:
                del self.groups[old]
                del self.pool_groups[old[0]][old]
        self.node_key[node] = key
        if key is None:
            return
        found = self.groups.get(key)
        if found is None:
            group = Group()
            self.groups[key] = group
            self.pool_groups[key[0]][key] = group
        else:
            group = found
        if group.add(node):
            self._log(key)

    def _log(self, key: GroupKey) -> None:
        pool = key[0]
        log = self._logs[pool]
        log.append(key)
        if len(log) > max(_LOG_MIN, 2 * len(self.pool_groups[pool])):
            half = len(log) // 2
            del log[:half]
            self._log_base[pool] += half

    # -- score heaps -----------------------------------------------------------------------------

    def heaps(self, scorer: GroupScorer, pool: int, request: Request, search: Search) -> ShapeHeaps:
        """The up-to-date heaps of ``scorer`` for ``search.heap_shape`` over ``pool``.

        A ``shared`` scorer has one set of heaps per pool; its entries are filtered by the
        request's needs when searched, not when read from the log.
        """
        shared = scorer.shared
        shape = -1 if shared else search.heap_shape
        known = self._heaps.get(scorer.name)
        version = scorer.version
        if known is None or known[0] != version:
            known = (version, {})
            self._heaps[scorer.name] = known
        log = self._logs[pool]
        base = self._log_base[pool]
        end = base + len(log)
        heaps = known[1].get((pool, shape))
        live = self.pool_groups[pool]
        sigs = self.sigs
        sort_key = sigs.sort_key
        bound = search.bound
        pure = scorer.pure
        if heaps is None or heaps.cursor < base:
            heaps = ShapeHeaps(end, shared)
            for key in live:
                score = bound(key)
                if score is not None:
                    heaps.push((*score, sort_key(key), key), sigs)
                    heaps.keys.add(key)
            known[1][(pool, shape)] = heaps
            return heaps
        if heaps.cursor < end:
            keys = heaps.keys
            # Necessary conditions first: enough empty devices, or a device with enough free milli.
            empty = sigs.empty
            top = sigs.top
            need_empty = request.gpus if request.whole and not shared else 0
            need_top = request.milli if request.gpus and request.mig_profile is None and not shared else 0
            for key in log[heaps.cursor - base :]:
                gpu = key[1]
                if empty[gpu] < need_empty or top[gpu] < need_top:
                    continue
                if key in live and (not pure or key not in keys):
                    score = bound(key)
                    if score is not None:
                        heaps.push((*score, sort_key(key), key), sigs)
                        keys.add(key)
            heaps.cursor = end
            if heaps.size > 2 * len(live) + 64:
                entries = [entry for entry in heaps.entries() if entry[-1] in live]
                if not pure:
                    # One entry per group, at its current bound (a stale entry may be its only one).
                    entries = [
                        (*score, sort_key(key), key)
                        for key in {entry[-1]: None for entry in entries}
                        if (score := bound(key)) is not None
                    ]
                heaps.clear()
                for entry in sorted(set(entries)):
                    heaps.push(entry, sigs)
                    heaps.keys.add(entry[-1])
        return heaps


def best_group(index: NodeIndex, request: Request, scorer: GroupScorer) -> tuple[GroupKey, Any] | None:
    """The group with the least exact score for ``request``, and the scorer's choice on it.

    Partitions are taken in order of their best bound, and groups within each in order of their
    bound; the search stops when the next bound cannot beat the best exact score (or after
    ``scorer.max_exact`` exact scores, once one fits). Ties are broken by the groups' states, so
    the result is a pure function of the cluster state.
    """
    best: Entry | None = None
    best_choice: Any = None
    cpu = request.cpu_milli
    mem = request.host_memory_mib
    groups = index.groups
    sort_key = index.sigs.sort_key
    search = scorer.prepare(request, index.sigs.shape_id(request))
    pure = scorer.pure
    bound = search.bound
    exact = search.exact
    budget = scorer.max_exact
    scored = 0
    heappop = heapq.heappop
    heappush = heapq.heappush
    for pool in index.eligible_pools(request):
        heaps = index.heaps(scorer, pool, request, search)
        keys = heaps.keys
        seen: set[GroupKey] = set()
        order = heaps.candidates(request)
        while order:
            head, _n, heap = heappop(order)
            if best is not None and (head >= best or (budget is not None and scored >= budget)):
                break
            popped: list[Entry] = []
            while heap:
                top = heap[0]
                if best is not None and (top >= best or (budget is not None and scored >= budget)):
                    break
                heappop(heap)
                key: GroupKey = top[-1]
                if key not in groups:
                    keys.discard(key)
                    heaps.size -= 1
                    continue
                if not pure:
                    current = bound(key)
                    if current != top[:-2]:
                        # Stale. A lower score was re-logged when a node joined below the group's
                        # minimum (that entry exists already); a higher one, when the minimum left.
                        heaps.size -= 1
                        if current is not None and current > top[:-2]:
                            heappush(heap, (*current, sort_key(key), key))
                            heaps.size += 1
                        continue
                popped.append(top)
                if key[3] < cpu or key[4] < mem or key in seen:
                    continue
                seen.add(key)
                result = exact(key)
                scored += 1
                if result is None:
                    continue
                candidate = (*result[0], top[-2], key)
                if best is None or candidate < best:
                    best = candidate
                    best_choice = result[1]
            for entry in popped:
                heappush(heap, entry)
    if best is None:
        return None
    return best[-1], best_choice
