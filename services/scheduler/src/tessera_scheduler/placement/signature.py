"""Node signatures: a node's free capacity as a canonical, hashable value.

Two healthy nodes of the same pool (same cluster, region, labels and GPU models) with the same
signature are interchangeable for every placement decision, so the index keeps nodes in groups by
signature and policies score a group once instead of every node (see ``index.py``).

A signature holds, for every device not in MIG mode, ``(free milli, free MiB, total MiB, model)``
sorted in decreasing order; for every MIG device its model and ``(profile, free, milli, MiB)`` per
slot; and the host's free CPU (milli-cores) and memory (MiB).

``gpu_options``/``mig_options`` enumerate the distinct ways a request can land on a signature —
every policy chooses among these — and return the signature the node would have afterwards.
"""

from __future__ import annotations

from typing import Any

from tessera_scheduler.placement.model import GPU_MILLI, Request

DevSig = tuple[int, int, int, str]
"""``(free milli, free MiB, total MiB, model)`` of one device not in MIG mode."""
GpuSig = tuple[DevSig, ...]
"""The node's non-MIG devices, sorted in decreasing order."""
MigSlotSig = tuple[str, int, int, int]
"""``(profile, free instances, milli each, MiB each)``."""
MigDevSig = tuple[str, tuple[MigSlotSig, ...]]
"""``(model, slots)`` of one MIG device."""
MigSig = tuple[MigDevSig, ...]
GroupKey = tuple[int, int, int, int, int]
"""``(pool id, GPU signature id, MIG signature id, free CPU milli, free host MiB)`` (ids: :class:`SigTable`)."""

GpuOption = tuple[tuple[DevSig, ...], GpuSig]
"""The device entries a request takes and the GPU signature left afterwards."""
MigOption = tuple[MigDevSig, MigSig]
"""The MIG device a slice is taken from and the MIG signature left afterwards."""


def share_mib(request: Request, total_mib: int) -> int:
    """Device memory a fractional share of ``request`` pins on a device of ``total_mib`` MiB."""
    if request.memory_mib is not None:
        return request.memory_mib
    return total_mib * request.milli // GPU_MILLI


def usable(entry: DevSig, allowed: frozenset[str]) -> bool:
    """Whether a device of this entry's model is allowed (an empty set allows any)."""
    return not allowed or entry[3] in allowed


def gpu_options(sig: GpuSig, request: Request) -> list[GpuOption]:
    """The distinct placements of a non-MIG ``request`` on a node with GPU signature ``sig``.

    A whole request takes the first ``gpus`` usable devices with nothing allocated (and at least
    ``memory_mib`` MiB); a fraction takes one device with enough free milli and MiB — one option
    per distinct device entry. A CPU-only request has one option that takes no device. Empty
    when the request does not fit the devices (host resources are not checked here).
    """
    if request.gpus == 0:
        return [((), sig)]
    allowed = request.allowed_models
    if request.milli == GPU_MILLI:
        need = request.gpus
        minimum = request.memory_mib or 0
        taken: list[int] = []
        for pos, entry in enumerate(sig):
            if entry[0] == GPU_MILLI and entry[1] >= minimum and usable(entry, allowed):
                taken.append(pos)
                if len(taken) == need:
                    break
        if len(taken) < need:
            return []
        rest = list(sig)
        chosen = tuple(sig[pos] for pos in taken)
        for pos in taken:
            entry = sig[pos]
            rest[pos] = (0, 0, entry[2], entry[3])
        rest.sort(reverse=True)
        return [(chosen, tuple(rest))]
    milli = request.milli
    options: list[GpuOption] = []
    previous: DevSig | None = None
    for pos, entry in enumerate(sig):
        if entry[0] < milli:
            break  # sorted by free milli, decreasing: nothing further fits
        if entry == previous or not usable(entry, allowed):
            continue
        previous = entry
        mib = share_mib(request, entry[2])
        if entry[1] < mib:
            continue
        rest = list(sig)
        rest[pos] = (entry[0] - milli, entry[1] - mib, entry[2], entry[3])
        rest.sort(reverse=True)
        options.append(((entry,), tuple(rest)))
    return options


def mig_options(sig: MigSig, request: Request) -> list[MigOption]:
    """The distinct MIG devices with a free instance of ``request.mig_profile``, and what is left."""
    profile = request.mig_profile
    allowed = request.allowed_models
    options: list[MigOption] = []
    previous: MigDevSig | None = None
    for pos, (model, slots) in enumerate(sig):
        entry = sig[pos]
        if entry == previous or (allowed and model not in allowed):
            continue
        previous = entry
        for s, slot in enumerate(slots):
            if slot[0] == profile and slot[1] > 0:
                new_slots = list(slots)
                new_slots[s] = (slot[0], slot[1] - 1, slot[2], slot[3])
                rest = list(sig)
                rest[pos] = (model, tuple(new_slots))
                rest.sort(reverse=True)
                options.append((entry, tuple(rest)))
                break
    return options


def gpu_free_milli(sig: GpuSig) -> int:
    """Free milli-GPU of all non-MIG devices of a signature."""
    return sum(entry[0] for entry in sig)


def mig_free_milli(sig: MigSig) -> int:
    """Milli-GPU of all free MIG instances of a signature."""
    return sum(slot[1] * slot[2] for _model, slots in sig for slot in slots)


Score = tuple[int, ...]
Choice = tuple[tuple[DevSig, ...], MigDevSig | None]
"""What a placement takes on a node: the GPU entries (one per device), or the MIG device entry."""
Placement = tuple[Score, Choice, int]
"""One way a request lands on a node: its best-fit score, the choice, and the GPU signature id left."""
ShapeKey = tuple[int, int, int | None, frozenset[str], str | None]
"""The fields of a request placements depend on: gpus, milli, memory_mib, models, MIG profile."""

