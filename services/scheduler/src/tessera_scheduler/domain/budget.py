"""Monthly GPU-hour budgets of tenants and projects (Slurm ``GrpTRESMins``).

Source of the rule: Slurm's association limit ``GrpTRESMins``
(https://slurm.schedmd.com/resource_limits.html): the total TRES-minutes the jobs of an
association may consume; with ``AccountingStorageEnforce=safe`` a job is only started if it can
run to completion inside the limit. Here the TRES is GPUs, the unit GPU-hours, and the period a
UTC calendar month (the counter starts again at 00:00 UTC on the 1st).

Consumption is ``milli / 1000 x seconds / 3600`` GPU-hours per running job, counted from its
start or from the month's start, whichever is later, up to its stop or ``now``. A job waits with
``BudgetExhausted`` when what was consumed this month is at or above the budget, or when it has a
``max_runtime_s`` and the consumption plus what the running jobs may still use plus its own
maximum (``milli / 1000 x max_runtime_s / 3600``) exceeds the budget. Running jobs are not stopped
when the budget runs out (deviation from Slurm, which cancels them): a user's work is never lost
to accounting, and the overrun is bounded by the jobs' ``max_runtime_s``.

Per account (a tenant, or a project of a tenant) the ledger keeps the month's closed consumption,
the running rate (sum of milli-GPU) since the last change, and for the reserving jobs (those with
a maximum runtime) exact integer sums, so every call is O(1) apart from a short walk over jobs
past their maximum runtime. Pure: time is passed in, nothing is read from a clock.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal

from tessera_scheduler.domain.quota import QuotaCheck, QuotaError, gpus

__all__ = ["MILLI_SECONDS_PER_GPU_HOUR", "BudgetLedger", "month_bounds"]

MILLI_SECONDS_PER_GPU_HOUR = 3_600_000
"""One GPU-hour in milli-GPU-seconds (1000 milli-GPU x 3600 s)."""

_OK = QuotaCheck(ok=True, reason=None, message="", borrowed_after=0, within_nominal=False)


_last_month: list[tuple[float, float]] = [(0.0, 0.0)]  # the bounds computed last: a pure cache, swapped whole


def month_bounds(at: float) -> tuple[float, float]:
    """The UTC calendar month holding unix time ``at``: ``(start, end)`` in unix seconds, end exclusive."""
    start, end = _last_month[0]
    if start <= at < end:
        return start, end
    d = datetime.fromtimestamp(at, UTC)
    start = datetime(d.year, d.month, 1, tzinfo=UTC).timestamp()
    end = datetime(d.year + d.month // 12, d.month % 12 + 1, 1, tzinfo=UTC).timestamp()
    _last_month[0] = (start, end)
    return start, end


def _gpu_hours(milli_seconds: float) -> str:
    return f"{milli_seconds / MILLI_SECONDS_PER_GPU_HOUR:.3f}"


@dataclass(slots=True)
class _Job:
    tenant: str
    project: str
    milli: int
    end_ms: int | None  # start + max_runtime_s, in integer milliseconds; None = no maximum


class _Account:
    """One budget: a tenant's or a project's (amounts in milli-GPU-seconds)."""

    __slots__ = (
        "budget",
        "budget_ms",
        "closed",
        "ends",
        "month_end",
        "month_start",
        "rate",
        "res_end",
        "res_rate",
        "since",
    )

    def __init__(self) -> None:
        self.budget: Decimal | None = None
        self.budget_ms: float | None = None  # the budget in milli-GPU-seconds
        self.month_start = float("-inf")
        self.month_end = float("-inf")  # the first fold starts the month
        self.closed = 0.0  # consumed this month up to ``since``
        self.since = float("-inf")
        self.rate = 0  # milli-GPU of the running jobs
        self.res_rate = 0  # milli-GPU of the running jobs with a maximum runtime
        self.res_end = 0  # sum of milli x end_ms over them (exact int)
        self.ends: list[tuple[int, str, int]] = []  # (end_ms, job_id, milli), sorted

    def fold(self, at: float) -> None:
        """Account the running rate up to ``at``; a new month starts from zero at its first second."""
        if at >= self.month_end:
            self.month_start, self.month_end = month_bounds(at)
            self.closed = 0.0
            self.since = self.month_start
        if at > self.since:
            self.closed += self.rate * (at - self.since)
            self.since = at

    def consumed(self, now: float) -> float:
        """Milli-GPU-seconds consumed in ``now``'s month up to ``now`` (does not change the account)."""
        if now >= self.month_end:
            if not self.rate:
                return 0.0
            start, _ = month_bounds(now)
            return self.rate * max(0.0, now - start)
        return self.closed + self.rate * max(0.0, now - self.since)

    def reserved(self, now: float) -> float:
        """Milli-GPU-seconds the running jobs with a maximum runtime may still use after ``now``."""
        now_ms = round(now * 1000)
        total = self.res_end - now_ms * self.res_rate  # sum of milli x (end - now), past ends included
        for end_ms, _, milli in self.ends:
            if end_ms > now_ms:
                break
            total += milli * (now_ms - end_ms)  # a job past its maximum reserves nothing more
        return total / 1000


