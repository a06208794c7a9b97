"""BudgetLedger: monthly GPU-hour budgets (Slurm GrpTRESMins), month rollover, max-runtime reservations."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tessera_scheduler.domain.budget import BudgetLedger, month_bounds
from tessera_scheduler.domain.quota import QuotaError

HOUR = 3600.0


def ts(year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0) -> float:
    return datetime(year, month, day, hour, minute, second, tzinfo=UTC).timestamp()


MARCH = ts(2025, 3, 10)


def test_month_bounds() -> None:
    assert month_bounds(ts(2025, 3, 10, 12)) == (ts(2025, 3, 1), ts(2025, 4, 1))
    assert month_bounds(ts(2024, 12, 31, 23, 59, 59)) == (ts(2024, 12, 1), ts(2025, 1, 1))
    assert month_bounds(ts(2025, 1, 1)) == (ts(2025, 1, 1), ts(2025, 2, 1)), "the first second is the new month"
    assert month_bounds(ts(2024, 2, 29, 12)) == (ts(2024, 2, 1), ts(2024, 3, 1))


def test_running_jobs_accrue_gpu_hours_up_to_now() -> None:
    b = BudgetLedger()
    b.start("j1", "acme", "vision", 2000, MARCH)
    b.start("j2", "acme", "nlp", 500, MARCH + HOUR)
    assert b.consumed_gpu_hours("acme", None, MARCH + HOUR) == pytest.approx(2.0)
    assert b.consumed_gpu_hours("acme", None, MARCH + 3 * HOUR) == pytest.approx(6.0 + 1.0)
    assert b.consumed_gpu_hours("acme", "nlp", MARCH + 3 * HOUR) == pytest.approx(1.0)
    b.stop("j1", MARCH + 2 * HOUR)
    assert b.consumed_gpu_hours("acme", "vision", MARCH + 10 * HOUR) == pytest.approx(4.0)
    assert b.consumed_gpu_hours("acme", None, MARCH + 3 * HOUR) == pytest.approx(4.0 + 1.0)
    assert b.consumed_gpu_hours("other", None, MARCH) == 0.0
    b.stop("unknown", MARCH)  # no-op
    assert not b.running("j1") and b.running("j2")


def test_a_job_across_the_month_boundary_counts_from_the_month_start() -> None:
    b = BudgetLedger()
    b.start("j", "acme", "p", 1000, ts(2025, 1, 31, 23))
    assert b.consumed_gpu_hours("acme", None, ts(2025, 1, 31, 23, 30)) == pytest.approx(0.5)
    assert b.consumed_gpu_hours("acme", None, ts(2025, 2, 1, 1)) == pytest.approx(1.0), "not 2: January is over"
    b.stop("j", ts(2025, 2, 1, 2))
    assert b.consumed_gpu_hours("acme", "p", ts(2025, 2, 15)) == pytest.approx(2.0)
    assert b.consumed_gpu_hours("acme", None, ts(2025, 3, 1)) == 0.0, "a new month starts from zero"
    b.start("k", "acme", "p", 1000, ts(2025, 3, 1, 1))
    assert b.consumed_gpu_hours("acme", None, ts(2025, 3, 1, 2)) == pytest.approx(1.0)


def test_a_spent_budget_holds_gpu_jobs_with_a_useful_message() -> None:
    b = BudgetLedger()
    b.set_budget("acme", None, Decimal("10"))
    b.start("j", "acme", "p", 1000, MARCH)
    assert b.check("acme", "p", 1000, None, MARCH + 9.9 * HOUR).ok
    c = b.check("acme", "p", 1000, None, MARCH + 10 * HOUR)
    assert not c.ok and c.reason == "BudgetExhausted" and not c.within_nominal
    assert "10.000 of its 10.000 GPU-hour budget for 2025-03" in c.message
    assert "2025-04-01 00:00 UTC" in c.message and "tessera quotas set -t acme --budget N" in c.message
    assert "running jobs are not stopped" in c.message
    assert b.check("acme", "p", 0, None, MARCH + 20 * HOUR).ok, "a CPU-only job uses no GPU-hours"
    assert b.check("acme", "p", 1000, None, ts(2025, 4, 1)).ok, "the budget renews with the month"
    assert not b.check("acme", "p", 1000, None, ts(2025, 4, 1, 10)).ok, "the job ran on into April"
    b.stop("j", ts(2025, 4, 1, 5))
    assert b.consumed_gpu_hours("acme", None, ts(2025, 4, 2)) == pytest.approx(5.0)


def test_unlimited_and_zero_budgets() -> None:
    b = BudgetLedger()
    assert b.check("acme", "p", 8000, 10**6, MARCH).ok
    b.set_budget("acme", None, Decimal(0))
    assert b.check("acme", "p", 1, None, MARCH).reason == "BudgetExhausted"
    b.set_budget("acme", None, None)
    assert b.check("acme", "p", 1, None, MARCH).ok and b.budget_of("acme", None) is None
    with pytest.raises(ValueError):
        b.set_budget("acme", None, Decimal(-1))
    with pytest.raises(ValueError):
        b.set_budget("acme", None, Decimal("NaN"))


def test_max_runtime_reserves_the_jobs_maximum() -> None:
    b = BudgetLedger()
    b.set_budget("acme", None, Decimal("10"))
    assert b.check("acme", "p", 4000, 2 * 3600, MARCH).ok, "8 GPU-hours fit in 10"
    c = b.check("acme", "p", 4000, 3 * 3600, MARCH)
    assert not c.ok and c.reason == "BudgetExhausted"
    assert "12.000" in c.message and "4.000 GPUs x 3.00 h" in c.message and "shorter maximum runtime" in c.message
    # A running job with a maximum runtime reserves what it may still use.
    b.start("a", "acme", "p", 4000, MARCH, max_runtime_s=2 * 3600)
    assert b.reserved_gpu_hours("acme", None, MARCH) == pytest.approx(8.0)
    assert b.check("acme", "p", 2000, 3600, MARCH).ok, "8 + 2 = 10 fits"
    assert not b.check("acme", "p", 2000, 3601, MARCH).ok
    assert not b.check("acme", "p", 2000, 3601, MARCH + HOUR).ok, "consumed 4 + reserved 4 + 2.0006 > 10"
    assert b.reserved_gpu_hours("acme", "p", MARCH + HOUR) == pytest.approx(4.0)
    # Past its maximum a job reserves nothing (it overran; what it consumes is counted as consumed).
    assert b.reserved_gpu_hours("acme", None, MARCH + 3 * HOUR) == 0.0
    assert b.consumed_gpu_hours("acme", None, MARCH + 3 * HOUR) == pytest.approx(12.0)
    b.stop("a", MARCH + HOUR)
    assert b.reserved_gpu_hours("acme", None, MARCH + HOUR) == 0.0
    assert b.check("acme", "p", 2000, 3 * 3600, MARCH + HOUR).ok, "consumed 4 + 6 = 10"
    # A job without a maximum is held only when the budget is spent.
    assert b.check("acme", "p", 8000, None, MARCH + HOUR).ok


def test_project_budget_binds_only_its_project_and_the_tenant_budget_binds_all() -> None:
    b = BudgetLedger()
    b.set_budget("acme", "vision", Decimal("1"))
    b.start("j", "acme", "vision", 1000, MARCH)
    c = b.check("acme", "vision", 1000, None, MARCH + HOUR)
    assert not c.ok and "project vision of tenant acme" in c.message
    assert "a tenant admin" in c.message and "tessera quotas set -t acme -p vision --budget N" in c.message
    assert b.check("acme", "nlp", 1000, None, MARCH + HOUR).ok
    b.set_budget("acme", None, Decimal("1"))
    c = b.check("acme", "nlp", 1000, None, MARCH + HOUR)
    assert not c.ok and "tenant acme has used 1.000" in c.message and "a platform admin" in c.message
    assert b.budget_of("acme", "vision") == Decimal(1)


def test_a_job_started_twice_is_a_bug() -> None:
    b = BudgetLedger()
    b.start("j", "acme", "p", 1000, MARCH)
    with pytest.raises(QuotaError):
        b.start("j", "acme", "p", 1000, MARCH + 1)
    with pytest.raises(QuotaError):
        b.start("k", "acme", "p", -1, MARCH)


job_strategy = st.tuples(
    st.integers(0, 4000),  # milli
    st.floats(0, 90 * 24 * HOUR),  # start offset from Jan 1
    st.floats(0, 40 * 24 * HOUR),  # duration
    st.one_of(st.none(), st.integers(0, 20 * 24 * 3600)),  # max runtime
    st.sampled_from(("p", "q")),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(job_strategy, max_size=25), st.floats(0, 100 * 24 * HOUR))
def test_consumed_and_reserved_equal_a_brute_force_sum(
    jobs: list[tuple[int, float, float, int | None, str]], now_offset: float
) -> None:
    base = ts(2025, 1, 1)
    now = base + now_offset
    month_start, _ = month_bounds(now)
    # Apply starts and stops in time order, up to now.
    events: list[tuple[float, int, str]] = []
    for i, (_, start, duration, _, _) in enumerate(jobs):
        events.append((base + start, 0, f"j{i}"))
        events.append((base + start + duration, 1, f"j{i}"))
    b = BudgetLedger()
    for at, kind, job_id in sorted(events):
        if at > now:
            break
        milli, _, _, max_runtime, project = jobs[int(job_id[1:])]
        if kind == 0:
            b.start(job_id, "acme", project, milli, at, max_runtime_s=max_runtime)
        else:
            b.stop(job_id, at)
    want: dict[str | None, float] = {None: 0.0, "p": 0.0, "q": 0.0}
    reserved: dict[str | None, float] = {None: 0.0, "p": 0.0, "q": 0.0}
    for milli, start, duration, max_runtime, project in jobs:
        s, e = base + start, base + start + duration
        if s > now:
            continue
        if e <= now:
            stop = e
        else:
            stop = now
            if max_runtime is not None:
                left = milli * max(0.0, s + max_runtime - now) / 3_600_000
                reserved[None] += left
                reserved[project] += left
        hours = milli * max(0.0, stop - max(s, month_start)) / 3_600_000
        want[None] += hours
        want[project] += hours
    for scope in (None, "p", "q"):
        assert b.consumed_gpu_hours("acme", scope, now) == pytest.approx(want[scope], rel=1e-9, abs=1e-6)
        assert b.reserved_gpu_hours("acme", scope, now) == pytest.approx(reserved[scope], rel=1e-9, abs=1e-2)
