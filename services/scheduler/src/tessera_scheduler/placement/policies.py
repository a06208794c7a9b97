"""Placement policies: which feasible node and devices a request gets.

A policy is an object with a ``name``, ``place(state, request)`` and ``observe(request)``; pick
one by name with :func:`policy_named`:

- ``first-fit`` (:class:`FirstFit`) — the lowest-numbered node (registration order) that can
  take the request, devices in node order; what the simulator's ``fifo`` uses.
- ``best-fit`` (:class:`BestFit`) — the node left with the least free GPU capacity (milli-GPU,
  all its devices), then on it the device left with the least (the tightest device for a
  fraction), as in GPU-sharing bin-packing schedulers (Alibaba's gpushare "binpack").
- ``fgd`` (:class:`~tessera_scheduler.placement.fgd.Fgd`) — fragmentation gradient descent
  (Weng et al., USENIX ATC '23), Tessera's default; see ``fgd.py``.

Every policy is deterministic: ties go to the lower score tuple, then to the node's state (its
signature), then to the lowest-numbered node and device — a pure function of the cluster state.
"""

from __future__ import annotations

from typing import Any, Protocol

from tessera_scheduler.placement.index import Search, best_group
from tessera_scheduler.placement.model import Assignment, PlacementError, Request
from tessera_scheduler.placement.signature import Choice, GroupKey, Score
from tessera_scheduler.placement.state import ClusterState


class Policy(Protocol):
    """Chooses where a request goes among the placements that fit."""

    @property
    def name(self) -> str:
        """The policy's name (``first-fit``, ``best-fit``, ``fgd``)."""
        ...

    def place(self, state: ClusterState, request: Request) -> Assignment | None:
        """Where ``request`` would go in ``state`` now (``None``: it fits nowhere). Must not mutate."""
        ...

    def observe(self, request: Request) -> None:
        """Learn from a request that arrived (FGD's workload distribution); others ignore it."""
        ...


class ScoredPolicy:
    """A policy that scores node groups through the index (``index.best_group``).

    Subclasses give :meth:`prepare`: for one request, a :class:`~tessera_scheduler.placement.index.Search`
    with a ``bound`` — a lower bound of the exact score that ignores (some of) the host resources
    and, when ``pure``, depends only on the group key and the search's heap shape — and an
    ``exact`` score and choice of the best placement on a group. A policy object may serve several
    cluster states: every memo it keeps lives in the state's ``SigTable``.
    """

    name = "scored"
    pure = True
    shared = False
    max_exact: int | None = None

    @property
    def version(self) -> object:
        """Changes when the scoring function changes (cached bounds are then recomputed)."""
        return 0

    def place(self, state: ClusterState, request: Request) -> Assignment | None:
        """See :class:`Policy`."""
        found = best_group(state.index, request, _Bound(self, state))
        if found is None:
            return None
        key, choice = found
        return state.assignment_for(key, request, choice)

    def observe(self, request: Request) -> None:
        """Scored policies learn nothing unless they say otherwise."""

    def prepare(self, state: ClusterState, request: Request, shape: int) -> Search:
        """The bound and exact score of ``request`` over the groups of ``state`` (``shape``: its GPU shape id)."""
        raise NotImplementedError


class _Bound:
    """A scored policy bound to one cluster state: the ``GroupScorer`` the index searches with."""

    __slots__ = ("max_exact", "name", "policy", "pure", "shared", "state", "version")

    def __init__(self, policy: ScoredPolicy, state: ClusterState) -> None:
        self.policy = policy
        self.state = state
        self.name = policy.name
        self.version = policy.version
        self.pure = policy.pure
        self.shared = policy.shared
        self.max_exact = policy.max_exact

    def prepare(self, request: Request, shape: int) -> Search:
        return self.policy.prepare(self.state, request, shape)


class FirstFit(ScoredPolicy):
    """The lowest-numbered node that fits; devices in node order.

    A group's score is its lowest member's index, whatever the request (one set of heaps serves
    every shape); it changes as nodes join and leave, so the index re-checks it when it surfaces.
    """

    name = "first-fit"
    pure = False
    shared = True

    def prepare(self, state: ClusterState, request: Request, shape: int) -> Search:
        """Bound: the group's lowest node index; exact: the same if the request fits the group (devices later)."""
        groups = state.index.groups
        placements = state.index.sigs.placements

        def bound(key: GroupKey) -> Score | None:
            return (groups[key].first(),)

        def exact(key: GroupKey) -> tuple[Score, Any] | None:
            if not placements(key, request, shape):
                return None
            return (groups[key].first(),), None

        return Search(-1, bound, exact)


class BestFit(ScoredPolicy):
    """The node with the least free GPU capacity that fits the request, then its tightest device.

    Least free before placing is least left after placing, whatever the request, so one set of
    heaps ordered by free capacity serves every request shape, and the first group that fits is
    the answer. On the node: the device left with the least free milli (``SigTable.placements``'
    second score term), the first in signature order on a tie.
    """

    name = "best-fit"
    shared = True

    def prepare(self, state: ClusterState, request: Request, shape: int) -> Search:
        """Bound: free milli-GPU of the group's nodes (MIG instances included); exact: the same if it fits."""
        sigs = state.index.sigs
        free = sigs.free
        mig_free = sigs.mig_free
        placements = sigs.placements
        memo: dict[tuple[int, int, int], Choice | None] = sigs.memo("best-fit")

        def bound(key: GroupKey) -> Score | None:
            return (free[key[1]] + mig_free[key[2]],)

        def exact(key: GroupKey) -> tuple[Score, Any] | None:
            memo_key = (key[1], key[2], shape)
            choice = memo.get(memo_key, _MISSING)
            if choice is _MISSING:
                best: tuple[int, Choice] | None = None
                for score, option, _after in placements(key, request, shape):
                    if best is None or score[1] < best[0]:
                        best = (score[1], option)
                choice = None if best is None else best[1]
                memo[memo_key] = choice
            if choice is None:
                return None
            return (free[key[1]] + mig_free[key[2]],), choice

        return Search(-1, bound, exact)


_MISSING: Any = object()


POLICY_NAMES = ("first-fit", "best-fit", "fgd")


def policy_named(name: str) -> Policy:
    """A fresh policy by name (``first-fit``, ``best-fit`` or ``fgd``; FGD learns online)."""
    from tessera_scheduler.placement.fgd import Fgd

    if name == "first-fit":
        return FirstFit()
    if name == "best-fit":
        return BestFit()
    if name == "fgd":
        return Fgd()
    raise PlacementError(f"unknown placement policy {name!r} (known: {', '.join(POLICY_NAMES)})")
