"""GPU quota accounting: one Kueue ClusterQueue per tenant, cohorts to borrow in, caps per project.

Source of the rules: Kueue's ClusterQueue and Cohort concepts
(https://kueue.sigs.k8s.io/docs/concepts/cluster_queue/, sections "Cohort", "BorrowingLimit",
"LendingLimit"). A tenant-level ``QuotaSet`` (``project`` None) is the tenant's ClusterQueue: its
cohort and, per GPU model (Kueue's flavour), a nominal quota, a borrowing limit (None = unlimited)
and a lending limit (None = all of nominal). A project-level ``QuotaSet`` only caps the project
inside its tenant (nominal + borrowing limit per model, ``max_concurrent_jobs``); it is not a
second source of GPUs.

All amounts are milli-GPU ints (1000 = one device). Per model and cohort member ``i``::

    lendable_i    = min(nominal_i, lending_limit_i or nominal_i)
    guaranteed_i  = nominal_i - lendable_i               # never lent to anyone
    pooled_i      = max(0, usage_i - guaranteed_i)       # what i takes from the cohort's pool
    pool_capacity = sum(lendable_i), pool_free = pool_capacity - sum(pooled_i)
    borrowed_i    = max(0, usage_i - nominal_i)          # reclaimable by lenders while > 0

Charging ``m`` to ``i`` fits iff ``pooled_i`` grows by at most ``pool_free`` and
``borrowed_i`` stays within ``i``'s borrowing limit. A tenant without a cohort is a cohort of
its own (so: ``usage + m <= nominal``). The pool totals are maintained on every change, so
:meth:`QuotaBook.check`, :meth:`QuotaBook.charge` and :meth:`QuotaBook.refund` are O(1).

The book is pure: no I/O, no clock; iteration is over sorted names or insertion-ordered dicts
filled in event order, never over a set of strings.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from tessera_contracts.events.scheduler import QueuedReason
from tessera_contracts.events.tenancy import QuotaSet

__all__ = ["QuotaBook", "QuotaCheck", "QuotaError", "gpus"]

_K = TypeVar("_K", bound=Hashable)


class QuotaError(AssertionError):
    """The ledger would be (or is) inconsistent.

    Raised by :meth:`QuotaBook.refund` for a refund of more than is charged (GPU usage or running
    jobs would go below zero), by :meth:`QuotaBook.check_invariants` when the ledger does not
    equal the sum of the live admissions (a leak), and for malformed amounts (negative milli-GPU,
    or milli-GPU without a GPU model). A subclass of ``AssertionError``: it always means a bug in
    the caller or in the book, never a user error.
    """


@dataclass(frozen=True, slots=True)
class QuotaCheck:
    """The answer to "may this job be admitted now?" (quota or budget).

    Attributes:
        ok: it may.
        reason: None when ok; else why it waits: ``"NoQuota"``, ``"QuotaExceeded"``,
            ``"MaxJobsExceeded"`` (quota) or ``"BudgetExhausted"`` (budget).
        message: for the user who waits: the numbers, in GPUs with 3 decimals, and what would let
            the job run. Empty when ok.
        borrowed_after: milli-GPU above its nominal quota the tenant would hold after charging the
            job (0 for CPU-only jobs and for budget checks).
        within_nominal: the tenant's usage with the job stays within its nominal quota; then it
            may reclaim what cohort members borrowed (Kueue ``reclaimWithinCohort``). False for
            budget checks.
        shortfall_milli: milli-GPU that would have to be freed for the binding quota rule to allow
            the job (0 when ok, and for reasons that are not about GPU amounts).
    """

    ok: bool
    reason: QueuedReason | None
    message: str
    borrowed_after: int
    within_nominal: bool
    shortfall_milli: int = 0


def gpus(milli: int) -> str:
    """Milli-GPU as GPUs with 3 decimals, exactly (no float rounding): ``8500`` -> ``"8.500"``."""
    sign = "-" if milli < 0 else ""
    whole, frac = divmod(abs(milli), 1000)
    return f"{sign}{whole}.{frac:03d}"


class _Flavour:
    """One GPU model of a tenant's quota (milli-GPU); ``borrowing_limit`` None = unlimited."""

    __slots__ = ("borrowing_limit", "guaranteed", "lendable", "lending_limit", "nominal")

    def __init__(self, nominal: int, borrowing_limit: int | None, lending_limit: int | None) -> None:
        self.nominal = nominal
        self.borrowing_limit = borrowing_limit
        self.lending_limit = lending_limit
        self.lendable = nominal if lending_limit is None else max(0, min(nominal, lending_limit))
        self.guaranteed = nominal - self.lendable


