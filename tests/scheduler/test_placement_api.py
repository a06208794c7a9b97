"""Gangs, selectors, allowed models, device memory, MIG slices, what-if and determinism."""

from __future__ import annotations

import random

import pytest

from tessera_scheduler.placement import (
    Assignment,
    ClusterState,
    DeviceShare,
    MigSlot,
    PlacementError,
    Request,
    Selector,
    labels_of,
    policy_named,
)
from tests.scheduler.clusters import mixed_cluster, node, random_request

POLICIES = ["first-fit", "best-fit", "fgd"]


def usage_of(state: ClusterState) -> list[object]:
    return [state.usage(n.name) for n in state.nodes()]


@pytest.mark.parametrize("name", POLICIES)
def test_gang_is_all_or_nothing_across_nodes_and_rolls_back(name: str) -> None:
    policy = policy_named(name)
    state = ClusterState([node("a", 4), node("b", 4), node("c", 4)])
    before = usage_of(state)
    gang = [Request(gpus=4)] * 3
    placed = state.place_gang(gang, policy)
    assert placed is not None and sorted(a.node for a in placed) == ["a", "b", "c"]
    assert usage_of(state) == before, "place_gang must not change the state"
    assert state.place_gang([Request(gpus=4)] * 4, policy) is None
    assert usage_of(state) == before, "a failed gang leaves nothing allocated"
    state.allocate_all(placed)
    assert state.allocated_milli == 12_000
    state.check_invariants()
    with pytest.raises(PlacementError):
        state.allocate_all([Assignment("a", ()), Assignment("zz", ())])
    assert state.allocations("a") == [placed[[a.node for a in placed].index("a")]]
    state.check_invariants()


def test_allocate_all_is_atomic() -> None:
    state = ClusterState([node("a", 2)])
    ok = Assignment("a", (DeviceShare("a-gpu0", 1000, 81920),))
    clash = Assignment("a", (DeviceShare("a-gpu0", 500, 0),))
    with pytest.raises(PlacementError):
        state.allocate_all([ok, clash])
    assert state.allocated_milli == 0 and state.allocations() == []
    with state.trial():
        with pytest.raises(PlacementError):
            state.allocate_all([ok, clash])
        state.allocate(ok)
    assert state.allocated_milli == 0
    state.check_invariants()


def test_fits_if_released_answers_without_changing_anything() -> None:
    policy = policy_named("fgd")
    state = ClusterState([node("a", 2), node("b", 2)])
    victims = [state.place(Request(gpus=2), policy) for _ in range(1)]
    assert victims[0] is not None
    state.allocate(victims[0])
    other = state.place(Request(gpus=1), policy)
    assert other is not None
    state.allocate(other)
    before = usage_of(state)
    assert state.place(Request(gpus=2), policy) is None
    fit = state.fits_if_released([Request(gpus=2)], [victims[0]], policy)
    assert fit is not None and fit[0].node == victims[0].node
    assert state.fits_if_released([Request(gpus=2)] * 2, [victims[0]], policy) is None
    assert usage_of(state) == before
    with pytest.raises(PlacementError):
        state.fits_if_released([Request()], [Assignment("a", (DeviceShare("a-gpu1", 7, 0),))], policy)
    assert usage_of(state) == before
    state.check_invariants()


@pytest.mark.parametrize("name", POLICIES)
def test_selectors_and_allowed_models(name: str) -> None:
    policy = policy_named(name)
    state = ClusterState(mixed_cluster())
    cases = [
        (Request(selector=Selector(cluster="c2"), allowed_models=frozenset({"T4"})), {"t1"}),
        (Request(selector=Selector(region="r2"), allowed_models=frozenset({"V100"})), {"v1"}),
        (Request(selector=Selector(labels=labels_of({"zone": "x", "ib": "yes"}))), {"a2"}),
        (Request(allowed_models=frozenset({"H100"})), {"h0"}),
        (Request(gpus=8, allowed_models=frozenset({"V100", "T4"})), {"v1"}),
        (Request(selector=Selector(cluster="c2", region="r2")), set()),
        (Request(allowed_models=frozenset({"B200"})), set()),
        (Request(gpus=0, cpu_milli=1000, selector=Selector(cluster="c1", region="r1")), None),
    ]
    for request, allowed_nodes in cases:
        a = state.place(request, policy)
        if allowed_nodes is None:
            assert a is not None and a.devices == ()
            continue
        if not allowed_nodes:
            assert a is None, request
            continue
        assert a is not None and a.node in allowed_nodes, (request, a)
        model = state.node(a.node).devices[0].model
        assert not request.allowed_models or model in request.allowed_models


