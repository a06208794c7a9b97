"""Jobs as the simulator sees them, and how the trace's QoS classes become tenants and priorities.

The Alibaba v2023 trace has no user or team column (``data/traces/README.md``), only a QoS
class per pod: ``LS`` (latency-sensitive), ``Guaranteed``, ``Burstable``, ``BE`` (best effort).
The simulator's tenancy is therefore its own choice, documented here (:data:`QOS_CLASSES`):

- each QoS class is a tenant ``qos-<class>`` (so queueing delays by QoS class and by tenant
  coincide), submitting under the priority class named after the QoS class;
- priorities follow the classes' order of protection: ``LS`` > ``Guaranteed`` > ``Burstable`` >
  ``BE``. ``LS`` above the rest and ``BE`` at the bottom is the trace's own split of
  latency-sensitive and best-effort work (the trace README; Weng et al., "Beware of
  Fragmentation", USENIX ATC '23, which replays this trace); ``Guaranteed`` above ``Burstable``
  is Kubernetes' eviction order ("Pod Quality of Service Classes", kubernetes.io). ``LS`` and
  ``Guaranteed`` are not preemptible, ``Burstable`` and ``BE`` are. The numeric values are ours.

Within a tenant the core orders jobs by priority, then submit time; across tenants by its own
rank (nominal quota first, then dominant share, then priority; ``domain/queues.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tessera_scheduler.placement.model import Request
from tessera_scheduler.simulator.trace import TracePod


@dataclass(frozen=True, slots=True)
class QosClass:
    """A trace QoS class as the simulator submits it: tenant, priority class and its value.

    Attributes:
        name: the trace's ``qos`` value (also the priority class's name).
        rank: order of protection, 0 first (used to sort reports and the strict FIFO queue).
        priority: the priority class's value (higher is scheduled first within a tenant).
        preemptible: whether its jobs may be preempted (reclaim of borrowed quota).
    """

    name: str
    rank: int
    priority: int
    preemptible: bool

    @property
    def tenant(self) -> str:
        """The tenant the class's jobs are submitted as: ``qos-<class>``."""
        return f"qos-{self.name}"


QOS_CLASSES = {
    "LS": QosClass("LS", 0, 1000, preemptible=False),
    "Guaranteed": QosClass("Guaranteed", 1, 800, preemptible=False),
    "Burstable": QosClass("Burstable", 2, 400, preemptible=True),
    "BE": QosClass("BE", 3, 100, preemptible=True),
}
"""The trace's QoS classes (sources in the module docstring)."""

QOS_PRIORITY = {name: qos.rank for name, qos in QOS_CLASSES.items()}
"""Rank of each QoS class: lower is more protected (kept for sorting reports)."""


def qos_class(name: str) -> QosClass:
    """The class of a trace QoS value; an unknown value is treated as best effort (rank after ``BE``)."""
    found = QOS_CLASSES.get(name)
    if found is None:
        best_effort = QOS_CLASSES["BE"]
        return QosClass(name, len(QOS_CLASSES), best_effort.priority, preemptible=True)
    return found


@dataclass(frozen=True, slots=True)
class SimJob:
    """A job of the simulation: its workers (one request each; several make a gang), QoS, times (s).

    The workers of a gang must be identical (the core's ``JobSubmitted`` has one worker spec).
    """

    seq: int
    name: str
    workers: tuple[Request, ...]
    qos: str
    arrival_s: float
    run_s: float

    @property
    def priority(self) -> int:
        """Rank of the job's QoS class (lower is more protected)."""
        return qos_class(self.qos).rank

    @property
    def order(self) -> tuple[int, float, int]:
        """Strict FIFO order: QoS rank, then arrival time, then submission sequence."""
        return (self.priority, self.arrival_s, self.seq)

    @property
    def gpu_milli(self) -> int:
        """The job's GPU demand, milli-GPU over all workers."""
        return sum(worker.gpu_milli_total for worker in self.workers)

    @property
    def job_id(self) -> str:
        """The job's id in the core: ``job-<seq>`` zero-padded, so id order is submission order."""
        return f"job-{self.seq:06d}"


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