class _Pool:
    """One cohort's pool of one model: sum of lendable parts, sum of pooled usage (milli-GPU)."""

    __slots__ = ("capacity", "pooled")

    def __init__(self) -> None:
        self.capacity = 0
        self.pooled = 0


class _Project:
    """A project's cap (model -> nominal + borrowing limit, None = uncapped), jobs and usage."""

    __slots__ = ("caps", "has_quota", "jobs", "max_jobs", "usage")

    def __init__(self) -> None:
        self.has_quota = False
        self.caps: dict[str, int | None] = {}
        self.max_jobs: int | None = None
        self.jobs = 0
        self.usage: dict[str, int] = {}


class _Tenant:
    """A tenant's ClusterQueue (from its tenant-level QuotaSet) and what it holds."""

    __slots__ = (
        "cohort",
        "flavours",
        "has_quota",
        "jobs",
        "max_jobs",
        "name",
        "pool_key",
        "projects",
        "usage",
        "weight",
    )

    def __init__(self, name: str) -> None:
        self.name = name
        self.has_quota = False
        self.cohort: str | None = None
        self.pool_key = _solo_key(name)
        self.flavours: dict[str, _Flavour] = {}
        self.max_jobs: int | None = None
        self.weight = 1
        self.jobs = 0
        self.usage: dict[str, int] = {}
        self.projects: dict[str, _Project] = {}

    def pooled(self, model: str, usage: int) -> int:
        """What ``usage`` milli-GPU of ``model`` takes from the pool (above the guaranteed part)."""
        f = self.flavours.get(model)
        return max(0, usage - (f.guaranteed if f is not None else 0))


def _solo_key(tenant: str) -> str:
    return "tenant:" + tenant


def _cohort_key(cohort: str) -> str:
    return "cohort:" + cohort


_NO_TENANT = _Tenant("")
_NO_PROJECT = _Project()
_OK_WITHIN = QuotaCheck(ok=True, reason=None, message="", borrowed_after=0, within_nominal=True)  # shared: immutable


def _validate(model: str | None, milli: int) -> None:
    if milli < 0:
        raise QuotaError(f"milli-GPU must be >= 0, not {milli}")
    if model is None and milli != 0:
        raise QuotaError(f"{milli} milli-GPU charged without a GPU model")


