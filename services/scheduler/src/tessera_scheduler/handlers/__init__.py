"""Scheduler commands and queries over NATS (``rpc.scheduler.<operation>``), and the leader's work.

Any instance answers the operations (queue group ``scheduler``): commands append to the log and
wait for this instance's projector; queries read the projection as the app role, scoped to one
tenant (:mod:`tessera_scheduler.reads`). Every operation authorises with
:func:`tessera_contracts.rbac.authorize`; the gateway's guards are only a first filter.
Only the elected instance decides (:mod:`~tessera_scheduler.handlers.decider`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import msgspec

from tessera_contracts.api import scheduler as api
from tessera_runtime.rpc import Call, RpcServer
from tessera_scheduler.handlers.base import Health
from tessera_scheduler.handlers.jobs import JobOps
from tessera_scheduler.handlers.nodes import NodeOps

__all__ = ["Health", "SchedulerHandlers"]


class SchedulerHandlers(JobOps, NodeOps):
    """Every operation of the scheduler service (see :class:`~tessera_scheduler.handlers.base.Base` for the fields)."""

    async def health(self, call: Call, body: None) -> Health:
        """``ok``, and whether this instance is the active scheduler."""
        return Health(leader=self.is_leader())

    def register(self, server: RpcServer) -> None:
        """Register every operation on ``server``."""
        ops: list[tuple[str, type[msgspec.Struct] | None, Callable[[Call, Any], Awaitable[Any]]]] = [
            ("health", None, self.health),
            ("submit_job", api.SubmitJob, self.submit_job),
            ("cancel_job", api.CancelJob, self.cancel_job),
            ("get_job", None, self.get_job),
            ("list_jobs", None, self.list_jobs),
            ("explain_job", None, self.explain_job),
            ("list_nodes", None, self.list_nodes),
        ]
        for name, body, handler in ops:
            server.operation(name, body)(handler)
