"""The index's choices against a brute-force scan of every node (small clusters)."""

from __future__ import annotations

import random

import pytest

from tessera_scheduler.placement import (
    Assignment,
    BestFit,
    ClusterState,
    Fgd,
    FirstFit,
    Request,
    WorkloadDistribution,
)
from tests.scheduler.clusters import all_options, best_fit_score, fragmentation, mixed_cluster, node, random_request


def churn(rng: random.Random, state: ClusterState, live: list[Assignment]) -> None:
    """Release a random live allocation now and then, so that the index sees groups come and go."""
    if live and rng.random() < 0.4:
        state.release(live.pop(rng.randrange(len(live))))


def test_first_fit_is_the_first_node_and_devices_in_order() -> None:
    rng = random.Random("first-fit")
    state = ClusterState(mixed_cluster())
    policy = FirstFit()
    live: list[Assignment] = []
    for _ in range(1500):
        churn(rng, state, live)
        request = random_request(rng)
        expected = all_options(state, request)
        got = state.place(request, policy)
        if not expected:
            assert got is None, request
            continue
        assert got == expected[0], request
        state.allocate(got)
        live.append(got)


def test_best_fit_takes_the_node_left_with_least_then_the_tightest_device() -> None:
    rng = random.Random("best-fit")
    state = ClusterState(mixed_cluster())
    policy = BestFit()
    live: list[Assignment] = []
    checked = 0
    for _ in range(1500):
        churn(rng, state, live)
        request = random_request(rng)
        expected = all_options(state, request)
        got = state.place(request, policy)
        if not expected:
            assert got is None, request
            continue
        assert got is not None, request
        node_left, device_left = best_fit_score(state, got, request)
        assert node_left == min(best_fit_score(state, a, request)[0] for a in expected)
        on_node = [best_fit_score(state, a, request)[1] for a in expected if a.node == got.node]
        assert device_left == min(on_node)
        state.allocate(got)
        live.append(got)
        checked += 1
    assert checked > 500


@pytest.mark.parametrize(("seed", "host_capacity"), [("fgd-1", True), ("fgd-2", True), ("fgd-3", False)])
def test_fgd_reaches_the_least_fragmentation_increase_of_all_placements(seed: str, host_capacity: bool) -> None:
    rng = random.Random(seed)
    workload = [random_request(rng) for _ in range(300)]
    distribution = WorkloadDistribution.of(workload)
    policy = Fgd(distribution, host_capacity=host_capacity)
    state = ClusterState(mixed_cluster())
    live: list[Assignment] = []

    def score(a: Assignment, request: Request) -> tuple[float, tuple[int, int]]:
        usage = state.usage(a.node)
        delta = fragmentation(usage, distribution, a, host_capacity) - fragmentation(
            usage, distribution, host_capacity=host_capacity
        )
        return round(delta, 6), best_fit_score(state, a, request)

    checked = 0
    for _ in range(800):
        churn(rng, state, live)
        request = rng.choice(workload) if rng.random() < 0.7 else random_request(rng)
        expected = all_options(state, request)
        got = state.place(request, policy)
        if not expected:
            assert got is None, request
            continue
        assert got is not None, request
        assert score(got, request) == min(score(a, request) for a in expected), request
        assert policy.fragmentation(state, got.node) == pytest.approx(
            fragmentation(state.usage(got.node), distribution, host_capacity=host_capacity)
        )
        state.allocate(got)
        live.append(got)
        checked += 1
    assert checked > 300


def test_trial_and_clone_do_not_change_decisions() -> None:
    rng = random.Random("clone")
    state = ClusterState(mixed_cluster())
    policy = BestFit()
    for _ in range(200):
        a = state.place(random_request(rng), policy)
        if a is not None:
            state.allocate(a)
    copy = state.clone()
    copy.check_invariants()
    requests = [random_request(rng) for _ in range(200)]
    with state.trial():
        for a in state.allocations()[:20]:
            state.release(a)
    for request in requests:
        assert state.place(request, policy) == copy.place(request, policy)
    for policy_ in (FirstFit(), Fgd(WorkloadDistribution.of(requests))):
        for request in requests:
            assert state.place(request, policy_) == copy.place(request, policy_)


@pytest.mark.parametrize("name", ["first-fit", "best-fit", "fgd"])
def test_long_churn_on_many_similar_nodes_matches_the_reference(name: str) -> None:
    """Enough churn that the index compacts its heaps (stale first-fit entries must survive that)."""
    rng = random.Random(f"churn-{name}")
    nodes = [node(f"n{i:02d}", 4) for i in range(30)]
    state = ClusterState(nodes)
    workload = [Request(milli=m, cpu_milli=c) for m in (250, 500, 1000) for c in (1000, 3000)]
    policy = (
        FirstFit()
        if name == "first-fit"
        else BestFit()
        if name == "best-fit"
        else Fgd(WorkloadDistribution.of(workload))
    )
    live: list[Assignment] = []
    for step in range(3000):
        if live and (rng.random() < 0.45 or state.allocated_milli > 96_000):
            state.release(live.pop(rng.randrange(len(live))))
        request = rng.choice(workload)
        expected = all_options(state, request)
        got = state.place(request, policy)
        assert (got is None) == (not expected), (step, request)
        if got is None:
            continue
        if name == "first-fit":
            assert got == expected[0], step
        elif name == "best-fit":
            assert best_fit_score(state, got, request)[0] == min(best_fit_score(state, a, request)[0] for a in expected)
        state.allocate(got)
        live.append(got)
    state.check_invariants()
