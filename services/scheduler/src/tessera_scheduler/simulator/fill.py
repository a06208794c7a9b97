"""The fill run: how much GPU capacity a policy leaves unallocated when demand equals capacity.

The FGD paper's measure (Weng et al., USENIX ATC '23, "unallocated GPUs"): GPU tasks keep arriving and none departs;
each is placed at once or fails (no queue, no retry). When the GPU demand that has arrived
reaches the cluster's GPU capacity, the share of capacity left unallocated is the policy's
fragmentation cost (0 would be a perfect packing of a workload that fits exactly).

Tasks arrive in trace order; if the trace's total GPU demand is below the capacity (the
Alibaba v2023 default trace asks for 6,086.8 GPUs of 6,212), the trace is replayed again from
its start (arrival ``k`` is pod ``k mod n``) until the demand reaches capacity. The curve gives
the unallocated share at several fractions of arrived demand (50/70/90/100 % by default).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from tessera_scheduler.placement.model import Node, Request
from tessera_scheduler.placement.policies import Policy
from tessera_scheduler.placement.state import ClusterState

MARKS = (0.5, 0.7, 0.9, 1.0)


@dataclass(frozen=True, slots=True)
class FillResult:
    """What a fill run measured."""

    unallocated_gpu_fraction: float
    """Share of GPU capacity unallocated when arrived demand reached capacity."""
    curve: dict[str, float]
    """Unallocated share at each mark of arrived demand / capacity (keys like ``"0.9"``)."""
    tasks_arrived: int
    tasks_placed: int
    tasks_failed: int
    tasks_repeated: int
    """Arrivals beyond the trace's length (the trace replayed from its start)."""

    def as_dict(self) -> dict[str, object]:
        """A JSON-ready dictionary."""
        return {
            "unallocated_gpu_fraction": self.unallocated_gpu_fraction,
            "curve": self.curve,
            "tasks_arrived": self.tasks_arrived,
            "tasks_placed": self.tasks_placed,
            "tasks_failed": self.tasks_failed,
            "tasks_repeated": self.tasks_repeated,
        }


def fill_run(
    nodes: Iterable[Node], tasks: Sequence[Request], policy: Policy, marks: Sequence[float] = MARKS
) -> FillResult:
    """Place ``tasks`` in order (wrapping around) until their GPU demand reaches capacity.

    The policy observes every arrival before placing it (FGD learns the workload as it comes).
    Tasks without GPU demand are skipped. The run always ends at mark 1.0.
    """
    state = ClusterState(nodes)
    capacity = state.capacity_milli
    gpu_tasks = [task for task in tasks if task.gpu_milli_total > 0]
    if not capacity or not gpu_tasks:
        raise ValueError("a fill run needs GPU capacity and GPU tasks")
    pending_marks = sorted(set(marks) | {1.0})
    curve: dict[str, float] = {}
    arrived_milli = 0
    arrived = placed = 0
    while pending_marks:
        task = gpu_tasks[arrived % len(gpu_tasks)]
        arrived += 1
        arrived_milli += task.gpu_milli_total
        policy.observe(task)
        assignment = state.place(task, policy)
        if assignment is not None:
            state.allocate(assignment)
            placed += 1
        while pending_marks and arrived_milli >= pending_marks[0] * capacity:
            curve[f"{pending_marks.pop(0):g}"] = round(1 - state.allocated_milli / capacity, 4)
    unallocated = round(1 - state.allocated_milli / capacity, 4)
    return FillResult(
        unallocated_gpu_fraction=unallocated,
        curve=curve,
        tasks_arrived=arrived,
        tasks_placed=placed,
        tasks_failed=arrived - placed,
        tasks_repeated=max(0, arrived - len(gpu_tasks)),
    )
