"""The cluster state: what every device and host has allocated, and the index over it.

:class:`ClusterState` is the only mutable object of the placement layer. It is pure (no I/O, no
clock, no randomness) and enforces its invariants on every change, whoever calls it:

- a device's allocated milli-GPU is at most 1000 and its allocated MiB at most its memory;
- a whole-GPU share takes a device with nothing allocated, so whole jobs never share a device;
- a MIG instance is taken only from a free slot of its profile;
- a host's allocated CPU and memory never exceed its capacity;
- unhealthy nodes get nothing new;
- ``release`` accepts only a live allocation and restores exactly what ``allocate`` took.

``place``/``place_gang`` never change the state; ``allocate``/``release`` do; ``trial()`` undoes
everything done inside it, which is how the admission layer asks "would this job fit if these
allocations were released?" (:meth:`ClusterState.fits_if_released`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING

from tessera_scheduler.placement.index import NodeIndex
from tessera_scheduler.placement.model import (
    GPU_MILLI,
    Assignment,
    Device,
    DeviceShare,
    DeviceUsage,
    Node,
    NodeUsage,
    PlacementError,
    Request,
)
from tessera_scheduler.placement.signature import Choice, DevSig, GroupKey, MigDevSig, share_mib

if TYPE_CHECKING:
    from tessera_scheduler.placement.policies import Policy

_MIG_DEVICE: DevSig = (0, 0, 0, "")
"""Placeholder signature entry of a MIG device (MIG devices have their own signature)."""


class ClusterState:
    """Nodes, their allocations, and the index policies search (see the module docstring)."""

    def __init__(self, nodes: Iterable[Node] = ()) -> None:
        self.index = NodeIndex()
        self._nodes: list[Node] = []
        self._alive: list[bool] = []
        self._healthy: list[bool] = []
        self._pool: list[int] = []
        self._by_name: dict[str, int] = {}
        self._gpu_devs: list[tuple[int, ...]] = []
        self._mig_devs: list[tuple[int, ...]] = []
        self._cpu_free: list[int] = []
        self._mem_free: list[int] = []
        self._dev: list[Device] = []
        self._dev_node: list[int] = []
        self._by_uuid: dict[str, int] = {}
        self._alloc_milli: list[int] = []
        self._alloc_mib: list[int] = []
        self._whole: list[bool] = []
        self._mig_used: list[list[int] | None] = []
        self._devsig: list[DevSig] = []
        self._live: dict[Assignment, int] = {}
        self._live_by_node: list[dict[Assignment, int]] = []
        self._capacity_milli = 0
        self._allocated_milli = 0
        self._journal: list[tuple[bool, Assignment]] = []
        self._trial_depth = 0
        for node in nodes:
            self.add_node(node)

    # -- nodes ----------------------------------------------------------------------------------

    def add_node(self, node: Node) -> None:
        """Register a node (a later node with the same name or a device uuid already known is an error)."""
        if node.name in self._by_name:
            raise PlacementError(f"node {node.name} is already known")
        for device in node.devices:
            if device.uuid in self._by_uuid:
                raise PlacementError(f"device {device.uuid} of node {node.name} is already known")
        i = len(self._nodes)
        pool = self.index.pool_of(node)
        self._nodes.append(node)
        self._alive.append(True)
        self._healthy.append(node.healthy)
        self._pool.append(pool)
        self._by_name[node.name] = i
        self._cpu_free.append(node.cpu_milli)
        self._mem_free.append(node.memory_mib)
        self._live_by_node.append({})
        gpu: list[int] = []
        mig: list[int] = []
        for device in node.devices:
            d = len(self._dev)
            self._dev.append(device)
            self._dev_node.append(i)
            self._by_uuid[device.uuid] = d
            self._alloc_milli.append(0)
            self._alloc_mib.append(0)
            self._whole.append(False)
            if device.mig:
                self._mig_used.append([0] * len(device.mig))
                self._devsig.append(_MIG_DEVICE)
                mig.append(d)
            else:
                self._mig_used.append(None)
                self._devsig.append((GPU_MILLI, device.memory_mib, device.memory_mib, device.model))
                gpu.append(d)
        self._gpu_devs.append(tuple(gpu))
        self._mig_devs.append(tuple(mig))
        self._capacity_milli += GPU_MILLI * len(node.devices)
        self.index.pool_nodes[pool].append(i)
        self.index.node_key.append(None)
        self._reindex(i)

    def remove_node(self, name: str) -> None:
        """Forget a node; it must hold no live allocation (release them first, e.g. on node loss)."""
        i = self._index_of(name)
        if self._live_by_node[i]:
            raise PlacementError(f"node {name} still holds {sum(self._live_by_node[i].values())} allocation(s)")
        node = self._nodes[i]
        self._alive[i] = False
        del self._by_name[name]
        for device in node.devices:
            del self._by_uuid[device.uuid]
        self._capacity_milli -= GPU_MILLI * len(node.devices)
        self.index.pool_nodes[self._pool[i]].remove(i)
        self._reindex(i)

    def set_healthy(self, name: str, healthy: bool) -> None:
        """Mark a node healthy or not. An unhealthy node keeps its allocations but gets nothing new."""
        i = self._index_of(name)
        self._healthy[i] = healthy
        self._reindex(i)

    def node(self, name: str) -> Node:
        """The node called ``name``."""
        return self._nodes[self._index_of(name)]

    def nodes(self) -> list[Node]:
        """Every known node, in registration order."""
        return [node for i, node in enumerate(self._nodes) if self._alive[i]]

    def is_healthy(self, name: str) -> bool:
        """Whether the node may get new allocations."""
        return self._healthy[self._index_of(name)]

    def usage(self, name: str) -> NodeUsage:
        """What the node called ``name`` has allocated now."""
        i = self._index_of(name)
        devices = []
        for device in self._nodes[i].devices:
            d = self._by_uuid[device.uuid]
            used = self._mig_used[d]
            mig = (
                tuple((slot.profile, used[s], slot.count - used[s]) for s, slot in enumerate(device.mig))
                if used
                else ()
            )
            devices.append(DeviceUsage(device, self._alloc_milli[d], self._alloc_mib[d], self._whole[d], mig))
        return NodeUsage(self._nodes[i], self._healthy[i], self._cpu_free[i], self._mem_free[i], tuple(devices))

    def allocations(self, node: str | None = None) -> list[Assignment]:
        """Live allocations (each as many times as it was allocated), of one node or all."""
        live = self._live if node is None else self._live_by_node[self._index_of(node)]
        return [assignment for assignment, count in live.items() for _ in range(count)]

    @property
    def capacity_milli(self) -> int:
        """Milli-GPU of every device of every known node (MIG devices included)."""
        return self._capacity_milli

    @property
    def allocated_milli(self) -> int:
        """Milli-GPU held by live allocations."""
        return self._allocated_milli

    # -- decisions ------------------------------------------------------------------------------

    def place(self, request: Request, policy: Policy) -> Assignment | None:
        """Where ``policy`` would put ``request`` now, or ``None`` if it fits nowhere. Changes nothing."""
        return policy.place(self, request)

    def place_gang(self, requests: Sequence[Request], policy: Policy) -> list[Assignment] | None:
        """Places for every worker of a gang, or ``None`` unless all of them fit (all-or-nothing).

        Workers are placed in order, each allocated tentatively so that the next sees what the
        previous took (so a gang may spread over several nodes); the tentative allocations are
        always rolled back — the state is unchanged afterwards. Commit with :meth:`allocate_all`.
        """
        placed: list[Assignment] = []
        with self.trial():
            for request in requests:
                assignment = policy.place(self, request)
                if assignment is None:
                    return None
                self.allocate(assignment)
                placed.append(assignment)
        return placed

    def fits_if_released(
        self, requests: Sequence[Request], released: Iterable[Assignment], policy: Policy
    ) -> list[Assignment] | None:
        """Where the gang ``requests`` would go if the live allocations ``released`` were released.

        For preemption: "would the preemptor fit after these evictions?". Changes nothing.
        """
        with self.trial():
            for assignment in released:
                self.release(assignment)
            return self.place_gang(requests, policy)

    @contextmanager
    def trial(self) -> Iterator[ClusterState]:
        """A context in which ``allocate``/``release`` are undone on exit (nesting is fine).

        Only allocations and releases are undone; node changes (add, remove, health) are not.
        """
        mark = len(self._journal)
        self._trial_depth += 1
        try:
            yield self
        finally:
            self._trial_depth -= 1
            journal = self._journal
            while len(journal) > mark:
                allocated, assignment = journal.pop()
                if allocated:
                    self._apply(assignment, -1)
                else:
                    self._apply(assignment, +1)

    def allocate(self, assignment: Assignment) -> None:
        """Take the devices and host resources of ``assignment``.

        Raises :class:`PlacementError`, changing nothing, if that would break an invariant.
        """
        self._check(assignment)
        self._apply(assignment, +1)
        if self._trial_depth:
            self._journal.append((True, assignment))

    def allocate_all(self, assignments: Sequence[Assignment]) -> None:
        """Allocate several assignments (a gang) all or nothing: on an error, none stays allocated."""
        mark = len(self._journal)
        done: list[Assignment] = []
        try:
            for assignment in assignments:
                self.allocate(assignment)
                done.append(assignment)
        except PlacementError:
            for assignment in reversed(done):
                self._apply(assignment, -1)
            del self._journal[mark:]
            raise

    def release(self, assignment: Assignment) -> None:
        """Give back a live allocation exactly; raises :class:`PlacementError` if it is not live."""
        if not self._live.get(assignment):
            raise PlacementError(f"release of an allocation that is not live on node {assignment.node}")
        self._apply(assignment, -1)
        if self._trial_depth:
            self._journal.append((False, assignment))

    def clone(self) -> ClusterState:
        """An independent copy with the same nodes, health and live allocations."""
        copy = ClusterState()
        for i, node in enumerate(self._nodes):
            if self._alive[i]:
                copy.add_node(node)
                if self._healthy[i] != node.healthy:
                    copy.set_healthy(node.name, self._healthy[i])
        for assignment, count in self._live.items():
            for _ in range(count):
                copy._apply(assignment, +1)
        return copy

    # -- for policies ---------------------------------------------------------------------------

    def assignment_for(self, key: GroupKey, request: Request, choice: Choice | None) -> Assignment:
        """The assignment of ``request`` on the lowest-numbered node of group ``key``.

        ``choice`` names the signature entries to take (one per device, or the MIG device entry);
        each maps to the lowest-numbered device of the node in that state. ``None`` takes the
        first devices that fit in node order (first-fit).
        """
        i = self.index.groups[key].first()
        if choice is None:
            found = self.first_fit_on(i, request)
            if found is None:
                raise PlacementError(f"node {self._nodes[i].name} does not fit the request after all")
            return found
        return self._assignment_on(i, request, choice[0], choice[1])

    def first_fit_on(self, i: int, request: Request) -> Assignment | None:
        """The first-fit assignment of ``request`` on node ``i`` (devices in node order), if any."""
        if not self._healthy[i] or not self._alive[i]:
            return None
        if self._cpu_free[i] < request.cpu_milli or self._mem_free[i] < request.host_memory_mib:
            return None
        allowed = request.allowed_models
        if request.mig_profile is not None:
            for d in self._mig_devs[i]:
                device = self._dev[d]
                used = self._mig_used[d]
                if used is None or (allowed and device.model not in allowed):
                    continue
                for s, slot in enumerate(device.mig):
                    if slot.profile == request.mig_profile and used[s] < slot.count:
                        share = DeviceShare(device.uuid, slot.milli, slot.memory_mib, slot.profile)
                        return Assignment(self._nodes[i].name, (share,), request.cpu_milli, request.host_memory_mib)
            return None
        shares: list[DeviceShare] = []
        if request.gpus:
            for d in self._gpu_devs[i]:
                device = self._dev[d]
                if allowed and device.model not in allowed:
                    continue
                if request.milli == GPU_MILLI:
                    if self._alloc_milli[d] == 0 and device.memory_mib >= (request.memory_mib or 0):
                        shares.append(DeviceShare(device.uuid, GPU_MILLI, device.memory_mib))
                else:
                    mib = share_mib(request, device.memory_mib)
                    if (
                        self._alloc_milli[d] + request.milli <= GPU_MILLI
                        and self._alloc_mib[d] + mib <= device.memory_mib
                    ):
                        shares.append(DeviceShare(device.uuid, request.milli, mib))
                if len(shares) == request.gpus:
                    break
            if len(shares) < request.gpus:
                return None
        return Assignment(self._nodes[i].name, tuple(shares), request.cpu_milli, request.host_memory_mib)

    # -- checks ---------------------------------------------------------------------------------

    def check_invariants(self) -> None:
        """Recompute every device and host from the live allocations and compare (for tests)."""
        milli = [0] * len(self._dev)
        mib = [0] * len(self._dev)
        whole = [0] * len(self._dev)
        shares = [0] * len(self._dev)
        cpu = [0] * len(self._nodes)
        mem = [0] * len(self._nodes)
        for assignment, count in self._live.items():
            i = self._by_name[assignment.node]
            cpu[i] += assignment.cpu_milli * count
            mem[i] += assignment.host_memory_mib * count
            for share in assignment.devices:
                d = self._by_uuid[share.uuid]
                milli[d] += share.milli * count
                mib[d] += share.memory_mib * count
                whole[d] += count if share.whole else 0
                shares[d] += count
        for d, device in enumerate(self._dev):
            if not self._alive[self._dev_node[d]]:
                continue
            assert milli[d] == self._alloc_milli[d] <= GPU_MILLI, f"device {device.uuid}: milli"
            assert mib[d] == self._alloc_mib[d] <= device.memory_mib, f"device {device.uuid}: MiB"
            assert whole[d] == 0 or shares[d] == 1, f"device {device.uuid}: a whole device is shared"
            assert bool(whole[d]) == self._whole[d], f"device {device.uuid}: whole flag"
        for i, node in enumerate(self._nodes):
            if not self._alive[i]:
                continue
            assert 0 <= self._cpu_free[i] == node.cpu_milli - cpu[i], f"node {node.name}: cpu"
            assert 0 <= self._mem_free[i] == node.memory_mib - mem[i], f"node {node.name}: memory"
            expected = self._key(i) if self._healthy[i] else None
            assert self.index.node_key[i] == expected, f"node {node.name}: index"
        assert self._allocated_milli == sum(milli)

    # -- internals ------------------------------------------------------------------------------

    def _index_of(self, name: str) -> int:
        i = self._by_name.get(name)
        if i is None:
            raise PlacementError(f"unknown node {name!r}")
        return i

    def _check(self, assignment: Assignment) -> None:
        i = self._index_of(assignment.node)
        if not self._healthy[i]:
            raise PlacementError(f"node {assignment.node} is unhealthy")
        if assignment.cpu_milli < 0 or assignment.host_memory_mib < 0:
            raise PlacementError("host resources of an assignment must be >= 0")
        if assignment.cpu_milli > self._cpu_free[i]:
            raise PlacementError(
                f"node {assignment.node}: {assignment.cpu_milli} milli-CPU asked, {self._cpu_free[i]} free"
            )
        if assignment.host_memory_mib > self._mem_free[i]:
            raise PlacementError(
                f"node {assignment.node}: {assignment.host_memory_mib} MiB asked, {self._mem_free[i]} free"
            )
        seen: set[str] = set()
        for share in assignment.devices:
            d = self._by_uuid.get(share.uuid)
            if d is None or self._dev_node[d] != i:
                raise PlacementError(f"device {share.uuid} is not on node {assignment.node}")
            if share.uuid in seen:
                raise PlacementError(f"device {share.uuid} appears twice in one assignment")
            seen.add(share.uuid)
            device = self._dev[d]
            if share.memory_mib < 0:
                raise PlacementError(f"device {share.uuid}: memory_mib must be >= 0")
            used = self._mig_used[d]
            if share.mig_profile is not None or used is not None:
                self._check_mig(device, used, share)
                continue
            if not 1 <= share.milli <= GPU_MILLI:
                raise PlacementError(f"device {share.uuid}: milli must be 1..1000, not {share.milli}")
            if share.whole and (self._alloc_milli[d] or self._alloc_mib[d]):
                raise PlacementError(f"device {share.uuid}: a whole GPU needs a device with nothing allocated")
            if self._alloc_milli[d] + share.milli > GPU_MILLI:
                raise PlacementError(
                    f"device {share.uuid}: {share.milli} milli asked, {GPU_MILLI - self._alloc_milli[d]} free"
                )
            if self._alloc_mib[d] + share.memory_mib > device.memory_mib:
                raise PlacementError(
                    f"device {share.uuid}: {share.memory_mib} MiB asked, {device.memory_mib - self._alloc_mib[d]} free"
                )

    @staticmethod
    def _check_mig(device: Device, used: list[int] | None, share: DeviceShare) -> None:
        if used is None or share.mig_profile is None:
            raise PlacementError(f"device {share.uuid}: MIG instances only on MIG devices, and only MIG there")
        for s, slot in enumerate(device.mig):
            if slot.profile == share.mig_profile:
                if share.milli != slot.milli or share.memory_mib != slot.memory_mib:
                    raise PlacementError(
                        f"device {share.uuid}: a {slot.profile} instance is {slot.milli} milli, {slot.memory_mib} MiB"
                    )
                if used[s] >= slot.count:
                    raise PlacementError(f"device {share.uuid}: no free {slot.profile} instance")
                return
        raise PlacementError(f"device {share.uuid} has no MIG profile {share.mig_profile}")

    def _apply(self, assignment: Assignment, sign: int) -> None:
        i = self._by_name[assignment.node]
        self._cpu_free[i] -= sign * assignment.cpu_milli
        self._mem_free[i] -= sign * assignment.host_memory_mib
        for share in assignment.devices:
            d = self._by_uuid[share.uuid]
            self._alloc_milli[d] += sign * share.milli
            self._alloc_mib[d] += sign * share.memory_mib
            self._allocated_milli += sign * share.milli
            used = self._mig_used[d]
            if used is not None:
                for s, slot in enumerate(self._dev[d].mig):
                    if slot.profile == share.mig_profile:
                        used[s] += sign
                        break
            else:
                if share.whole:
                    self._whole[d] = sign > 0
                device = self._dev[d]
                self._devsig[d] = (
                    GPU_MILLI - self._alloc_milli[d],
                    device.memory_mib - self._alloc_mib[d],
                    device.memory_mib,
                    device.model,
                )
        live = self._live
        by_node = self._live_by_node[i]
        count = live.get(assignment, 0) + sign
        if count:
            live[assignment] = count
            by_node[assignment] = count
        else:
            del live[assignment]
            del by_node[assignment]
        self._reindex(i)

    def _key(self, i: int) -> GroupKey:
        devsig = self._devsig
        gpu = sorted([devsig[d] for d in self._gpu_devs[i]], reverse=True)
        mig: list[MigDevSig] = []
        for d in self._mig_devs[i]:
            device = self._dev[d]
            used = self._mig_used[d]
            assert used is not None
            slots = tuple((s.profile, s.count - used[k], s.milli, s.memory_mib) for k, s in enumerate(device.mig))
            mig.append((device.model, slots))
        mig.sort(reverse=True)
        sigs = self.index.sigs
        return (self._pool[i], sigs.gpu_id(tuple(gpu)), sigs.mig_id(tuple(mig)), self._cpu_free[i], self._mem_free[i])

    def _reindex(self, i: int) -> None:
        self.index.move(i, self._key(i) if self._alive[i] and self._healthy[i] else None)

    def _assignment_on(self, i: int, request: Request, gpu: tuple[DevSig, ...], mig: MigDevSig | None) -> Assignment:
        node = self._nodes[i]
        shares: list[DeviceShare] = []
        if mig is not None:
            for d in self._mig_devs[i]:
                device = self._dev[d]
                used = self._mig_used[d]
                assert used is not None
                slots = tuple((s.profile, s.count - used[k], s.milli, s.memory_mib) for k, s in enumerate(device.mig))
                if (device.model, slots) == mig:
                    for slot in device.mig:
                        if slot.profile == request.mig_profile:
                            shares.append(DeviceShare(device.uuid, slot.milli, slot.memory_mib, slot.profile))
                            break
                    break
        else:
            taken: set[int] = set()
            for entry in gpu:
                for d in self._gpu_devs[i]:
                    if d not in taken and self._devsig[d] == entry:
                        taken.add(d)
                        device = self._dev[d]
                        if request.milli == GPU_MILLI:
                            shares.append(DeviceShare(device.uuid, GPU_MILLI, device.memory_mib))
                        else:
                            shares.append(
                                DeviceShare(device.uuid, request.milli, share_mib(request, device.memory_mib))
                            )
                        break
        return Assignment(node.name, tuple(shares), request.cpu_milli, request.host_memory_mib)
