"""Jobs as the simulator sees them, and the QoS order of the queue.

QoS priority (highest first): ``LS`` (latency-sensitive, Alibaba's online services) >
``Guaranteed`` > ``Burstable`` > ``BE`` (best effort). The last three are Kubernetes' pod QoS
classes in their own order of eviction protection (Kubernetes docs, "Pod Quality of Service
Classes"); Alibaba's trace puts LS above them. Within a class, earlier arrivals go first.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tessera_scheduler.placement.model import Request
from tessera_scheduler.simulator.trace import TracePod

QOS_PRIORITY = {"LS": 0, "Guaranteed": 1, "Burstable": 2, "BE": 3}
"""Queue rank of each QoS class: lower goes first."""


@dataclass(frozen=True, slots=True)
class SimJob:
    """A job of the simulation: its workers (one request each; several make a gang), QoS, times (s)."""

    seq: int
    name: str
    workers: tuple[Request, ...]
    qos: str
    arrival_s: float
    run_s: float

    @property
    def priority(self) -> int:
        """Queue rank of the job's QoS class (lower goes first)."""
        return QOS_PRIORITY.get(self.qos, len(QOS_PRIORITY))

    @property
    def order(self) -> tuple[int, float, int]:
        """Queue order: QoS rank, then arrival time, then submission sequence."""
        return (self.priority, self.arrival_s, self.seq)

    @property
    def gpu_milli(self) -> int:
        """The job's GPU demand, milli-GPU over all workers."""
        return sum(worker.gpu_milli_total for worker in self.workers)


def jobs_from_trace(pods: Sequence[TracePod], compress: float = 1.0) -> list[SimJob]:
    """One single-worker job per trace pod, in trace order (arrival = creation time / ``compress``).

    ``compress`` > 1 squeezes the arrivals in time and leaves run times alone, which multiplies
    the offered load by ``compress``: the Alibaba v2023 trace as recorded keeps only about 0.2 %
    of its cluster's GPUs busy on average (its pods are a sample of the real cluster's), so a
    replay at its own pace never queues anything.
    """
    if compress <= 0:
        raise ValueError(f"compress must be > 0, not {compress}")
    return [
        SimJob(seq, pod.name, (pod.request,), pod.qos, pod.creation_s / compress, pod.run_s)
        for seq, pod in enumerate(pods)
    ]
