"""The placement layer of the scheduler's pure decision core.

Given the cluster's nodes and what they have allocated (:class:`ClusterState`), decide where a
worker (:class:`Request`) or a gang of workers goes (:class:`Assignment`: a node, device shares in
milli-GPU and MiB, host CPU and memory) under a :class:`Policy` chosen by name
(:func:`policy_named`: ``first-fit``, ``best-fit``, ``fgd``). No I/O, no clock, no randomness:
the same state and request give the same assignment.

Typical use (what the admission layer and the simulator do)::

    state = ClusterState(nodes)
    policy = policy_named("fgd")
    policy.observe(request)                  # on arrival (FGD learns the workload)
    assignment = state.place(request, policy)  # pure
    if assignment is not None:
        state.allocate(assignment)           # record it (the "placed" event carries it)
    ...
    state.release(assignment)                # when the job ends or is preempted

    # preemption: would the gang fit if these victims were evicted?
    fit = state.fits_if_released(gang, victims, policy)
"""

from tessera_scheduler.placement.fgd import Fgd, TaskShape, WorkloadDistribution
from tessera_scheduler.placement.model import (
    ANY_NODE,
    GPU_MILLI,
    Assignment,
    Device,
    DeviceShare,
    DeviceUsage,
    MigSlot,
    Node,
    NodeUsage,
    PlacementError,
    Request,
    Selector,
    labels_of,
)
from tessera_scheduler.placement.policies import POLICY_NAMES, BestFit, FirstFit, Policy, policy_named
from tessera_scheduler.placement.state import ClusterState

__all__ = [
    "ANY_NODE",
    "GPU_MILLI",
    "POLICY_NAMES",
    "Assignment",
    "BestFit",
    "ClusterState",
    "Device",
    "DeviceShare",
    "DeviceUsage",
    "Fgd",
    "FirstFit",
    "MigSlot",
    "Node",
    "NodeUsage",
    "PlacementError",
    "Policy",
    "Request",
    "Selector",
    "TaskShape",
    "WorkloadDistribution",
    "labels_of",
    "policy_named",
]
