"""What a job could run as: its options (GPU model, requests, quota charge) in flavour order."""

from __future__ import annotations

from dataclasses import dataclass

from tessera_scheduler.domain.jobs import Verdict
from tessera_scheduler.placement import Request


class CoreInvariantError(AssertionError):
    """The core's state is inconsistent (a bug): raised by :meth:`SchedulerCore.check_invariants`."""


@dataclass(frozen=True, slots=True)
class Option:
    """One way to run a job: on ``model`` (None: CPU-only) with these requests, charging ``milli``."""

    model: str | None
    requests: tuple[Request, ...]
    milli: int


@dataclass(frozen=True, slots=True)
class Plan:
    """The job's options in flavour order, or the verdict that holds it whatever happens (static)."""

    options: tuple[Option, ...]
    verdict: Verdict | None
