"""FairShare: weighted dominant resource share (DRF) over exponentially decayed usage."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tessera_scheduler.domain.fairshare import DEFAULT_HALF_LIFE_S, FairShare

H = 3600.0  # a one-hour half-life keeps the numbers readable
T0 = 1_750_000_000.0
GPU = "gpu:H100"


def ledger(half_life: float = H) -> FairShare:
    fs = FairShare(half_life)
    fs.set_capacity(GPU, 8000)
    fs.set_capacity("cpu", 64_000)
    fs.set_capacity("mem", 512 * 1024)
    return fs


def test_the_default_half_life_is_seven_days() -> None:
    assert FairShare().half_life_s == DEFAULT_HALF_LIFE_S == 7 * 24 * 3600
    with pytest.raises(ValueError):
        FairShare(0)
    with pytest.raises(ValueError):
        FairShare(math.inf)


def test_a_constant_allocation_converges_to_its_share_of_capacity() -> None:
    fs = ledger()
    fs.start("acme", {GPU: 2000}, T0)
    assert fs.dominant_share("acme", T0) == 0.0
    assert fs.dominant_share("acme", T0 + H) == pytest.approx(0.25 * 0.5)
    assert fs.dominant_share("acme", T0 + 2 * H) == pytest.approx(0.25 * 0.75)
    assert fs.dominant_share("acme", T0 + 60 * H) == pytest.approx(0.25, rel=1e-12)
    assert fs.shares("acme", T0 + 60 * H) == {GPU: pytest.approx(0.25)}


def test_with_nothing_allocated_the_share_halves_every_half_life() -> None:
    fs = ledger()
    fs.start("acme", {GPU: 4000}, T0)
    fs.stop("acme", {GPU: 4000}, T0 + 3 * H)
    s0 = fs.dominant_share("acme", T0 + 3 * H)
    assert s0 == pytest.approx(0.5 * (1 - 0.125))
    assert fs.dominant_share("acme", T0 + 4 * H) == pytest.approx(s0 / 2, rel=1e-12)
    assert fs.dominant_share("acme", T0 + 5 * H) == pytest.approx(s0 / 4, rel=1e-12)
    assert fs.allocation("acme", GPU) == 0


def test_weights_divide_the_dominant_share() -> None:
    fs = ledger()
    for tenant in ("a", "b"):
        fs.start(tenant, {GPU: 4000}, T0)
    fs.set_weight("b", 4)
    now = T0 + 100 * H
    assert fs.dominant_share("a", now) == pytest.approx(0.5)
    assert fs.dominant_share("b", now) == pytest.approx(0.125)
    assert fs.weight_of("b") == 4 and fs.weight_of("a") == 1
    with pytest.raises(ValueError):
        fs.set_weight("a", 0)


def test_the_dominant_resource_is_the_largest_share() -> None:
    fs = ledger()
    fs.start("cpu-heavy", {GPU: 800, "cpu": 32_000, "mem": 1024}, T0)  # 10% GPU, 50% CPU
    fs.start("gpu-heavy", {GPU: 6000, "cpu": 8_000}, T0)  # 75% GPU, 12.5% CPU
    now = T0 + 100 * H
    assert fs.dominant_share("cpu-heavy", now) == pytest.approx(0.5)
    assert fs.dominant_share("gpu-heavy", now) == pytest.approx(0.75)
    fs.start("gpu-heavy", {"unknown-resource": 10**9}, now)
    assert fs.dominant_share("gpu-heavy", now + 100 * H) == pytest.approx(0.75), "no capacity: ignored"


def test_ranking_is_deterministic_lowest_share_first_ties_by_name() -> None:
    fs = ledger()
    fs.start("m", {GPU: 4000}, T0)
    fs.start("k", {GPU: 1000}, T0)
    now = T0 + 10 * H
    for order in (["z", "m", "a", "k"], ["k", "a", "m", "z"], ["m", "z", "k", "a"]):
        assert fs.ranked(order, now) == ["a", "z", "k", "m"]
    assert fs.dominant_share("never-seen", now) == 0.0


def test_stopping_more_than_held_raises_and_changes_nothing() -> None:
    fs = ledger()
    fs.start("a", {GPU: 1000}, T0)
    with pytest.raises(ValueError):
        fs.stop("a", {GPU: 1001}, T0 + H)
    with pytest.raises(ValueError):
        fs.stop("b", {GPU: 1}, T0 + H)
    with pytest.raises(ValueError):
        fs.start("a", {GPU: -1}, T0 + H)
    assert fs.allocation("a", GPU) == 1000
    with pytest.raises(ValueError):
        fs.set_capacity(GPU, -1)


allocation = st.tuples(
    st.sampled_from(("a", "b")),
    st.sampled_from((GPU, "cpu")),
    st.integers(0, 8000),
    st.floats(0, 10 * H),  # start offset
    st.floats(0, 10 * H),  # duration
)


@settings(max_examples=200, deadline=None)
@given(st.lists(allocation, max_size=20), st.floats(0, 20 * H), st.lists(st.floats(0, 20 * H), max_size=5))
def test_the_closed_form_equals_the_integral_and_does_not_depend_on_when_it_is_folded(
    allocations: list[tuple[str, str, int, float, float]], now_offset: float, folds: list[float]
) -> None:
    lam = math.log(2) / H
    now = T0 + now_offset
    events: list[tuple[float, int, int]] = []
    for i, (_, _, _, start, duration) in enumerate(allocations):
        events.append((T0 + start, 0, i))
        events.append((T0 + start + duration, 1, i))
    for f in folds:
        events.append((T0 + f, 2, -1))  # an empty start: folds the decayed usage at that time
    fs = ledger()
    for at, kind, i in sorted(events):
        if at > now:
            break
        if kind == 2:
            fs.start("a", {}, at)
            continue
        tenant, resource, amount, _, _ = allocations[i]
        (fs.start if kind == 0 else fs.stop)(tenant, {resource: amount}, at)
    # Each allocation a over [s, e) contributes a x (exp(-lam (now - e)) - exp(-lam (now - s))) to U x lambda.
    for tenant in ("a", "b"):
        want: dict[str, float] = {}
        for t, resource, amount, start, duration in allocations:
            s, e = T0 + start, min(T0 + start + duration, now)
            if t != tenant or s > now:
                continue
            part = amount * (math.exp(-lam * (now - e)) - math.exp(-lam * (now - s)))
            want[resource] = want.get(resource, 0.0) + part
        dominant = max([want.get(GPU, 0.0) / 8000, want.get("cpu", 0.0) / 64_000, 0.0])
        assert fs.dominant_share(tenant, now) == pytest.approx(dominant, rel=1e-9, abs=1e-12)
        held = {r: fs.allocation(tenant, r) for r in (GPU, "cpu")}
        assert all(v >= 0 for v in held.values())
