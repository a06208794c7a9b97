"""Plumbing shared by the scheduler's operations: authorising, appending, waiting for the projection.

Commands append with optimistic concurrency: a submit creates its job aggregate expecting
sequence 0; a cancel loads the job, decides and appends expecting what it loaded (retried a few
times when the leader appended a decision meanwhile). After appending, a command waits until this
process's projector has applied its event, so the caller reads its own write.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime

import asyncpg
import msgspec

from tessera_contracts import rpc
from tessera_contracts.rbac import Principal
from tessera_contracts.subjects import InvalidSubject
from tessera_runtime.eventlog import EventLog
from tessera_runtime.projector import Projector
from tessera_runtime.rpc import RpcError
from tessera_runtime.tenant_rows import BadCursor

SOURCE = "tessera/scheduler"


class Health(msgspec.Struct, frozen=True):
    """Answer of the ``health`` operation; ``leader`` says whether this instance decides now."""

    status: str = "ok"
    leader: bool = False


@contextmanager
def bad_input() -> Iterator[None]:
    """Map a bad cursor or a malformed subject token to a 400 problem."""
    try:
        yield
    except (BadCursor, InvalidSubject) as exc:
        raise RpcError(rpc.INVALID, str(exc)) from None


def bound_projects(principal: Principal, tenant: str) -> list[str] | None:
    """The projects a principal is confined to in ``tenant``; None when it sees all of them."""
    if principal.is_platform_admin:
        return None
    bound = {b.project for b in principal.roles if b.tenant == tenant}
    return None if None in bound else sorted(p for p in bound if p)


@dataclass
class Base:
    """What every group of operations uses.

    Attributes:
        log: the event log.
        pool: Postgres pool holding ``proj_scheduler``.
        projector: this process's scheduler projector (followed in the background).
        clock: the current time, UTC (injected for tests).
        is_leader: whether this instance is the active scheduler now (for ``health``).
        visibility_timeout_s: how long a command waits for its own write to be projected, seconds.
    """

    log: EventLog
    pool: asyncpg.Pool
    projector: Projector
    clock: Callable[[], datetime]
    is_leader: Callable[[], bool] = field(default=lambda: False)
    visibility_timeout_s: float = 2.0

    def unavailable_unless(self, visible: bool) -> None:
        """Raise 503 when a command's effect is recorded but not yet readable here.

        Raises:
            RpcError: unavailable.
        """
        if not visible:
            raise RpcError(rpc.UNAVAILABLE, "the change is recorded but not yet visible; read it again shortly")