class BudgetLedger:
    """Monthly GPU-hour budgets of tenants and projects, and what their jobs consumed this month.

    Feed it the budgets (:meth:`set_budget`, from ``QuotaSet.monthly_gpu_hour_budget``) and every
    allocation's start and end (:meth:`start`, :meth:`stop`) in time order; ask :meth:`check`
    before admitting. Times are unix seconds (float), amounts milli-GPU, budgets GPU-hours
    (``Decimal``). Only the current month is kept: a query for a time before an account's last
    start or stop answers as of that start or stop, and a start or stop earlier than the last one
    accrues nothing backwards.
    """

    __slots__ = ("_jobs", "_projects", "_tenants")

    def __init__(self) -> None:
        self._tenants: dict[str, _Account] = {}
        self._projects: dict[tuple[str, str], _Account] = {}
        self._jobs: dict[str, _Job] = {}

    def _account(self, tenant: str, project: str | None) -> _Account:
        if project is None:
            acc = self._tenants.get(tenant)
            if acc is None:
                acc = self._tenants[tenant] = _Account()
            return acc
        acc = self._projects.get((tenant, project))
        if acc is None:
            acc = self._projects[(tenant, project)] = _Account()
        return acc

    def _find(self, tenant: str, project: str | None) -> _Account | None:
        return self._tenants.get(tenant) if project is None else self._projects.get((tenant, project))

    def set_budget(self, tenant: str, project: str | None, gpu_hours: Decimal | None) -> None:
        """Set the monthly budget in GPU-hours of a tenant (``project`` None) or a project; None = unlimited.

        Takes effect for the current month at once (what was consumed stays counted). Zero means
        no GPU job may start.

        Raises:
            ValueError: a negative or non-finite budget.
        """
        if gpu_hours is not None and (not gpu_hours.is_finite() or gpu_hours < 0):
            raise ValueError(f"a GPU-hour budget must be finite and >= 0, not {gpu_hours}")
        acc = self._account(tenant, project)
        acc.budget = gpu_hours
        acc.budget_ms = None if gpu_hours is None else float(gpu_hours) * MILLI_SECONDS_PER_GPU_HOUR

    def budget_of(self, tenant: str, project: str | None) -> Decimal | None:
        """The monthly budget in GPU-hours of the tenant (``project`` None) or project; None = unlimited."""
        acc = self._find(tenant, project)
        return None if acc is None else acc.budget

    def start(
        self, job_id: str, tenant: str, project: str, milli: int, at: float, max_runtime_s: int | None = None
    ) -> None:
        """A job's allocation of ``milli`` milli-GPU started at ``at`` (it accrues from then on).

        With ``max_runtime_s`` the job also reserves what it may still use until
        ``at + max_runtime_s`` (Slurm's safe enforcement), so jobs admitted later see it.
        O(1), plus a binary search and a list insert to file the reservation.

        Raises:
            QuotaError: the job is already running, or ``milli`` is negative.
        """
        if job_id in self._jobs:
            raise QuotaError(f"budget: job {job_id} started twice")
        if milli < 0:
            raise QuotaError(f"budget: job {job_id} with {milli} milli-GPU")
        end_ms = None if max_runtime_s is None else round(at * 1000) + max(0, max_runtime_s) * 1000
        self._jobs[job_id] = _Job(tenant, project, milli, end_ms)
        for acc in (self._account(tenant, None), self._account(tenant, project)):
            acc.fold(at)
            acc.rate += milli
            if end_ms is not None:
                acc.res_rate += milli
                acc.res_end += milli * end_ms
                insort(acc.ends, (end_ms, job_id, milli))

    def stop(self, job_id: str, at: float) -> None:
        """The job's allocation ended at ``at`` (finished, preempted, cancelled). Unknown job: no-op. O(1)."""
        job = self._jobs.pop(job_id, None)
        if job is None:
            return
        for acc in (self._account(job.tenant, None), self._account(job.tenant, job.project)):
            acc.fold(at)
            acc.rate -= job.milli
            if job.end_ms is not None:
                acc.res_rate -= job.milli
                acc.res_end -= job.milli * job.end_ms
                i = bisect_left(acc.ends, (job.end_ms, job_id))
                del acc.ends[i]

    def running(self, job_id: str) -> bool:
        """Whether the job's allocation is being accounted (started, not stopped)."""
        return job_id in self._jobs

    def consumed_gpu_hours(self, tenant: str, project: str | None, now: float) -> float:
        """GPU-hours the tenant (``project`` None) or project consumed in ``now``'s UTC month, up to ``now``."""
        acc = self._find(tenant, project)
        return 0.0 if acc is None else acc.consumed(now) / MILLI_SECONDS_PER_GPU_HOUR

    def reserved_gpu_hours(self, tenant: str, project: str | None, now: float) -> float:
        """GPU-hours the running jobs with a maximum runtime may still use after ``now``."""
        acc = self._find(tenant, project)
        return 0.0 if acc is None else acc.reserved(now) / MILLI_SECONDS_PER_GPU_HOUR

    def check(self, tenant: str, project: str, milli: int, max_runtime_s: int | None, now: float) -> QuotaCheck:
        """Whether a job of ``milli`` milli-GPU (and at most ``max_runtime_s`` seconds) may start at ``now``.

        Held (``BudgetExhausted``) when the tenant's or the project's consumption this month is at
        or above its budget; or, for a job with ``max_runtime_s``, when consumption plus the
        running jobs' reservations plus ``milli / 1000 x max_runtime_s / 3600`` exceeds it. The
        tenant's budget is checked first. A CPU-only job (``milli`` 0) uses no GPU-hours and is
        never held. ``borrowed_after`` is 0 and ``within_nominal`` False (they are quota terms).
        Changes nothing. O(1).
        """
        if milli <= 0:
            return _OK
        need = None if max_runtime_s is None else float(milli) * max(0, max_runtime_s)
        for scope in (None, project):
            acc = self._find(tenant, scope)
            if acc is None or acc.budget_ms is None:
                continue
            consumed = acc.consumed(now)
            if consumed >= acc.budget_ms:
                return self._held(tenant, scope, acc, now, consumed, None)
            if need is not None and max_runtime_s is not None:
                reserved = acc.reserved(now)
                if consumed + reserved + need > acc.budget_ms:
                    return self._held(tenant, scope, acc, now, consumed, (milli, max_runtime_s, reserved, need))
        return _OK

    @staticmethod
    def _held(
        tenant: str,
        project: str | None,
        acc: _Account,
        now: float,
        consumed: float,
        job: tuple[int, int, float, float] | None,
    ) -> QuotaCheck:
        """The ``BudgetExhausted`` answer, with the numbers and what would let the job run.

        ``job`` is ``(milli, max_runtime_s, reserved, need)`` when the job's maximum is what does not fit.
        """
        start, end = month_bounds(now)
        month = datetime.fromtimestamp(start, UTC).strftime("%Y-%m")
        renew = datetime.fromtimestamp(end, UTC).strftime("%Y-%m-%d 00:00 UTC")
        who = f"tenant {tenant}" if project is None else f"project {project} of tenant {tenant}"
        admin = "a platform admin" if project is None else "a tenant admin"
        where = f"-t {tenant}" if project is None else f"-t {tenant} -p {project}"
        budget_ms = acc.budget_ms or 0.0
        what = f"{who} has used {_gpu_hours(consumed)} of its {_gpu_hours(budget_ms)} GPU-hour budget for {month} (UTC)"
        shorter = ""
        if job is not None:
            milli, max_runtime_s, reserved, need = job
            left = max(0.0, budget_ms - consumed - reserved)
            what += (
                f", its running jobs may use up to {_gpu_hours(max(0.0, reserved))} more, and the job may use up to "
                f"{_gpu_hours(need)} ({gpus(milli)} GPUs x {max_runtime_s / 3600:.2f} h maximum runtime), more than "
                f"the {_gpu_hours(left)} left"
            )
            shorter = ", or with a shorter maximum runtime"
        return QuotaCheck(
            ok=False,
            reason="BudgetExhausted",
            message=(
                f"{what}; the job runs when the budget renews on {renew}, or when {admin} raises it with "
                f"`tessera quotas set {where} --budget N`{shorter} (running jobs are not stopped when a budget "
                f"runs out)"
            ),
            borrowed_after=0,
            within_nominal=False,
        )
