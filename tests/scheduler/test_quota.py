"""QuotaBook: Kueue ClusterQueue/cohort accounting, project caps, job caps and the ledger's invariants."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tessera_contracts.events.tenancy import GpuQuota, QuotaSet
from tessera_scheduler.domain.quota import QuotaBook, QuotaError, gpus

H = "H100"


def quota(
    tenant: str,
    *flavours: tuple[str, int, int | None, int | None],
    project: str | None = None,
    cohort: str | None = None,
    max_jobs: int | None = None,
    weight: int = 1,
) -> QuotaSet:
    """A QuotaSet; each flavour is (model, nominal, borrowing limit, lending limit) in milli-GPU."""
    return QuotaSet(
        tenant=tenant,
        project=project,
        cohort=cohort,
        gpus=tuple(
            GpuQuota(gpu_model=m, nominal_milli=n, borrowing_limit_milli=b, lending_limit_milli=lend)
            for m, n, b, lend in flavours
        ),
        max_concurrent_jobs=max_jobs,
        fair_share_weight=weight,
    )


def test_gpus_formats_exactly() -> None:
    assert gpus(8000) == "8.000"
    assert gpus(1) == "0.001"
    assert gpus(-1500) == "-1.500"


def test_a_tenant_without_quota_waits_with_no_quota_but_cpu_jobs_run() -> None:
    book = QuotaBook()
    c = book.check("acme", "vision", H, 1000)
    assert not c.ok and c.reason == "NoQuota"
    assert "tessera quotas set -t acme" in c.message
    assert book.check("acme", "vision", None, 0).ok
    assert book.cohort_of("acme") is None and book.weight_of("acme") == 1 and book.models_of("acme") == ()
    assert book.cohort_members("acme") == ()


def test_a_model_missing_from_the_quota_is_no_quota() -> None:
    book = QuotaBook()
    book.set_quota(quota("acme", ("A100", 4000, None, None), ("L4", 1000, None, None)))
    c = book.check("acme", "p", H, 1000)
    assert c.reason == "NoQuota"
    assert "A100, L4" in c.message, "the message says which models the quota covers"
    assert book.models_of("acme") == ("A100", "L4"), "in QuotaSet order"


def test_nominal_zero_without_a_cohort_is_no_quota_but_may_borrow_in_a_cohort() -> None:
    book = QuotaBook()
    book.set_quota(quota("solo", (H, 0, None, None)))
    assert book.check("solo", "p", H, 1000).reason == "NoQuota"
    book.set_quota(quota("lender", (H, 4000, None, None), cohort="c"))
    book.set_quota(quota("borrower", (H, 0, None, None), cohort="c"))
    c = book.check("borrower", "p", H, 4000)
    assert c.ok and c.borrowed_after == 4000 and not c.within_nominal
    book.set_quota(quota("borrower", (H, 0, 0, None), cohort="c"))
    assert book.check("borrower", "p", H, 1).reason == "NoQuota"


def test_without_a_cohort_usage_stays_within_nominal() -> None:
    book = QuotaBook()
    book.set_quota(quota("acme", (H, 8000, 4000, None)))
    assert book.check("acme", "p", H, 8000).ok
    book.charge("acme", "p", H, 6000)
    c = book.check("acme", "p", H, 2001)
    assert not c.ok and c.reason == "QuotaExceeded" and c.shortfall_milli == 1
    assert "6.000" in c.message and "8.000" in c.message and "no cohort" in c.message
    assert "tessera quotas set -t acme --gpu H100=N" in c.message
    assert book.check("acme", "p", H, 2000).ok


def test_cohort_borrowing_within_and_over_the_borrowing_limit() -> None:
    book = QuotaBook()
    book.set_quota(quota("a", (H, 8000, 4000, None), cohort="research"))
    book.set_quota(quota("b", (H, 8000, None, None), cohort="research"))
    assert book.cohort_members("a") == ("a", "b") == book.cohort_members("b")
    c = book.check("a", "p", H, 12000)
    assert c.ok and c.borrowed_after == 4000 and not c.within_nominal
    assert book.charge("a", "p", H, 12000) == 4000
    assert book.borrowed("a", H) == 4000 and book.usage("a", H) == 12000
    assert book.pool_free("b", H) == 4000
    over = book.check("a", "p", H, 1)
    assert not over.ok and over.reason == "QuotaExceeded" and over.shortfall_milli == 1
    assert "borrowing limit 4.000" in over.message and "12.000" in over.message
    assert "a platform admin" in over.message and "--gpu H100=NOMINAL:BORROW" in over.message
    # b can still take what is left of the pool, and is within nominal.
    ok = book.check("b", "p", H, 4000)
    assert ok.ok and ok.within_nominal and ok.borrowed_after == 0


def test_the_pool_limits_borrowing_and_a_lender_within_nominal_may_reclaim() -> None:
    book = QuotaBook()
    book.set_quota(quota("a", (H, 8000, None, None), cohort="c"))
    book.set_quota(quota("b", (H, 8000, None, None), cohort="c"))
    book.charge("a", "p", H, 10000)
    book.charge("b", "p", H, 6000)
    assert book.pool_free("a", H) == 0
    more = book.check("a", "p", H, 1000)
    assert not more.ok and more.reason == "QuotaExceeded" and more.borrowed_after == 3000
    assert "cohort c has 0.000 GPUs free" in more.message
    lender = book.check("b", "p", H, 1000)
    assert not lender.ok and lender.within_nominal, "b may reclaim what a borrowed"
    assert "reclaimed" in lender.message and "lenders free 1.000 GPUs" in lender.message
    book.refund("a", "p", H, 10000)
    assert book.check("b", "p", H, 1000).ok


def test_the_lending_limit_keeps_guaranteed_capacity() -> None:
    book = QuotaBook()
    book.set_quota(quota("small", (H, 4000, None, None), cohort="c"))
    book.set_quota(quota("big", (H, 8000, None, 2000), cohort="c"))
    assert book.lendable("big", H) == 2000
    # small can borrow only big's lendable 2 GPUs.
    assert book.check("small", "p", H, 6000).ok
    assert book.check("small", "p", H, 6001).reason == "QuotaExceeded"
    book.charge("small", "p", H, 6000)
    # big's guaranteed 6 GPUs are untouched by small's borrowing ...
    assert book.check("big", "p", H, 6000).ok
    book.charge("big", "p", H, 6000)
    # ... but the 2 it lent are in use: within nominal, so it may reclaim them.
    c = book.check("big", "p", H, 1000)
    assert not c.ok and c.within_nominal and c.shortfall_milli == 1000


def test_leaving_a_cohort_takes_the_lendable_part_out_of_the_pool() -> None:
    book = QuotaBook()
    book.set_quota(quota("a", (H, 4000, None, None), cohort="c"))
    book.set_quota(quota("b", (H, 4000, None, None), cohort="c"))
    assert book.check("a", "p", H, 8000).ok
    book.set_quota(quota("b", (H, 4000, None, None), cohort="other"))
    assert book.cohort_members("a") == ("a",) and book.cohort_members("b") == ("b",)
    assert book.check("a", "p", H, 4001).reason == "QuotaExceeded"
    book.set_quota(quota("b", (H, 4000, None, None)))
    assert book.cohort_of("b") is None and book.cohort_members("b") == ()
    book.check_invariants([])


def test_project_caps_inside_the_tenant() -> None:
    book = QuotaBook()
    book.set_quota(quota("acme", (H, 8000, None, None), ("A100", 4000, None, None)))
    book.set_quota(quota("acme", (H, 2000, 1000, None), project="vision", max_jobs=None))
    assert book.check("acme", "vision", H, 3000).ok
    c = book.check("acme", "vision", H, 3001)
    assert not c.ok and c.reason == "QuotaExceeded" and c.shortfall_milli == 1
    assert "project vision" in c.message and "3.000" in c.message
    assert "a tenant admin" in c.message and "-p vision" in c.message
    assert book.check("acme", "vision", "A100", 4000).ok, "a model absent from the project quota is not capped"
    assert book.check("acme", "nlp", H, 8000).ok, "a project without a quota has no cap of its own"
    book.charge("acme", "nlp", H, 6000)
    assert book.check("acme", "vision", H, 3000).reason == "QuotaExceeded", "the tenant's quota still binds"
    book.set_quota(quota("acme", (H, 2000, None, None), project="vision"))
    assert book.check("acme", "vision", H, 2000).ok, "borrowing limit None: no cap beyond the tenant's"


def test_max_concurrent_jobs_of_tenant_and_project_apply_to_cpu_jobs_too() -> None:
    book = QuotaBook()
    book.set_quota(quota("acme", (H, 8000, None, None), max_jobs=3))
    book.set_quota(quota("acme", project="vision", max_jobs=1))
    book.charge("acme", "vision", None, 0)
    c = book.check("acme", "vision", None, 0)
    assert not c.ok and c.reason == "MaxJobsExceeded"
    assert "project vision" in c.message and "--max-jobs N" in c.message
    book.charge("acme", "nlp", H, 1000)
    assert book.check("acme", "nlp", H, 1000).ok
    book.charge("acme", "nlp", H, 1000)
    c = book.check("acme", "nlp", H, 1000)
    assert c.reason == "MaxJobsExceeded" and "tenant acme runs 3 jobs" in c.message
    book.refund("acme", "vision", None, 0)
    assert book.jobs("acme") == 2 and book.jobs("acme", "vision") == 0
    assert book.check("acme", "vision", None, 0).ok


def test_refund_underflow_raises_and_changes_nothing() -> None:
    book = QuotaBook()
    book.set_quota(quota("acme", (H, 8000, None, None)))
    with pytest.raises(QuotaError):
        book.refund("acme", "p", H, 1000)
    book.charge("acme", "p", H, 1000)
    with pytest.raises(QuotaError):
        book.refund("acme", "p", H, 1001)
    with pytest.raises(QuotaError):
        book.refund("acme", "other", H, 1000)
    with pytest.raises(QuotaError):
        book.refund("nobody", "p", None, 0)
    assert book.usage("acme", H) == 1000 and book.jobs("acme") == 1
    book.check_invariants([("acme", "p", H, 1000)])
    book.refund("acme", "p", H, 1000)
    with pytest.raises(QuotaError):
        book.refund("acme", "p", None, 0)
    book.check_invariants([])


def test_malformed_amounts_are_refused() -> None:
    book = QuotaBook()
    with pytest.raises(QuotaError):
        book.check("acme", "p", H, -1)
    with pytest.raises(QuotaError):
        book.charge("acme", "p", None, 500)


def test_quota_lowered_below_usage_keeps_the_usage_and_new_work_waits() -> None:
    book = QuotaBook()
    book.set_quota(quota("a", (H, 8000, None, None), cohort="c"))
    book.set_quota(quota("b", (H, 4000, None, None), cohort="c"))
    book.charge("a", "p", H, 8000)
    book.charge("b", "p", H, 2000)
    book.set_quota(quota("a", (H, 2000, 0, None), cohort="c"))
    assert book.usage("a", H) == 8000 and book.borrowed("a", H) == 6000
    c = book.check("a", "p", H, 1)
    assert not c.ok and c.reason == "QuotaExceeded" and "8.000" in c.message and "2.000" in c.message
    assert book.pool_free("b", H) < 0
    assert book.charge("a", "p", H, 1000) == 7000, "charge never refuses a logged admission"
    book.check_invariants([("a", "p", H, 8000), ("b", "p", H, 2000), ("a", "p", H, 1000)])
    book.refund("a", "p", H, 8000)
    book.refund("a", "p", H, 1000)
    assert book.check("b", "p", H, 2000).ok
    book.check_invariants([("b", "p", H, 2000)])


def test_check_invariants_catches_a_leak() -> None:
    book = QuotaBook()
    book.set_quota(quota("acme", (H, 8000, None, None), cohort="c"))
    book.charge("acme", "p", H, 1000)
    book.charge("acme", "p", H, 500)
    book.check_invariants([("acme", "p", H, 1000), ("acme", "p", H, 500)])
    with pytest.raises(QuotaError, match="tenant usage"):
        book.check_invariants([("acme", "p", H, 1000)])
    with pytest.raises(QuotaError, match="running jobs"):
        book.check_invariants([("acme", "p", H, 1500)])
    with pytest.raises(QuotaError, match="project usage"):
        book.check_invariants([("acme", "p", H, 1000), ("acme", "q", H, 500)])
    book._pools[("cohort:c", H)].pooled += 1  # corrupt the maintained total
    with pytest.raises(QuotaError, match="pool"):
        book.check_invariants([("acme", "p", H, 1000), ("acme", "p", H, 500)])


def test_weight_and_a_project_quota_do_not_touch_the_tenant_quota() -> None:
    book = QuotaBook()
    book.set_quota(quota("acme", (H, 8000, None, None), cohort="c", weight=3))
    book.set_quota(quota("acme", (H, 1000, None, None), project="vision", weight=7))
    assert book.weight_of("acme") == 3 and book.nominal("acme", H) == 8000 and book.cohort_of("acme") == "c"
    assert book.has_quota("acme") and not book.has_quota("other")


TENANTS = ("a", "b", "c", "d")
PROJECTS = ("p", "q")
MODELS = ("H100", "A100")

flavour = st.tuples(
    st.sampled_from(MODELS),
    st.integers(0, 8).map(lambda n: n * 500),
    st.one_of(st.none(), st.integers(0, 8).map(lambda n: n * 500)),
    st.one_of(st.none(), st.integers(0, 8).map(lambda n: n * 500)),
)
quota_op = st.tuples(
    st.just("quota"),
    st.sampled_from(TENANTS),
    st.one_of(st.none(), st.sampled_from(PROJECTS)),
    st.one_of(st.none(), st.sampled_from(("x", "y"))),
    st.lists(flavour, max_size=2, unique_by=lambda f: f[0]),
    st.one_of(st.none(), st.integers(1, 4)),
)
admit_op = st.tuples(
    st.just("admit"),
    st.sampled_from(TENANTS),
    st.sampled_from(PROJECTS),
    st.one_of(st.none(), st.sampled_from(MODELS)),
    st.integers(1, 12).map(lambda n: n * 250),
    st.booleans(),  # charge even when the check refuses (a logged decision under an older quota)
)
end_op = st.tuples(st.just("end"), st.integers(0, 10_000))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(quota_op, admit_op, end_op), max_size=60))
def test_random_sequences_keep_the_ledger_exact_and_checks_sound(ops: list[tuple[object, ...]]) -> None:
    book = QuotaBook()
    quotas: dict[str, QuotaSet] = {}
    live: list[tuple[str, str, str | None, int]] = []
    for op in ops:
        if op[0] == "quota":
            _, tenant, project, cohort, flavours, max_jobs = op
            assert isinstance(tenant, str) and isinstance(flavours, list)
            assert (project is None or isinstance(project, str)) and (cohort is None or isinstance(cohort, str))
            assert max_jobs is None or isinstance(max_jobs, int)
            event = quota(tenant, *flavours, project=project, cohort=cohort, max_jobs=max_jobs)
            book.set_quota(event)
            if project is None:
                quotas[tenant] = event
        elif op[0] == "admit":
            _, tenant, project, model, milli, force = op
            assert isinstance(tenant, str) and isinstance(project, str) and isinstance(milli, int)
            assert model is None or isinstance(model, str)
            milli = 0 if model is None else milli
            c = book.check(tenant, project, model, milli)
            if not c.ok and not force:
                continue
            borrowed = book.charge(tenant, project, model, milli)
            live.append((tenant, project, model, milli))
            if model is None:
                continue
            assert borrowed == book.borrowed(tenant, model)
            if c.ok:
                assert borrowed == c.borrowed_after
                limit = book.borrowing_limit(tenant, model)
                if book.cohort_of(tenant) is None:
                    assert book.usage(tenant, model) <= book.nominal(tenant, model)
                elif limit is not None:
                    assert book.borrowed(tenant, model) <= limit
                assert book.pool_free(tenant, model) >= 0, "an ok check never overcommits the pool"
                assert c.within_nominal == (book.usage(tenant, model) <= book.nominal(tenant, model))
        else:
            _, index = op
            if live:
                assert isinstance(index, int)
                tenant, project, model, milli = live.pop(index % len(live))
                book.refund(tenant, project, model, milli)
        book.check_invariants(live)
        for tenant in TENANTS:
            for model in MODELS:
                assert book.usage(tenant, model) == sum(m for t, _, mo, m in live if t == tenant and mo == model)
            cohort = book.cohort_of(tenant)
            members = book.cohort_members(tenant)
            assert members == tuple(sorted(members))
            assert (tenant in members) == (cohort is not None)
            assert all(book.cohort_of(m) == cohort for m in members)
    for tenant, project, model, milli in live:
        book.refund(tenant, project, model, milli)
    book.check_invariants([])
    for tenant in TENANTS:
        for model in MODELS:
            assert book.usage(tenant, model) == 0
            q = quotas.get(tenant)
            if q is not None and q.cohort is None:
                nominal = book.nominal(tenant, model)
                assert book.pool_free(tenant, model) == book.lendable(tenant, model) <= nominal
