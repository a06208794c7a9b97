"""The projector: keeps one projection up to date with the event log.

Its position lives in Postgres, in the projection's own schema, never in JetStream acks
(ARCHITECTURE.md §2). Each batch is one transaction that applies the events and advances the
checkpoint; events at or below the checkpoint are skipped, so a redelivery, a restart, or a crash
between the commit and anything after it can never apply an event twice.

Poison events — a body that is not an envelope, or an event ``apply`` rejects ``max_attempts``
times — are recorded in ``_dead_letters``, published on ``dlq.<projection>`` with the error, and
counted; the projector goes on with the next event. Connection losses (NATS or Postgres) are not
poison: the projector backs off, reconnects and resumes from its checkpoint.
"""

from __future__ import annotations

import asyncio
import contextlib
import zlib
from collections.abc import Sequence
from datetime import UTC, datetime

import asyncpg
import nats.errors
import nats.js.errors
from opentelemetry import metrics

from tessera_contracts import codec
from tessera_contracts.deadletter import DeadLetter
from tessera_contracts.subjects import dead_letter_subject
from tessera_runtime import logs, tracing
from tessera_runtime.errors import ReplayBusy
from tessera_runtime.eventlog import MSG_ID, EventLog, StoredEvent
from tessera_runtime.jetstream import Delivered, ReaderGap
from tessera_runtime.projection import Projection, schema_of

TRANSIENT_DB_ERRORS: tuple[type[BaseException], ...] = (
    OSError,
    TimeoutError,
    asyncpg.InterfaceError,
    asyncpg.PostgresConnectionError,
    asyncpg.exceptions.OperatorInterventionError,
    asyncpg.exceptions.InsufficientResourcesError,
    asyncpg.exceptions.SerializationError,
    asyncpg.exceptions.DeadlockDetectedError,
)
"""Errors that say "try again later", never "this event is bad"."""

TRANSIENT_NATS_ERRORS: tuple[type[BaseException], ...] = (nats.errors.Error, nats.js.errors.Error)

RETRYABLE: tuple[type[BaseException], ...] = (*TRANSIENT_DB_ERRORS, *TRANSIENT_NATS_ERRORS, ReaderGap, ReplayBusy)
"""What :meth:`Projector.run` backs off and retries on: the servers' hiccups, lost messages, and
another instance rebuilding the same projection."""

_meter = metrics.get_meter("tessera.projector")
_dead_letter_counter = _meter.create_counter(
    "tessera.projector.dead_letters", unit="{event}", description="Poison events set aside"
)
_applied_counter = _meter.create_counter(
    "tessera.projector.events_applied", unit="{event}", description="Events applied to projections"
)

RUNTIME_DDL = """
CREATE TABLE _checkpoint (
    singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    position bigint NOT NULL,
    version integer NOT NULL
);
CREATE TABLE _dead_letters (
    stream_sequence bigint PRIMARY KEY,
    subject text NOT NULL,
    event_type text,
    error text NOT NULL,
    attempts integer NOT NULL
);
"""


ALL_TENANTS = "SELECT set_config('tessera.tenant', '*', true)"
"""Row-level security scope of the runtime's own transactions: every tenant.

Tenant-owned projection tables carry a policy ``tenant_id = current_setting('tessera.tenant')``
(or ``'*'``), forced even on their owner. Projectors and replay read and write all tenants;
request handlers set one tenant, as the non-owner app role (see the tenancy service)."""


class ProjectionAhead(RuntimeError):
    """The projection's checkpoint is past the end of the log: the log was replaced under it."""


def lock_key(schema: str) -> int:
    """The advisory-lock key serialising writers of one projection schema (a signed 64-bit int)."""
    return zlib.crc32(schema.encode()) - 2**31


def quote_ident(name: str) -> str:
    """Double-quote a Postgres identifier."""
    return '"' + name.replace('"', '""') + '"'


