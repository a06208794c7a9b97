"""The cluster state's invariants under thousands of random placements and releases."""

from __future__ import annotations

import random

import pytest

from tessera_scheduler.placement import (
    GPU_MILLI,
    Assignment,
    ClusterState,
    DeviceShare,
    PlacementError,
    policy_named,
)
from tests.scheduler.clusters import mixed_cluster, node, random_request


def check_device_and_host_invariants(state: ClusterState) -> None:
    """The invariants, checked from the public views (independently of ``check_invariants``)."""
    holders: dict[str, list[DeviceShare]] = {}
    for a in state.allocations():
        for share in a.devices:
            holders.setdefault(share.uuid, []).append(share)
    for n in state.nodes():
        usage = state.usage(n.name)
        assert 0 <= usage.cpu_free <= n.cpu_milli
        assert 0 <= usage.memory_free_mib <= n.memory_mib
        for d in usage.devices:
            assert 0 <= d.allocated_milli <= GPU_MILLI
            assert 0 <= d.allocated_mib <= d.device.memory_mib
            shares = holders.get(d.device.uuid, [])
            if any(s.whole for s in shares):
                assert len(shares) == 1, f"{d.device.uuid}: a whole GPU is shared"
            for profile, used, free in d.mig_used:
                slot = next(s for s in d.device.mig if s.profile == profile)
                assert used + free == slot.count and used >= 0 and free >= 0
    state.check_invariants()


@pytest.mark.parametrize("policy_name", ["first-fit", "best-fit", "fgd"])
def test_random_placements_and_releases_keep_every_invariant(policy_name: str) -> None:
    rng = random.Random(f"invariants-{policy_name}")
    state = ClusterState(mixed_cluster())
    policy = policy_named(policy_name)
    live: list[Assignment] = []
    unhealthy = {n.name for n in state.nodes() if not state.is_healthy(n.name)}
    placed = 0
    for step in range(2500):
        if live and rng.random() < 0.45:
            a = live.pop(rng.randrange(len(live)))
            before = state.usage(a.node)
            state.release(a)
            # allocate + release of the same assignment is the identity
            if rng.random() < 0.2:
                state.allocate(a)
                state.release(a)
            assert state.usage(a.node).cpu_free == before.cpu_free + a.cpu_milli
        else:
            request = random_request(rng)
            policy.observe(request)
            a = state.place(request, policy)
            if a is None:
                continue
            assert a.node not in unhealthy, "an unhealthy node got an allocation"
            usage_before = state.usage(a.node)
            state.allocate(a)
            state.release(a)
            assert state.usage(a.node) == usage_before, "release did not restore exactly"
            state.allocate(a)
            live.append(a)
            placed += 1
        if step % 25 == 0:
            check_device_and_host_invariants(state)
    check_device_and_host_invariants(state)
    assert placed > 500
    for a in live:
        state.release(a)
    assert state.allocated_milli == 0
    empty = ClusterState(mixed_cluster())
    for n in state.nodes():
        assert state.usage(n.name) == empty.usage(n.name)


def test_allocate_refuses_what_would_break_an_invariant() -> None:
    state = ClusterState([node("n", 2, memory_mib=1000, cpu_milli=1000, host_memory_mib=1000)])
    whole = Assignment("n", (DeviceShare("n-gpu0", 1000, 1000),))
    state.allocate(whole)
    bad = [
        Assignment("n", (DeviceShare("n-gpu0", 1, 0),)),  # shares a whole GPU
        Assignment("n", (DeviceShare("n-gpu1", 1001, 0),)),  # over 1000 milli
        Assignment("n", (DeviceShare("n-gpu1", 500, 1001),)),  # over the device's MiB
        Assignment("n", (DeviceShare("n-gpu1", 100, 0),), cpu_milli=1001),  # over host CPU
        Assignment("n", (DeviceShare("n-gpu1", 100, 0),), host_memory_mib=1001),  # over host memory
        Assignment("n", (DeviceShare("n-gpu1", 100, 0), DeviceShare("n-gpu1", 100, 0))),  # one device twice
        Assignment("n", (DeviceShare("other", 100, 0),)),  # not this node's device
        Assignment("x", ()),  # unknown node
        Assignment("n", (DeviceShare("n-gpu1", 0, 0),)),  # zero milli
    ]
    for a in bad:
        with pytest.raises(PlacementError):
            state.allocate(a)
    state.check_invariants()
    half = Assignment("n", (DeviceShare("n-gpu1", 600, 600),))
    state.allocate(half)
    with pytest.raises(PlacementError):
        state.allocate(Assignment("n", (DeviceShare("n-gpu1", 500, 0),)))  # 1100 milli
    with pytest.raises(PlacementError):
        state.allocate(Assignment("n", (DeviceShare("n-gpu1", 1000, 0),)))  # whole on a used device
    with pytest.raises(PlacementError):
        state.release(Assignment("n", (DeviceShare("n-gpu1", 300, 300),)))  # never allocated
    state.release(half)
    with pytest.raises(PlacementError):
        state.release(half)  # twice
    state.check_invariants()


def test_unhealthy_nodes_get_nothing_and_keep_their_allocations() -> None:
    state = ClusterState([node("a", 1), node("b", 1)])
    policy = policy_named("first-fit")
    from tessera_scheduler.placement import Request

    first = state.place(Request(), policy)
    assert first is not None and first.node == "a"
    state.allocate(first)
    state.set_healthy("b", False)
    assert state.place(Request(), policy) is None
    with pytest.raises(PlacementError):
        state.allocate(Assignment("b", (DeviceShare("b-gpu0", 1000, 81920),)))
    state.set_healthy("a", False)
    assert state.allocations("a") == [first]  # node loss: the admission layer releases them
    state.release(first)
    with pytest.raises(PlacementError):
        state.remove_node("zzz")
    state.remove_node("a")
    state.set_healthy("b", True)
    again = state.place(Request(), policy)
    assert again is not None and again.node == "b"
    state.check_invariants()


def test_remove_node_refuses_while_allocations_live() -> None:
    state = ClusterState([node("a", 1)])
    a = Assignment("a", (DeviceShare("a-gpu0", 500, 100),))
    state.allocate(a)
    with pytest.raises(PlacementError, match="still holds"):
        state.remove_node("a")
    state.release(a)
    state.remove_node("a")
    assert state.nodes() == [] and state.capacity_milli == 0