def test_device_memory_requests() -> None:
    policy = policy_named("best-fit")
    state = ClusterState([node("t", 1, "T4", 16384), node("a", 1, "A100", 81920)])
    a = state.place(Request(milli=200, memory_mib=20000), policy)
    assert a is not None and a.node == "a" and a.devices[0].memory_mib == 20000
    proportional = state.place(Request(milli=250), policy)
    assert proportional is not None and proportional.devices[0].memory_mib in (4096, 20480)
    big = state.place(Request(gpus=1, memory_mib=40000), policy)
    assert big is not None and big.node == "a" and big.devices[0].memory_mib == 81920
    state.allocate(a)
    # 200 milli and 20,000 MiB taken: a second fraction needing 70,000 MiB no longer fits on "a"
    assert state.place(Request(milli=100, memory_mib=70000), policy) is None
    assert state.place(Request(gpus=1, memory_mib=40000), policy) is None  # "a" is not empty any more


@pytest.mark.parametrize("name", POLICIES)
def test_mig_slices(name: str) -> None:
    policy = policy_named(name)
    slots = (MigSlot.of("1g.10gb", 3), MigSlot.of("3g.40gb", 1))
    assert slots[0].milli == 142 and slots[0].memory_mib == 10240
    state = ClusterState([node("plain", 1), node("mig", 1, mig=slots)])
    taken = []
    for _ in range(3):
        a = state.place(Request(mig_profile="1g.10gb"), policy)
        assert a is not None and a.node == "mig" and a.devices[0].mig_profile == "1g.10gb"
        state.allocate(a)
        taken.append(a)
    assert state.place(Request(mig_profile="1g.10gb"), policy) is None
    big = state.place(Request(mig_profile="3g.40gb"), policy)
    assert big is not None
    state.allocate(big)
    whole = state.place(Request(gpus=1), policy)
    assert whole is not None and whole.node == "plain", "whole and fractional requests never use MIG devices"
    assert state.place(Request(gpus=2), policy) is None
    usage = state.usage("mig").devices[0]
    assert usage.allocated_milli == 3 * 142 + 428 and dict((p, u) for p, u, _f in usage.mig_used) == {
        "1g.10gb": 3,
        "3g.40gb": 1,
    }
    with pytest.raises(PlacementError):
        state.allocate(Assignment("mig", (DeviceShare("mig-gpu0", 142, 10240, "1g.10gb"),)))
    with pytest.raises(PlacementError):
        state.allocate(Assignment("mig", (DeviceShare("mig-gpu0", 100, 0),)))
    state.release(taken[0])
    again = state.place(Request(mig_profile="1g.10gb"), policy)
    assert again == taken[0]
    state.check_invariants()


def test_requests_and_nodes_are_validated() -> None:
    for bad in (
        dict(gpus=2, milli=500),
        dict(milli=0),
        dict(milli=1001),
        dict(gpus=-1),
        dict(memory_mib=0),
        dict(gpus=0, memory_mib=5),
        dict(mig_profile="1g.10gb", gpus=2),
        dict(mig_profile="1g.10gb", milli=500),
        dict(cpu_milli=-1),
    ):
        with pytest.raises(PlacementError):
            Request(**bad)  # type: ignore[arg-type]
    with pytest.raises(PlacementError):
        MigSlot.of("nonsense", 1)
    with pytest.raises(PlacementError):
        node("x", 1, mig=(MigSlot.of("1g.10gb", 8),))  # 8 x 142 milli > 1000
    with pytest.raises(PlacementError):
        ClusterState([node("x", 1), node("x", 1)])
    with pytest.raises(PlacementError):
        policy_named("round-robin")


@pytest.mark.parametrize("name", POLICIES)
def test_same_inputs_give_the_same_assignments(name: str) -> None:
    def run() -> list[Assignment | None]:
        rng = random.Random("determinism")
        state = ClusterState(mixed_cluster())
        policy = policy_named(name)
        out: list[Assignment | None] = []
        live: list[Assignment] = []
        for _ in range(600):
            if live and rng.random() < 0.3:
                state.release(live.pop(rng.randrange(len(live))))
            request = random_request(rng)
            policy.observe(request)
            a = state.place(request, policy)
            out.append(a)
            if a is not None:
                state.allocate(a)
                live.append(a)
        return out

    assert run() == run()
