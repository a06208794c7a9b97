"""explain(): the reason a job waits, with the numbers of the moment, and what would let it run."""

from __future__ import annotations

from decimal import Decimal

from tests.scheduler.test_core_support import World, node_event


def test_explain_quota_budget_fit_and_running() -> None:
    w = World()
    w.nodes([node_event("n1", 4)])
    w.quota("t", {"A100": (2, None, None)}, cohort="c")
    w.quota("b", {"A100": (4, None, None)}, budget=Decimal(1))
    a = w.submit("t", gpus=2)
    over = w.submit("t", gpus=1)
    broke = w.submit("b", gpus=1, max_runtime_s=7200)
    none = w.submit("nobody")
    w.cycle()

    text = w.core.explain(over, w.now)
    assert "QuotaExceeded" in text and "2.000" in text and "1.000" in text and "tessera quotas set" in text
    text = w.core.explain(broke, w.now)
    assert "BudgetExhausted" in text and "GPU-hour" in text
    assert "NoQuota" in w.core.explain(none, w.now)
    running = w.core.explain(a, w.now)
    assert "n1" in running and "2.000" in running

    fits_not = w.submit("b", gpus=3)
    w.cycle(advance=5)
    text = w.core.explain(fits_not, w.now)
    assert "NoFit" in text and "waited 5 s" in text and "the freest has 2.000 free" in text
    assert "unknown" not in w.core.explain("j_nope", w.now) and "no job" in w.core.explain("j_nope", w.now)


def test_explain_unschedulable_names_the_shape() -> None:
    w = World()
    w.nodes([node_event("n1", 8)])
    w.quota("t", {"A100": (8, None, None)})
    j = w.submit("t", gpus=16)
    w.cycle()
    text = w.core.explain(j, w.now)
    assert "Unschedulable" in text and "16 whole GPUs (any model)" in text
    assert text.count("even if it were empty") == 1  # the verdict is not repeated as a live finding


def test_explain_says_plainly_when_no_node_is_registered() -> None:
    w = World()
    w.quota("t", {"A100": (8, None, None)})
    j = w.submit("t", gpus=2, milli=1000)
    w.cycle()
    text = w.core.explain(j, w.now)
    assert "Unschedulable" in text and "no node is registered" in text and "even if it were empty" not in text