_MEMO_LIMIT = 400_000


def shape_of(request: Request) -> ShapeKey:
    """The part of a request its placements on a signature depend on (not host resources, not the selector)."""
    return (request.gpus, request.milli, request.memory_mib, request.allowed_models, request.mig_profile)


class SigTable:
    """Interned signatures: each distinct GPU (MIG) signature gets a small integer id.

    Keys of groups, memo tables and heap entries then hash a few integers instead of nested
    tuples. The placements of a request shape on a signature (:meth:`placements`) are memoised.
    """

    def __init__(self) -> None:
        self.gpu: list[GpuSig] = []
        self.empty: list[int] = []
        """Per GPU signature id: devices with nothing allocated."""
        self.top: list[int] = []
        """Per GPU signature id: the largest free milli on one device."""
        self.free: list[int] = []
        """Per GPU signature id: free milli-GPU of all its devices."""
        self.gpu_rank: list[int] = []
        """Per GPU signature id: its free milli and MiB per device, packed into one integer."""
        self.mig_rank: list[int] = []
        """Per MIG signature id: its free instances per slot, packed into one integer."""
        self.mig_free: list[int] = []
        """Per MIG signature id: milli-GPU of all its free MIG instances."""
        self.mig: list[MigSig] = []
        self._gpu_ids: dict[GpuSig, int] = {}
        self._mig_ids: dict[MigSig, int] = {}
        self._placements: dict[tuple[int, int, int], list[Placement]] = {}
        self._shape_ids: dict[ShapeKey, int] = {}
        self._memos: dict[str, tuple[object, dict[Any, Any]]] = {}

    def memo(self, name: str, version: object = 0) -> dict[Any, Any]:
        """A policy's memo table for signatures of this table (ids are only meaningful here).

        It starts empty again when ``version`` changes or when it has grown past a limit.
        """
        found = self._memos.get(name)
        if found is None or found[0] != version or len(found[1]) >= _MEMO_LIMIT:
            found = (version, {})
            self._memos[name] = found
        return found[1]

    def gpu_id(self, sig: GpuSig) -> int:
        """The id of a GPU signature (interned on first sight)."""
        found = self._gpu_ids.get(sig)
        if found is None:
            found = len(self.gpu)
            self._gpu_ids[sig] = found
            self.gpu.append(sig)
            self.empty.append(sum(1 for entry in sig if entry[0] == GPU_MILLI))
            self.top.append(sig[0][0] if sig else 0)
            self.free.append(gpu_free_milli(sig))
            rank = 0
            for entry in sig:
                rank = (((rank << 11) | entry[0]) << 32) | entry[1]
            self.gpu_rank.append(rank)
        return found

    def mig_id(self, sig: MigSig) -> int:
        """The id of a MIG signature (interned on first sight)."""
        found = self._mig_ids.get(sig)
        if found is None:
            found = len(self.mig)
            self._mig_ids[sig] = found
            self.mig.append(sig)
            self.mig_free.append(mig_free_milli(sig))
            rank = 0
            for _model, slots in sig:
                for slot in slots:
                    rank = (rank << 8) | slot[1]
            self.mig_rank.append(rank)
        return found

    def shape_id(self, request: Request) -> int:
        """A small integer naming the request's shape (:func:`shape_of`) in this table."""
        shape = shape_of(request)
        found = self._shape_ids.get(shape)
        if found is None:
            found = len(self._shape_ids)
            self._shape_ids[shape] = found
        return found

    def placements(self, key: GroupKey, request: Request, shape: int) -> list[Placement]:
        """Every distinct placement of ``request`` on a node of group ``key`` (host resources not checked).

        Each comes with its best-fit score ``(free milli-GPU left on the node, free milli-GPU left
        on the chosen device)``; for a MIG slice the device term is the free instances of that
        profile left on the device. ``shape`` is :meth:`shape_id` of the request.
        """
        memo_key = (key[1], key[2], shape)
        found = self._placements.get(memo_key)
        if found is not None:
            return found
        gpu = self.gpu[key[1]]
        mig = self.mig[key[2]]
        result: list[Placement] = []
        if request.mig_profile is not None:
            gpu_left = gpu_free_milli(gpu)
            for entry, after in mig_options(mig, request):
                left_on_device = next((s[1] for s in entry[1] if s[0] == request.mig_profile), 0) - 1
                result.append(((gpu_left + mig_free_milli(after), left_on_device), ((), entry), key[1]))
        else:
            mig_left = mig_free_milli(mig)
            for chosen, after_gpu in gpu_options(gpu, request):
                device_left = chosen[0][0] - request.milli if chosen and request.milli < GPU_MILLI else 0
                score = (gpu_free_milli(after_gpu) + mig_left, device_left)
                result.append((score, (chosen, None), self.gpu_id(after_gpu)))
        if len(self._placements) >= _MEMO_LIMIT:
            self._placements.clear()
        self._placements[memo_key] = result
        return result

    def sort_key(self, key: GroupKey) -> tuple[int, int, int, int, int]:
        """Orders groups by state (pool, free milli and MiB per device, MIG, host), not by interning order.

        Signatures are ranked by integers that encode their free amounts, so comparing two keys
        is a few integer comparisons (heaps compare them on every tie). Two groups of one pool
        with the same rank differ only in the models or sizes of otherwise equal devices.
        """
        return (key[0], self.gpu_rank[key[1]], self.mig_rank[key[2]], key[3], key[4])