class QuotaBook:
    """The quota ledger of every tenant and project, and the cohorts' pools (milli-GPU).

    Feed it every ``QuotaSet`` (:meth:`set_quota`) and every admission and its end
    (:meth:`charge`, :meth:`refund`); ask :meth:`check` before admitting. ``check`` never
    changes anything; ``charge`` never refuses (a logged admission is applied even if the quota
    was lowered since: nothing is evicted for a lower quota, new work waits until usage is below
    it again).
    """

    __slots__ = ("_members", "_members_sorted", "_pools", "_tenants")

    def __init__(self) -> None:
        self._tenants: dict[str, _Tenant] = {}
        self._pools: dict[tuple[str, str], _Pool] = {}
        self._members: dict[str, dict[str, None]] = {}
        self._members_sorted: dict[str, tuple[str, ...]] = {}

    # ----------------------------------------------------------------- quota changes

    def set_quota(self, event: QuotaSet) -> None:
        """Replace a tenant's quota (``event.project`` None) or one project's cap.

        Tenant level: cohort, per-model nominal / borrowing / lending limits (Kueue ClusterQueue),
        ``max_concurrent_jobs`` of the whole tenant and ``fair_share_weight``. The cohort's pool
        totals are updated in O(models of the tenant). Project level: per model the cap
        ``nominal + borrowing limit`` (no cap when the borrowing limit is None or the model is
        absent) and the project's ``max_concurrent_jobs``; lending limits, cohort and weight of a
        project quota are ignored. Usage above a lowered quota stays charged.
        """
        t = self._tenant(event.tenant)
        if event.project is not None:
            p = self._project(t, event.project)
            p.has_quota = True
            p.caps = {
                g.gpu_model: None if g.borrowing_limit_milli is None else g.nominal_milli + g.borrowing_limit_milli
                for g in event.gpus
            }
            p.max_jobs = event.max_concurrent_jobs
            return
        self._withdraw(t)
        if t.cohort is not None:
            del self._members[t.cohort][t.name]
            self._members_sorted.pop(t.cohort, None)
            if not self._members[t.cohort]:
                del self._members[t.cohort]
        t.has_quota = True
        t.cohort = event.cohort
        t.pool_key = _solo_key(t.name) if event.cohort is None else _cohort_key(event.cohort)
        t.flavours = {
            g.gpu_model: _Flavour(g.nominal_milli, g.borrowing_limit_milli, g.lending_limit_milli) for g in event.gpus
        }
        t.max_jobs = event.max_concurrent_jobs
        t.weight = max(1, event.fair_share_weight)
        if event.cohort is not None:
            self._members.setdefault(event.cohort, {})[t.name] = None
            self._members_sorted.pop(event.cohort, None)
        self._contribute(t)

    def _withdraw(self, t: _Tenant) -> None:
        """Take the tenant's lendable parts and pooled usage out of its pools."""
        for model in sorted(t.flavours.keys() | t.usage.keys()):
            key = (t.pool_key, model)
            pool = self._pools.get(key)
            if pool is None:
                continue
            f = t.flavours.get(model)
            pool.capacity -= f.lendable if f is not None else 0
            pool.pooled -= t.pooled(model, t.usage.get(model, 0))
            if pool.capacity == 0 and pool.pooled == 0:
                del self._pools[key]

    def _contribute(self, t: _Tenant) -> None:
        """Put the tenant's lendable parts and pooled usage into its pools."""
        for model in sorted(t.flavours.keys() | t.usage.keys()):
            f = t.flavours.get(model)
            lendable = f.lendable if f is not None else 0
            pooled = t.pooled(model, t.usage.get(model, 0))
            if lendable == 0 and pooled == 0:
                continue
            pool = self._pool(t.pool_key, model)
            pool.capacity += lendable
            pool.pooled += pooled

    def _tenant(self, name: str) -> _Tenant:
        t = self._tenants.get(name)
        if t is None:
            t = self._tenants[name] = _Tenant(name)
        return t

    @staticmethod
    def _project(t: _Tenant, name: str) -> _Project:
        p = t.projects.get(name)
        if p is None:
            p = t.projects[name] = _Project()
        return p

    def _pool(self, key: str, model: str) -> _Pool:
        pool = self._pools.get((key, model))
        if pool is None:
            pool = self._pools[(key, model)] = _Pool()
        return pool

    # ----------------------------------------------------------------- reads

    def has_quota(self, tenant: str) -> bool:
        """Whether a tenant-level ``QuotaSet`` was ever applied for the tenant."""
        return self._tenants.get(tenant, _NO_TENANT).has_quota

    def cohort_of(self, tenant: str) -> str | None:
        """The tenant's cohort (None: none, or no quota)."""
        return self._tenants.get(tenant, _NO_TENANT).cohort

    def weight_of(self, tenant: str) -> int:
        """The tenant's fair-share weight (``QuotaSet.fair_share_weight``, at least 1; 1 without quota)."""
        return self._tenants.get(tenant, _NO_TENANT).weight

    def models_of(self, tenant: str) -> tuple[str, ...]:
        """The GPU models the tenant's quota lists, in ``QuotaSet`` order (nominal 0 included: it may borrow)."""
        return tuple(self._tenants.get(tenant, _NO_TENANT).flavours)

    def usage(self, tenant: str, model: str) -> int:
        """Milli-GPU of ``model`` charged to the tenant (all its projects)."""
        return self._tenants.get(tenant, _NO_TENANT).usage.get(model, 0)

    def project_usage(self, tenant: str, project: str, model: str) -> int:
        """Milli-GPU of ``model`` charged to one project of the tenant."""
        return self._tenants.get(tenant, _NO_TENANT).projects.get(project, _NO_PROJECT).usage.get(model, 0)

    def jobs(self, tenant: str, project: str | None = None) -> int:
        """Running (admitted) jobs of the tenant, or of one of its projects."""
        t = self._tenants.get(tenant, _NO_TENANT)
        return t.jobs if project is None else t.projects.get(project, _NO_PROJECT).jobs

    def nominal(self, tenant: str, model: str) -> int:
        """The tenant's nominal quota of ``model`` in milli-GPU (0 when absent)."""
        f = self._tenants.get(tenant, _NO_TENANT).flavours.get(model)
        return f.nominal if f is not None else 0

    def borrowing_limit(self, tenant: str, model: str) -> int | None:
        """How far above nominal the tenant may go in milli-GPU (None = unlimited; 0 when absent)."""
        f = self._tenants.get(tenant, _NO_TENANT).flavours.get(model)
        return f.borrowing_limit if f is not None else 0

    def lendable(self, tenant: str, model: str) -> int:
        """The part of the tenant's nominal quota of ``model`` cohort members may borrow (milli-GPU)."""
        f = self._tenants.get(tenant, _NO_TENANT).flavours.get(model)
        return f.lendable if f is not None else 0

    def borrowed(self, tenant: str, model: str) -> int:
        """Milli-GPU of ``model`` the tenant holds above its nominal quota (``max(0, usage - nominal)``)."""
        t = self._tenants.get(tenant, _NO_TENANT)
        f = t.flavours.get(model)
        return max(0, t.usage.get(model, 0) - (f.nominal if f is not None else 0))

    def pool_free(self, tenant: str, model: str) -> int:
        """Milli-GPU of ``model`` free in the tenant's pool (its cohort's, or its own lendable part).

        Negative when quotas were lowered below what is in use.
        """
        t = self._tenants.get(tenant, _NO_TENANT)
        pool = self._pools.get((t.pool_key, model))
        return 0 if pool is None else pool.capacity - pool.pooled

    def cohort_members(self, tenant: str) -> tuple[str, ...]:
        """The tenants in the tenant's cohort, sorted, the tenant included; ``()`` without a cohort."""
        cohort = self._tenants.get(tenant, _NO_TENANT).cohort
        if cohort is None:
            return ()
        members = self._members_sorted.get(cohort)
        if members is None:
            members = self._members_sorted[cohort] = tuple(sorted(self._members.get(cohort, {})))
        return members

    # ----------------------------------------------------------------- decisions

    def check(self, tenant: str, project: str, model: str | None, milli: int) -> QuotaCheck:
        """Whether a job of ``milli`` milli-GPU of ``model`` (None: CPU-only, milli 0) may be admitted now.

        Rules, in order (the first that fails is the reason):

        1. ``MaxJobsExceeded``: the tenant or the project already runs its ``max_concurrent_jobs``.
        2. CPU-only jobs need no GPU quota: ok.
        3. ``NoQuota``: the tenant has no quota, its quota does not list ``model``, or lists it
           with nominal 0 and no way to borrow (no cohort, or borrowing limit 0).
        4. ``QuotaExceeded``: the project's cap (nominal + borrowing limit) of ``model``; then the
           tenant's borrowing limit (``usage + milli - nominal <= borrowing limit``, Kueue
           BorrowingLimit); then the pool (cohort's free lendable capacity, Kueue LendingLimit
           keeping every member's guaranteed part out of the pool).

        ``borrowed_after`` and ``within_nominal`` are filled in even when the job may not run: a
        job refused by the pool while ``within_nominal`` may reclaim borrowed capacity. Changes
        nothing. O(1).

        Raises:
            QuotaError: ``milli`` negative, or non-zero without a model.
        """
        _validate(model, milli)
        t = self._tenants.get(tenant, _NO_TENANT)
        p = t.projects.get(project, _NO_PROJECT)
        if t.max_jobs is not None and t.jobs >= t.max_jobs:
            return QuotaCheck(
                ok=False,
                reason="MaxJobsExceeded",
                message=(
                    f"tenant {tenant} runs {t.jobs} jobs, its maximum (max_concurrent_jobs {t.max_jobs}); the job "
                    f"runs when one of them ends, or when a platform admin raises the maximum with "
                    f"`tessera quotas set -t {tenant} --max-jobs N`"
                ),
                borrowed_after=0,
                within_nominal=False,
            )
        if p.max_jobs is not None and p.jobs >= p.max_jobs:
            return QuotaCheck(
                ok=False,
                reason="MaxJobsExceeded",
                message=(
                    f"project {project} of tenant {tenant} runs {p.jobs} jobs, its maximum (max_concurrent_jobs "
                    f"{p.max_jobs}); the job runs when one of them ends, or when a tenant admin raises the maximum "
                    f"with `tessera quotas set -t {tenant} -p {project} --max-jobs N`"
                ),
                borrowed_after=0,
                within_nominal=False,
            )
        if model is None:
            return _OK_WITHIN
        f = t.flavours.get(model)
        if f is None or (f.nominal == 0 and (t.cohort is None or f.borrowing_limit == 0)):
            return QuotaCheck(
                ok=False,
                reason="NoQuota",
                message=_no_quota_message(t, tenant, model, milli),
                borrowed_after=0,
                within_nominal=False,
                shortfall_milli=milli,
            )
        used = t.usage.get(model, 0)
        after = used + milli
        borrowed_after = max(0, after - f.nominal)
        within_nominal = after <= f.nominal
        cap = p.caps.get(model)
        if cap is not None:
            project_used = p.usage.get(model, 0)
            if project_used + milli > cap:
                short = project_used + milli - cap
                return QuotaCheck(
                    ok=False,
                    reason="QuotaExceeded",
                    message=(
                        f"project {project} of tenant {tenant} uses {gpus(project_used)} {model} GPUs of its cap "
                        f"{gpus(cap)} (nominal + borrowing limit) and the job needs {gpus(milli)}; it runs when the "
                        f"project's jobs free {gpus(short)} GPUs, or when a tenant admin raises the project's quota "
                        f"with `tessera quotas set -t {tenant} -p {project} --gpu {model}=NOMINAL:BORROW`"
                    ),
                    borrowed_after=borrowed_after,
                    within_nominal=within_nominal,
                    shortfall_milli=short,
                )
        if t.cohort is not None and f.borrowing_limit is not None and borrowed_after > f.borrowing_limit:
            short = borrowed_after - f.borrowing_limit
            return QuotaCheck(
                ok=False,
                reason="QuotaExceeded",
                message=(
                    f"tenant {tenant} uses {gpus(used)} {model} GPUs: nominal {gpus(f.nominal)} plus borrowing limit "
                    f"{gpus(f.borrowing_limit)} allows at most {gpus(f.nominal + f.borrowing_limit)}, and the job "
                    f"needs {gpus(milli)}; it runs when the tenant's jobs free {gpus(short)} GPUs, or when a "
                    f"platform admin raises the quota with "
                    f"`tessera quotas set -t {tenant} --gpu {model}=NOMINAL:BORROW`"
                ),
                borrowed_after=borrowed_after,
                within_nominal=within_nominal,
                shortfall_milli=short,
            )
        pool = self._pools.get((t.pool_key, model))
        capacity, pooled = (0, 0) if pool is None else (pool.capacity, pool.pooled)
        grow = max(0, after - f.guaranteed) - max(0, used - f.guaranteed)
        if grow > capacity - pooled:
            short = grow - (capacity - pooled)
            return QuotaCheck(
                ok=False,
                reason="QuotaExceeded",
                message=_pool_message(t, tenant, model, milli, used, f, capacity - pooled, short, within_nominal),
                borrowed_after=borrowed_after,
                within_nominal=within_nominal,
                shortfall_milli=short,
            )
        if not borrowed_after:
            return _OK_WITHIN
        return QuotaCheck(ok=True, reason=None, message="", borrowed_after=borrowed_after, within_nominal=False)

    def charge(self, tenant: str, project: str, model: str | None, milli: int) -> int:
        """Record an admission: ``milli`` milli-GPU of ``model`` and one running job, tenant and project.

        Never refuses (the caller checked first; a logged admission must apply even if the quota
        was lowered meanwhile). A tenant or project never seen before is created without quota.
        O(1).

        Returns:
            ``borrowed_after``: milli-GPU of ``model`` the tenant now holds above its nominal quota
            (0 for CPU-only jobs).

        Raises:
            QuotaError: ``milli`` negative, or non-zero without a model.
        """
        _validate(model, milli)
        t = self._tenant(tenant)
        p = self._project(t, project)
        t.jobs += 1
        p.jobs += 1
        if model is None:
            return 0
        used = t.usage.get(model, 0)
        after = used + milli
        grow = t.pooled(model, after) - t.pooled(model, used)
        if grow:
            self._pool(t.pool_key, model).pooled += grow
        t.usage[model] = after
        p.usage[model] = p.usage.get(model, 0) + milli
        f = t.flavours.get(model)
        return max(0, after - (f.nominal if f is not None else 0))

    def refund(self, tenant: str, project: str, model: str | None, milli: int) -> None:
        """Undo one :meth:`charge` (the job finished, was preempted or cancelled). O(1).

        Raises:
            QuotaError: nothing like it is charged: the tenant's or project's usage of ``model``
                is below ``milli``, or it runs no job (underflow); nothing is changed then. Also
                ``milli`` negative, or non-zero without a model.
        """
        _validate(model, milli)
        t = self._tenants.get(tenant)
        p = None if t is None else t.projects.get(project)
        if t is None or p is None or t.jobs < 1 or p.jobs < 1:
            raise QuotaError(f"refund for {tenant}/{project}: it runs no admitted job")
        used = t.usage.get(model, 0) if model is not None else 0
        project_used = p.usage.get(model, 0) if model is not None else 0
        if model is not None and (used < milli or project_used < milli):
            raise QuotaError(
                f"refund of {milli} milli-GPU of {model} for {tenant}/{project}: only {used} (tenant) "
                f"and {project_used} (project) are charged"
            )
        t.jobs -= 1
        p.jobs -= 1
        if model is None or milli == 0:
            return
        after = used - milli
        shrink = t.pooled(model, used) - t.pooled(model, after)
        if shrink:
            key = (t.pool_key, model)
            pool = self._pools[key]
            pool.pooled -= shrink
            if pool.capacity == 0 and pool.pooled == 0:
                del self._pools[key]
        if after:
            t.usage[model] = after
        else:
            del t.usage[model]
        if project_used - milli:
            p.usage[model] = project_used - milli
        else:
            del p.usage[model]

    # ----------------------------------------------------------------- invariants

    def check_invariants(self, live: Iterable[tuple[str, str, str | None, int]]) -> None:
        """Verify the ledger against the live admissions, exactly.

        ``live`` has one ``(tenant, project, model, milli)`` per admitted job not yet ended. Every
        tenant's and project's usage per model and running-job count must equal their sums, no
        amount may be negative, and every pool's capacity and pooled usage must equal the sums
        over its members. O(live + tenants x models).

        Raises:
            QuotaError: the first discrepancies, sorted (a leak: a charge without refund or the
                reverse, or pool totals drifting from their members).
        """
        usage: dict[tuple[str, str], int] = {}
        project_usage: dict[tuple[str, str, str], int] = {}
        jobs: dict[str, int] = {}
        project_jobs: dict[tuple[str, str], int] = {}
        for tenant, project, model, milli in live:
            _validate(model, milli)
            jobs[tenant] = jobs.get(tenant, 0) + 1
            project_jobs[(tenant, project)] = project_jobs.get((tenant, project), 0) + 1
            if model is not None and milli:
                usage[(tenant, model)] = usage.get((tenant, model), 0) + milli
                key = (tenant, project, model)
                project_usage[key] = project_usage.get(key, 0) + milli
        errors: list[str] = []
        actual_usage: dict[tuple[str, str], int] = {}
        actual_project_usage: dict[tuple[str, str, str], int] = {}
        actual_jobs: dict[str, int] = {}
        actual_project_jobs: dict[tuple[str, str], int] = {}
        pools: dict[tuple[str, str], tuple[int, int]] = {}
        for name, t in self._tenants.items():
            if t.jobs:
                actual_jobs[name] = t.jobs
            for model, milli in t.usage.items():
                if milli:
                    actual_usage[(name, model)] = milli
            for model in t.flavours.keys() | t.usage.keys():
                f = t.flavours.get(model)
                lendable = f.lendable if f is not None else 0
                pooled = t.pooled(model, t.usage.get(model, 0))
                cap, used = pools.get((t.pool_key, model), (0, 0))
                pools[(t.pool_key, model)] = (cap + lendable, used + pooled)
            for pname, p in t.projects.items():
                if p.jobs:
                    actual_project_jobs[(name, pname)] = p.jobs
                for model, milli in p.usage.items():
                    if milli:
                        actual_project_usage[(name, pname, model)] = milli
        _diff("tenant usage (milli-GPU)", usage, actual_usage, errors)
        _diff("project usage (milli-GPU)", project_usage, actual_project_usage, errors)
        _diff("tenant running jobs", jobs, actual_jobs, errors)
        _diff("project running jobs", project_jobs, actual_project_jobs, errors)
        expected_pools = {k: v for k, v in pools.items() if v != (0, 0)}
        actual_pools = {k: (p.capacity, p.pooled) for k, p in self._pools.items() if (p.capacity, p.pooled) != (0, 0)}
        _diff("pool (capacity, pooled)", expected_pools, actual_pools, errors)
        for (pool_key, model), (cap, _) in sorted(actual_pools.items()):
            if cap < 0:
                errors.append(f"pool {pool_key} {model}: negative capacity {cap}")
        if errors:
            raise QuotaError("quota ledger inconsistent: " + "; ".join(errors[:10]))