class Projector:
    """Applies the log to one projection in one schema.

    Args:
        projection: what to build.
        pool: asyncpg pool of the database holding the projection.
        log: the event log client.
        schema: where to build; default the live schema ``proj_<name>``. Replay passes a
            shadow or build schema.
        batch_size: events per transaction (up to).
        max_attempts: tries of one event's ``apply`` before it is dead-lettered.
        publish_dead_letters: publish poison events on ``dlq.<name>`` (off for shadow builds,
            which only record them: the live projector already published them once).
    """

    def __init__(
        self,
        projection: Projection,
        pool: asyncpg.Pool,
        log: EventLog,
        *,
        schema: str | None = None,
        batch_size: int = 1000,
        max_attempts: int = 3,
        publish_dead_letters: bool = True,
        idle_fetch_s: float = 1.0,
    ) -> None:
        self.projection = projection
        self.pool = pool
        self.log = log
        self.schema = schema or schema_of(projection.name)
        self.batch_size = batch_size
        self.max_attempts = max_attempts
        self.publish_dead_letters = publish_dead_letters
        self.idle_fetch_s = idle_fetch_s
        self.position = 0
        self.stored_version = projection.version
        self.dead_lettered = 0
        self._moved = asyncio.Event()
        self._log = logs.get("projector").bind(projection=projection.name, schema=self.schema)

    # -- schema ---------------------------------------------------------------------------------

    async def setup(self) -> None:
        """Create the schema, the runtime tables and the projection's tables if missing.

        When the schema holds an older ``version`` of the projection it is dropped and rebuilt
        from the log by the caller (:func:`tessera_runtime.replay.rebuild`); here it is only
        reported, as :attr:`needs_rebuild`.
        """
        q = quote_ident(self.schema)
        async with self.pool.acquire() as conn, conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock($1)", lock_key(self.schema))
            exists = await conn.fetchval("SELECT to_regclass($1) IS NOT NULL", f"{q}._checkpoint")
            if not exists:
                await conn.execute(f"CREATE SCHEMA IF NOT EXISTS {q}")
                await conn.execute(f"SET LOCAL search_path TO {q}")
                await conn.execute(RUNTIME_DDL)
                await conn.execute(self.projection.ddl)
                await conn.execute(
                    "INSERT INTO _checkpoint (position, version) VALUES (0, $1)", self.projection.version
                )
            row = await conn.fetchrow(f"SELECT position, version FROM {q}._checkpoint")
        self.position = int(row["position"])
        self.stored_version = int(row["version"])

    @property
    def needs_rebuild(self) -> bool:
        """True when the schema was built by another version of the projection."""
        return self.stored_version != self.projection.version

    # -- running --------------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        """Follow the log until ``stop`` is set; the batch in hand is finished first.

        Survives NATS and Postgres restarts and lost messages: on a connection error or a
        :class:`~tessera_runtime.jetstream.ReaderGap` it waits (exponential backoff, 0.1 s to 5 s)
        and resumes from the checkpoint in Postgres. A schema of another projection version is
        rebuilt first.

        Raises:
            ProjectionAhead: the checkpoint is past the log's last sequence (the stream was
                deleted and recreated): the projection must be rebuilt by an operator.
        """
        from tessera_runtime import replay  # replay builds on this module

        backoff = 0.1
        while not stop.is_set():
            try:
                await self.setup()
                if self.needs_rebuild:
                    self._log.info("projector.rebuild", reason="projection version changed")
                    await replay.rebuild(self.pool, self.log, self.projection)
                    continue
                await self._check_not_ahead()
                await self._follow(stop)
            except RETRYABLE as exc:
                self._log.warning("projector.retrying", error=repr(exc), backoff_s=backoff)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), backoff)
                backoff = min(backoff * 2, 5.0)
            else:
                backoff = 0.1

    async def _check_not_ahead(self) -> None:
        head = await self.log.head()
        if self.position > head:
            raise ProjectionAhead(
                f"projection {self.projection.name} is at sequence {self.position} but the log ends at {head}:"
                " the stream was recreated; run `tessera replay rebuild` after checking why"
            )

    async def _follow(self, stop: asyncio.Event) -> None:
        reader = self.log.reader(self.projection.subjects, start_seq=self.position + 1)
        await reader.open()
        idle_since: float | None = None
        try:
            while not stop.is_set():
                msgs = await reader.fetch(self.batch_size, timeout_s=self.idle_fetch_s)
                if msgs:
                    idle_since = None
                    await self.apply_batch(msgs)
                    continue
                # Idle for a while: make sure the consumer still exists (the server drops an
                # ephemeral consumer it considers inactive); if not, reopen from the checkpoint.
                now = asyncio.get_running_loop().time()
                idle_since = idle_since or now
                if now - idle_since > 5.0:
                    idle_since = now
                    try:
                        await reader.pending()
                    except nats.js.errors.NotFoundError:
                        self._log.info("projector.consumer_lost", position=self.position)
                        return  # run() reopens from the checkpoint
        finally:
            await reader.close()

    async def catch_up(self, until_seq: int | None = None) -> int:
        """Apply everything up to the log's head (or up to ``until_seq``) and return the position.

        Used by replay and tests; the live service uses :meth:`run`. A lost message
        (:class:`~tessera_runtime.jetstream.ReaderGap`) reopens the reader from the checkpoint.
        """
        await self.setup()
        target = until_seq if until_seq is not None else await self.log.head()
        while self.position < target:
            try:
                if await self._catch_up_once(target):
                    break
            except ReaderGap as exc:
                self._log.warning("projector.reader_gap", error=str(exc), position=self.position)
        return self.position

    async def _catch_up_once(self, target: int) -> bool:
        """Read towards ``target`` with one reader; True when nothing more matches up to it."""
        async with self.log.reader(self.projection.subjects, start_seq=self.position + 1) as reader:
            while self.position < target:
                msgs = await reader.fetch(self.batch_size, timeout_s=self.idle_fetch_s)
                if not msgs:
                    if await reader.pending() == 0:
                        return True  # no more matching events up to target
                    continue
                in_range = [m for m in msgs if m.seq <= target]
                if in_range:
                    await self.apply_batch(in_range)
                if len(in_range) < len(msgs):
                    return True  # passed the target
        return True

    def _advance(self, position: int) -> None:
        self.position = max(self.position, position)
        self._moved.set()
        self._moved = asyncio.Event()

    async def wait_until(self, seq: int, timeout_s: float = 2.0) -> bool:
        """Wait until this projector has applied the log up to ``seq`` (read-your-writes).

        Returns False if ``timeout_s`` seconds passed first. Only meaningful while :meth:`run`
        follows the log in this process.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while self.position < seq:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._moved.wait(), remaining)
        return True

    # -- one batch ------------------------------------------------------------------------------

    async def apply_batch(self, msgs: Sequence[Delivered]) -> None:
        """Apply one fetched batch in one transaction and advance the checkpoint to its end.

        Everything the batch changes — projection rows, dead-letter records, the checkpoint —
        commits together or not at all; counters and logs follow the commit.
        """
        last_seq = msgs[-1].seq
        q = quote_ident(self.schema)
        async with self.pool.acquire() as conn, conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock($1)", lock_key(self.schema))
            await conn.execute(f"SET LOCAL search_path TO {q}")
            await conn.execute(ALL_TENANTS)
            position = await conn.fetchval("SELECT position FROM _checkpoint FOR UPDATE")
            if last_seq <= position:
                self._advance(position)
                return
            events: list[StoredEvent] = []
            poison: list[tuple[Delivered, str, int]] = []
            for msg in msgs:
                if msg.seq <= position:
                    continue
                try:
                    events.append(StoredEvent(msg.seq, msg.subject, codec.decode_envelope(msg.data)))
                except codec.DecodeError as exc:
                    poison.append((msg, str(exc), 1))
            with tracing.consumer_span("project", self.projection.name, [e.envelope.traceparent for e in events]):
                poison += await self._apply(conn, events, {m.seq: m for m in msgs})
            poison.sort(key=lambda p: p[0].seq)
            for msg, error, attempts in poison:
                await self._dead_letter(conn, msg, error, attempts)
            await self._store_checkpoint(conn, last_seq)
        self._advance(last_seq)
        _applied_counter.add(len(events), {"projection": self.projection.name})
        for msg, error, _ in poison:
            self.dead_lettered += 1
            _dead_letter_counter.add(1, {"projection": self.projection.name})
            # A shadow build meets the same poison again: the live projector has reported it.
            report = self._log.error if self.publish_dead_letters else self._log.debug
            report("projector.dead_letter", seq=msg.seq, subject=msg.subject, error=error[:500])

    async def _store_checkpoint(self, conn: asyncpg.Connection, position: int) -> None:
        """Advance the checkpoint, inside the batch's transaction."""
        await conn.execute("UPDATE _checkpoint SET position = $1", position)

    async def _apply(
        self, conn: asyncpg.Connection, events: list[StoredEvent], msgs_by_seq: dict[int, Delivered]
    ) -> list[tuple[Delivered, str, int]]:
        if not events:
            return []
        try:
            async with conn.transaction():  # savepoint: the fast path, whole batch at once
                await self.projection.apply(conn, events)
            return []
        except TRANSIENT_DB_ERRORS:
            raise
        except Exception:
            pass
        poison: list[tuple[Delivered, str, int]] = []
        for event in events:
            error = ""
            for _attempt in range(self.max_attempts):
                try:
                    async with conn.transaction():
                        await self.projection.apply(conn, [event])
                    break
                except TRANSIENT_DB_ERRORS:
                    raise
                except Exception as exc:
                    error = f"{type(exc).__name__}: {exc}"
            else:
                poison.append((msgs_by_seq[event.seq], error, self.max_attempts))
        return poison

    async def _dead_letter(self, conn: asyncpg.Connection, msg: Delivered, error: str, attempts: int) -> None:
        """Record a poison event in ``_dead_letters`` and publish it on ``dlq.<name>``."""
        try:
            event_type: str | None = codec.decode_envelope(msg.data).type
        except codec.DecodeError:
            event_type = None
        await conn.execute(
            "INSERT INTO _dead_letters (stream_sequence, subject, event_type, error, attempts)"
            " VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING",
            msg.seq,
            msg.subject,
            event_type,
            error[:2000],
            attempts,
        )
        if not self.publish_dead_letters:
            return
        record = DeadLetter(
            projection=self.projection.name,
            stream_sequence=msg.seq,
            subject=msg.subject,
            event_type=event_type,
            error=error,
            attempts=attempts,
            dead_lettered_at=datetime.now(UTC),
            original=bytes(msg.data),
        )
        # Published before the checkpoint commits: a crash in between republishes it, and the
        # msg id makes the server drop the copy (within the dead-letter stream's duplicate window).
        await self.log.js.publish(
            dead_letter_subject(self.projection.name),
            codec.encode(record),
            headers={MSG_ID: f"dlq:{self.projection.name}:{msg.seq}"},
        )
