"""Fair share between tenants: weighted dominant resource share of exponentially decayed usage.

Sources: Ghodsi et al., "Dominant Resource Fairness: Fair Allocation of Multiple Resource Types",
NSDI '11 (a tenant's dominant share is its largest share of any resource; weighted DRF divides it
by the tenant's weight; the tenant with the lowest dominant share goes first), and Slurm's
``PriorityDecayHalfLife`` (https://slurm.schedmd.com/priority_multifactor.html: past usage counts
less the older it is, halving every half-life), so a tenant that used a lot last month is not
starved today.

Resources are strings: ``"gpu:<model>"`` (milli-GPU), ``"cpu"`` (milli-cores), ``"mem"`` (MiB).
For each tenant and resource the allocation rate ``a(t)`` (what it holds now) is integrated with
exponential decay, ``U(t) = integral of a(s) x exp(-lambda (t - s)) ds`` with
``lambda = ln 2 / H``. The normalised share is ``U x lambda / capacity``: a constant allocation
``a`` converges to ``a / capacity``, and with nothing allocated the share halves every ``H``.
Between two changes of the rate the closed form is exact, so no call iterates over time:
``S(t + d) = S(t) x e + a x (1 - e)`` with ``S = U x lambda`` and ``e = exp(-lambda d)``. Every call
is O(resources of the tenant).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

__all__ = ["DEFAULT_HALF_LIFE_S", "FairShare"]

DEFAULT_HALF_LIFE_S = 604800.0
"""Seven days, in seconds (Slurm's default ``PriorityDecayHalfLife``)."""


class _Usage:
    """One tenant: allocation rate and decayed rate ``S`` per resource, as of ``at``."""

    __slots__ = ("at", "decayed", "rate")

    def __init__(self, at: float) -> None:
        self.at = at
        self.rate: dict[str, int] = {}
        self.decayed: dict[str, float] = {}


class FairShare:
    """Weighted DRF over decayed usage; the lower a tenant's dominant share, the sooner its jobs go.

    Feed it the cluster's capacity per resource (:meth:`set_capacity`), the tenants' weights
    (:meth:`set_weight`, ``QuotaSet.fair_share_weight``) and every allocation's start and end
    (:meth:`start`, :meth:`stop`); ask :meth:`dominant_share` or :meth:`ranked`. Times are unix
    seconds (float), passed in; a time earlier than the tenant's last change counts as that time.
    """

    __slots__ = ("_capacity", "_half_life_s", "_lambda", "_tenants", "_weights")

    def __init__(self, half_life_s: float = DEFAULT_HALF_LIFE_S) -> None:
        """Create an empty ledger; ``half_life_s`` is the decay half-life ``H`` in seconds.

        Raises:
            ValueError: ``half_life_s`` is not a positive finite number.
        """
        if not (math.isfinite(half_life_s) and half_life_s > 0):
            raise ValueError(f"the half-life must be a positive number of seconds, not {half_life_s}")
        self._half_life_s = half_life_s
        self._lambda = math.log(2) / half_life_s
        self._tenants: dict[str, _Usage] = {}
        self._capacity: dict[str, int] = {}
        self._weights: dict[str, int] = {}

    @property
    def half_life_s(self) -> float:
        """The decay half-life ``H`` in seconds."""
        return self._half_life_s

    def set_weight(self, tenant: str, weight: int) -> None:
        """Set the tenant's weight (default 1): its dominant share is divided by it.

        Raises:
            ValueError: ``weight`` below 1.
        """
        if weight < 1:
            raise ValueError(f"tenant {tenant}: a fair-share weight must be at least 1, not {weight}")
        self._weights[tenant] = weight

    def weight_of(self, tenant: str) -> int:
        """The tenant's weight (1 unless set)."""
        return self._weights.get(tenant, 1)

    def set_capacity(self, resource: str, total: int) -> None:
        """Set the cluster's total of a resource (milli-GPU, milli-cores or MiB). 0 = ignore the resource.

        Raises:
            ValueError: ``total`` is negative.
        """
        if total < 0:
            raise ValueError(f"{resource}: capacity must be >= 0, not {total}")
        self._capacity[resource] = total

    def capacity(self, resource: str) -> int:
        """The cluster's total of the resource (0 when unknown)."""
        return self._capacity.get(resource, 0)

    def _fold(self, u: _Usage, at: float) -> None:
        """Advance the tenant's decayed rates to ``at`` (closed form; no-op for earlier times)."""
        dt = at - u.at
        if dt <= 0:
            return
        e = math.exp(-self._lambda * dt)
        rate = u.rate
        decayed = u.decayed
        for r, s in decayed.items():
            decayed[r] = s * e + rate[r] * (1.0 - e)
        u.at = at

    def start(self, tenant: str, usage: Mapping[str, int], at: float) -> None:
        """An allocation of ``usage`` (resource -> amount) began at ``at``: the tenant's rate grows by it.

        Raises:
            ValueError: a negative amount (nothing is changed then).
        """
        for r, amount in usage.items():
            if amount < 0:
                raise ValueError(f"tenant {tenant}: negative allocation {amount} of {r}")
        u = self._tenants.get(tenant)
        if u is None:
            u = self._tenants[tenant] = _Usage(at)
        self._fold(u, at)
        for r, amount in usage.items():
            if r not in u.rate:
                u.rate[r] = 0
                u.decayed[r] = 0.0
            u.rate[r] += amount

    def stop(self, tenant: str, usage: Mapping[str, int], at: float) -> None:
        """An allocation of ``usage`` ended at ``at``: the tenant's rate shrinks by it.

        Raises:
            ValueError: the tenant does not hold that much of a resource, or an amount is negative
                (nothing is changed then).
        """
        u = self._tenants.get(tenant)
        for r, amount in usage.items():
            held = 0 if u is None else u.rate.get(r, 0)
            if amount < 0 or amount > held:
                raise ValueError(f"tenant {tenant}: stop of {amount} {r}, but it holds {held}")
        if u is None:
            return  # only zero amounts
        self._fold(u, at)
        for r, amount in usage.items():
            if r in u.rate:
                u.rate[r] -= amount

    def allocation(self, tenant: str, resource: str) -> int:
        """What the tenant holds of the resource now (the allocation rate)."""
        u = self._tenants.get(tenant)
        return 0 if u is None else u.rate.get(resource, 0)

    def shares(self, tenant: str, now: float) -> dict[str, float]:
        """The tenant's normalised decayed share of each resource with a capacity, unweighted, sorted by resource."""
        u = self._tenants.get(tenant)
        if u is None:
            return {}
        e = math.exp(-self._lambda * max(0.0, now - u.at))
        out: dict[str, float] = {}
        for r in sorted(u.decayed):
            cap = self._capacity.get(r, 0)
            if cap > 0:
                out[r] = (u.decayed[r] * e + u.rate[r] * (1.0 - e)) / cap
        return out

    def dominant_share(self, tenant: str, now: float) -> float:
        """The tenant's weighted dominant share at ``now``: max over resources of decayed share / capacity, / weight.

        0.0 for a tenant never seen. Resources without a capacity are ignored. Changes nothing.
        O(resources of the tenant).
        """
        u = self._tenants.get(tenant)
        if u is None:
            return 0.0
        e = math.exp(-self._lambda * max(0.0, now - u.at))
        rate = u.rate
        best = 0.0
        capacity = self._capacity
        for r, s in u.decayed.items():
            cap = capacity.get(r, 0)
            if cap > 0:
                share = (s * e + rate[r] * (1.0 - e)) / cap
                if share > best:
                    best = share
        return best / self._weights.get(tenant, 1)

    def ranked(self, tenants: Iterable[str], now: float) -> list[str]:
        """The tenants in fair-share order: lowest weighted dominant share first, ties by name."""
        return sorted(tenants, key=lambda t: (self.dominant_share(t, now), t))