def _diff(what: str, expected: Mapping[_K, object], actual: Mapping[_K, object], errors: list[str]) -> None:
    """Append a line per key (sorted) where ``actual`` differs from ``expected``."""
    for key in sorted(expected.keys() | actual.keys(), key=repr):
        want, got = expected.get(key), actual.get(key)
        if want != got:
            errors.append(f"{what} {key}: live admissions sum to {want}, the ledger holds {got}")


def _no_quota_message(t: _Tenant, tenant: str, model: str, milli: int) -> str:
    fix = f"a platform admin can give it one with `tessera quotas set -t {tenant} --gpu {model}=N`"
    if not t.has_quota:
        return f"tenant {tenant} has no GPU quota, so the job ({gpus(milli)} {model} GPUs) cannot run; {fix}"
    f = t.flavours.get(model)
    if f is None:
        listed = ", ".join(t.flavours) or "no GPU model"
        return (
            f"tenant {tenant} has no {model} quota (its quota covers {listed}), so the job ({gpus(milli)} GPUs) "
            f"cannot run on {model}; {fix}"
        )
    how = "no cohort to borrow from" if t.cohort is None else f"borrowing limit 0 in cohort {t.cohort}"
    return (
        f"tenant {tenant} has a nominal {model} quota of 0.000 GPUs and {how}, so the job ({gpus(milli)} GPUs) "
        f"cannot run; {fix}"
    )


