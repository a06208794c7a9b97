"""Plumbing shared by the tenancy operations: loading, appending, authorising, mapping errors.

Appends follow ARCHITECTURE.md §3: a create expects sequence 0 (a conflict means the object
exists: 409); an update loads the aggregate, decides, appends expecting what it loaded, and on a
conflict reloads and decides again (a few times) instead of handing the race to the client.
After appending, a command waits until this process's projector has applied it, so the caller
reads its own write; when that takes too long the command still succeeds, answering from the
events it appended where it can, or with 503 where it must read the projection.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime

import asyncpg
import msgspec

from tessera_contracts import codec, rpc
from tessera_contracts.envelope import envelope
from tessera_contracts.rbac import PLATFORM_TENANT, Principal
from tessera_contracts.registry import Event
from tessera_contracts.subjects import AggregateRef, InvalidSubject
from tessera_runtime.errors import ConcurrencyConflict
from tessera_runtime.eventlog import EventLog
from tessera_runtime.projector import Projector
from tessera_runtime.rpc import Call, RpcError
from tessera_runtime.tenant_rows import BadCursor
from tessera_tenancy import domain
from tessera_tenancy.domain import Conflict, Invalid, NotFound

SOURCE = "tessera/tenancy"
UPDATE_ATTEMPTS = 5
History = list[tuple[Event, datetime]]


class Health(msgspec.Struct, frozen=True):
    """Answer of the ``health`` operation."""

    status: str = "ok"


@contextmanager
def domain_errors() -> Iterator[None]:
    """Map domain errors to problems: not found 404, conflict 409, invalid 422, bad cursor 400."""
    try:
        yield
    except NotFound as exc:
        raise RpcError(rpc.NOT_FOUND, str(exc)) from None
    except Conflict as exc:
        raise RpcError(rpc.CONFLICT, str(exc)) from None
    except Invalid as exc:
        raise RpcError(rpc.UNPROCESSABLE, str(exc)) from None
    except (BadCursor, InvalidSubject) as exc:
        raise RpcError(rpc.INVALID, str(exc)) from None


def is_self(principal: Principal, tenant: str, user: str) -> bool:
    """The caller acts on itself."""
    return principal.tenant == tenant and principal.id == user


@dataclass
class Base:
    """What every group of operations uses.

    Attributes:
        log: the event log.
        pool: Postgres pool holding ``proj_tenancy``.
        projector: this process's tenancy projector (followed in the background).
        pepper: the API-key pepper (:func:`tessera_tenancy.keys.load_pepper`).
        clock: the current time, UTC (injected for tests).
        visibility_timeout_s: how long a command waits for its own write to be projected.
    """

    log: EventLog
    pool: asyncpg.Pool
    projector: Projector
    pepper: bytes
    clock: Callable[[], datetime]
    visibility_timeout_s: float = 2.0

    async def exists(self, ref: AggregateRef) -> bool:
        """The aggregate has at least one event."""
        return bool(await self.log.last_sequence(ref.subject) > 0)

    async def require(self, ref: AggregateRef, what: str) -> None:
        """Raise :class:`NotFound` (``what`` not found) unless the aggregate exists."""
        if not await self.exists(ref):
            raise NotFound(f"{what} not found")

    async def require_tenant(self, tenant: str) -> None:
        """The tenant exists (``_system``, the platform's own, always does)."""
        if tenant != PLATFORM_TENANT:
            await self.require(domain.tenant_ref(tenant), f"tenant {tenant}")

    async def load(self, ref: AggregateRef) -> tuple[History, int]:
        """An aggregate's events (payload, time) and its last sequence."""
        stored, last = await self.log.load(ref.subject)
        return [(codec.payload(e.envelope), e.envelope.time) for e in stored], last

    async def append(self, call: Call, ref: AggregateRef, events: Sequence[Event], expected: int | None) -> bool:
        """Append; True when this process's projection shows it within the visibility timeout.

        Raises:
            ConcurrencyConflict: the aggregate is not at ``expected``.
        """
        if not events:
            return True
        now = self.clock()
        envs = [
            envelope(
                e, subject=ref.subject, source=SOURCE, tenant=ref.tenant, time=now, correlation_id=call.correlation_id
            )
            for e in events
        ]
        acks = await self.log.append(ref.subject, envs, expected)
        return await self.projector.wait_until(acks[-1].seq, self.visibility_timeout_s)

    async def create(self, call: Call, ref: AggregateRef, events: Sequence[Event], what: str) -> bool:
        """Append the first events of a new aggregate.

        Raises:
            Conflict: it exists already.
        """
        try:
            return await self.append(call, ref, events, 0)
        except ConcurrencyConflict:
            raise Conflict(f"{what} already exists") from None

    async def update(
        self, call: Call, ref: AggregateRef, decide: Callable[[History], Awaitable[list[Event]] | list[Event]]
    ) -> bool:
        """Load, decide, append expecting what was loaded; on a conflict, do it again.

        Raises:
            Conflict: still conflicting after :data:`UPDATE_ATTEMPTS` tries (heavy contention).
        """
        for _ in range(UPDATE_ATTEMPTS):
            history, last = await self.load(ref)
            decided = decide(history)
            events = await decided if isinstance(decided, Awaitable) else decided
            try:
                return await self.append(call, ref, events, last)
            except ConcurrencyConflict:
                continue
        raise Conflict(f"{ref.aggregate} {ref.id} is being changed by others; try again")

    @staticmethod
    def visible_or_unavailable(visible: bool) -> None:
        """Raise 503 when a command's effect is recorded but not yet readable here."""
        if not visible:
            raise RpcError(rpc.UNAVAILABLE, "the change is recorded but not yet visible; read it again shortly")