def _pool_message(
    t: _Tenant,
    tenant: str,
    model: str,
    milli: int,
    used: int,
    f: _Flavour,
    free: int,
    short: int,
    within_nominal: bool,
) -> str:
    raise_it = f"or when a platform admin raises the quota with `tessera quotas set -t {tenant} --gpu {model}=N`"
    if t.cohort is None:
        return (
            f"tenant {tenant} uses {gpus(used)} of its nominal {gpus(f.nominal)} {model} GPUs and the job needs "
            f"{gpus(milli)} (no cohort to borrow from); it runs when the tenant's jobs free {gpus(short)} GPUs, "
            f"{raise_it}"
        )
    limit = "unlimited" if f.borrowing_limit is None else gpus(f.borrowing_limit)
    reclaim = (
        f"when capacity that cohort members borrowed from {tenant} is reclaimed for it (it is within its nominal "
        f"quota), "
        if within_nominal
        else ""
    )
    return (
        f"tenant {tenant} uses {gpus(used)} {model} GPUs (nominal {gpus(f.nominal)}, borrowing limit {limit}) and "
        f"the job needs {gpus(milli)}, but cohort {t.cohort} has {gpus(free)} GPUs free to lend; it runs when jobs "
        f"in the cohort end or lenders free {gpus(short)} GPUs, {reclaim}{raise_it}"
    )
