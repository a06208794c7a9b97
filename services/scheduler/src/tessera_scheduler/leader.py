"""One active scheduler: a lease in a NATS KV bucket, and an election record in the log for fencing.

**Lease.** Key ``scheduler`` of bucket ``TESSERA_LEASES`` holds :class:`LeaseRecord` (holder,
renewal time, length). It is won with ``kv.create`` (no key yet) or ``kv.update(last=revision)``
(the current holder's lease has expired), and kept by ``kv.update(last=<our revision>)`` every
``renew_s``: compare-and-set on the key's revision, so of two contenders exactly one wins, and a
holder whose revision moved on knows at once that it lost. Expiry is judged without trusting
clocks across hosts, as Kubernetes' leader election does: a standby takes over when it has seen
the same revision for ``lease_s`` seconds of its own monotonic clock (or when the record's own
expiry is more than ``lease_s`` in the past by its wall clock, for a standby that just started).
A leader that cannot renew for ``lease_s - renew_s`` seconds stops deciding before any standby
can take over.

**Election and fencing.** The lease alone cannot stop a paused leader (GC, a stalled VM) from
appending after it lost. So the winner appends ``LeaderElected(epoch = previous + 1)`` to
``ev.scheduler._system.leader.scheduler`` expecting that subject's last sequence (two winners
cannot both append), and stamps every decision with its epoch; every reader of the log ignores a
decision whose epoch is not the latest elected before it (:func:`~tessera_contracts.events.scheduler.is_current`).
A deposed leader's late decisions are therefore void everywhere, deterministically.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from datetime import UTC, datetime

import msgspec
import nats.errors
import nats.js.errors
from nats.js import JetStreamContext
from nats.js.api import KeyValueConfig, StorageType
from nats.js.kv import KeyValue

from tessera_contracts import codec
from tessera_contracts.envelope import envelope
from tessera_contracts.events.scheduler import LeaderElected
from tessera_contracts.subjects import SYSTEM_TENANT
from tessera_runtime import logs
from tessera_runtime.errors import ConcurrencyConflict, EventLogError
from tessera_runtime.eventlog import EventLog
from tessera_scheduler.refs import LEADER_REF

LEASE_BUCKET = "TESSERA_LEASES"
LEASE_KEY = "scheduler"
SOURCE = "tessera/scheduler"
ELECTION_ATTEMPTS = 5
TRANSIENT = (nats.errors.Error, nats.js.errors.Error, OSError, TimeoutError)
"""NATS hiccups: the lease state is unknown, try again on the next tick."""

_log = logs.get("leader")


def new_holder_id() -> str:
    """A holder id unique to this process: ``<host>-<pid>-<6 hex>``."""
    return f"{socket.gethostname()[:40]}-{os.getpid()}-{os.urandom(3).hex()}"


class LeaseRecord(msgspec.Struct, frozen=True, kw_only=True):
    """The lease's value: who holds it, when it was last renewed (unix seconds), for how long (seconds)."""

    holder: str
    renewed_at: float
    lease_s: float


class Lease:
    """A lease on one key of a KV bucket, won and renewed by compare-and-set on the key's revision.

    Args:
        kv: the bucket.
        holder: this contender's id.
        lease_s: how long a lease lasts without renewal, seconds.
        key: the key.
        wall: unix time (injected for tests); ``mono``: a monotonic clock, seconds.
    """

    def __init__(
        self,
        kv: KeyValue,
        holder: str,
        lease_s: float,
        *,
        key: str = LEASE_KEY,
        wall: Callable[[], float] = time.time,
        mono: Callable[[], float] = time.monotonic,
    ) -> None:
        self.kv = kv
        self.holder = holder
        self.lease_s = lease_s
        self.key = key
        self._wall = wall
        self._mono = mono
        self.revision: int | None = None
        self._seen: tuple[int, float] | None = None  # (revision, monotonic time first seen)

    @classmethod
    async def open(
        cls, js: JetStreamContext, holder: str, lease_s: float, *, bucket: str = LEASE_BUCKET, replicas: int = 1
    ) -> Lease:
        """Bind to ``bucket`` (created when missing: file storage, history 1)."""
        try:
            kv = await js.key_value(bucket)
        except nats.js.errors.BucketNotFoundError:
            config = KeyValueConfig(
                bucket=bucket,
                description="Leases of singleton services (the active scheduler)",
                history=1,
                storage=StorageType.FILE,
                replicas=replicas,
            )
            try:
                kv = await js.create_key_value(config)
            except nats.js.errors.BadRequestError:  # another instance created it meanwhile
                kv = await js.key_value(bucket)
        return cls(kv, holder, lease_s)

    def _record(self) -> bytes:
        return msgspec.json.encode(LeaseRecord(holder=self.holder, renewed_at=self._wall(), lease_s=self.lease_s))

    async def try_acquire(self) -> bool:
        """Take the lease if it is free or expired; True when this contender holds it now.

        Raises:
            nats.errors.Error: NATS did not answer (the caller retries on its next poll).
        """
        try:
            entry = await self.kv.get(self.key)
        except nats.js.errors.KeyNotFoundError:  # never held, or released (a delete marker)
            try:
                self.revision = await self.kv.create(self.key, self._record())
            except nats.js.errors.KeyWrongLastSequenceError:
                return False
            return True
        revision = int(entry.revision or 0)
        now = self._mono()
        if self._seen is None or self._seen[0] != revision:
            self._seen = (revision, now)
        try:
            record = msgspec.json.decode(entry.value or b"", type=LeaseRecord)
        except msgspec.DecodeError:
            record = None
        expired = now - self._seen[1] >= self.lease_s or (
            record is not None and self._wall() > record.renewed_at + record.lease_s + self.lease_s
        )
        if not expired and record is not None and record.holder != self.holder:
            return False
        try:
            self.revision = await self.kv.update(self.key, self._record(), last=revision)
        except nats.js.errors.KeyWrongLastSequenceError:
            return False
        return True

    async def renew(self) -> bool:
        """Extend the lease; False when it was lost (another holder's revision is there now).

        Raises:
            nats.errors.Error: NATS did not answer: whether the lease is still held is unknown.
        """
        if self.revision is None:
            return False
        try:
            self.revision = await self.kv.update(self.key, self._record(), last=self.revision)
        except nats.js.errors.KeyWrongLastSequenceError:
            self.revision = None
            return False
        return True

    async def release(self) -> None:
        """Give the lease up at once (a clean shutdown), so that a standby need not wait for it to expire."""
        revision, self.revision = self.revision, None
        if revision is not None:
            with contextlib.suppress(*TRANSIENT):
                await self.kv.delete(self.key, last=revision)


@dataclass
class Term:
    """One leadership term of this instance.

    Attributes:
        epoch: the epoch of its ``LeaderElected`` (strictly greater than every earlier one).
        holder: this instance's holder id.
        seq: the stream sequence of its ``LeaderElected``.
        started: monotonic time the term began, seconds.
        deposed: set when the term is over (lease lost or a newer election seen).
    """

    epoch: int
    holder: str
    seq: int
    started: float
    deposed: asyncio.Event = field(default_factory=asyncio.Event)


async def last_election(log: EventLog) -> tuple[int, int]:
    """(epoch of the last ``LeaderElected``, its stream sequence); (0, 0) when no leader was ever elected.

    Raises:
        EventLogError: the last election record cannot be decoded.
    """
    try:
        msg = await log.js.get_last_msg(log.stream.name, LEADER_REF.subject)
    except nats.js.errors.NotFoundError:
        return 0, 0
    try:
        event = codec.payload(codec.decode_envelope(msg.data or b""))
    except (codec.DecodeError, LookupError) as exc:
        raise EventLogError(f"unreadable election record at {msg.seq}: {exc}") from None
    if not isinstance(event, LeaderElected):
        raise EventLogError(f"not an election record at sequence {msg.seq}: {type(event).__name__}")
    return event.epoch, int(msg.seq or 0)


async def elect(log: EventLog, holder: str, mono: Callable[[], float] = time.monotonic) -> Term | None:
    """Append ``LeaderElected(previous epoch + 1)`` expecting the election subject's last sequence.

    Returns the term, or None when other elections kept landing first (the caller goes back to
    standby and polls the lease again).
    """
    for _attempt in range(ELECTION_ATTEMPTS):
        previous, last = await last_election(log)
        event = LeaderElected(epoch=previous + 1, holder=holder)
        env = envelope(
            event,
            subject=LEADER_REF.subject,
            source=SOURCE,
            tenant=SYSTEM_TENANT,
            time=datetime.now(UTC),
            correlation_id=f"election-{holder}"[:128],
        )
        try:
            [ack] = await log.append(LEADER_REF.subject, [env], last)
        except ConcurrencyConflict:
            continue
        return Term(epoch=event.epoch, holder=holder, seq=ack.seq, started=mono())
    return None


Lead = Callable[[Term, Callable[[], bool]], Coroutine[object, object, None]]
"""What a leader does for its term: ``lead(term, still_leader)``; returns when ``term.deposed`` is set."""


class Elector:
    """Standby until the lease is won; then elect, lead, renew; back to standby when deposed.

    Args:
        log: the event log (for the election record).
        lease: the lease.
        lead: the leader's work for one term (the decision loop).
        renew_s: seconds between renewals.
        poll_s: seconds between a standby's looks at the lease.
        mono: monotonic clock, seconds.
    """

    def __init__(
        self,
        log: EventLog,
        lease: Lease,
        lead: Lead,
        *,
        renew_s: float = 1.0,
        poll_s: float = 1.0,
        mono: Callable[[], float] = time.monotonic,
    ) -> None:
        self.log = log
        self.lease = lease
        self.lead = lead
        self.renew_s = renew_s
        self.poll_s = poll_s
        self._mono = mono
        self.term: Term | None = None
        self._renewed_at = 0.0

    @property
    def is_leader(self) -> bool:
        """Leading now: a term is running and the lease was renewed recently enough."""
        return self.term is not None and not self.term.deposed.is_set() and self.still_leader()

    def still_leader(self) -> bool:
        """The lease cannot have passed to a standby yet (last renewal within ``lease_s - renew_s``)."""
        return self._mono() - self._renewed_at < self.lease.lease_s - self.renew_s

    async def run(self, stop: asyncio.Event) -> None:
        """Contend, lead and stand by until ``stop`` is set; a held lease is released on the way out."""
        try:
            while not stop.is_set():
                try:
                    won = await self.lease.try_acquire()
                except TRANSIENT as exc:
                    _log.warning("leader.lease_unreachable", error=repr(exc))
                    won = False
                if won:
                    self._renewed_at = self._mono()
                    await self._term(stop)
                if not stop.is_set():
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(stop.wait(), self.poll_s)
        finally:
            self.term = None
            await self.lease.release()

    async def _term(self, stop: asyncio.Event) -> None:
        try:
            term = await elect(self.log, self.lease.holder, self._mono)
        except (*TRANSIENT, EventLogError) as exc:
            _log.warning("leader.election_failed", error=repr(exc))
            term = None
        if term is None:
            await self.lease.release()
            return
        self.term = term
        _log.info("leader.elected", epoch=term.epoch, holder=term.holder, seq=term.seq)
        renewer = asyncio.create_task(self._renew(term), name="lease-renewer")
        leading = asyncio.create_task(self.lead(term, self.still_leader), name=f"leader-epoch-{term.epoch}")
        stopped = asyncio.create_task(stop.wait(), name="stop-wait")
        deposed = asyncio.create_task(term.deposed.wait(), name="deposed-wait")
        try:
            await asyncio.wait([leading, stopped, deposed, renewer], return_when=asyncio.FIRST_COMPLETED)
        finally:
            term.deposed.set()
            for task in (renewer, stopped, deposed):
                task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.gather(renewer, stopped, deposed, return_exceptions=True)
            try:
                await asyncio.wait_for(leading, 10.0)
            except Exception as exc:  # the loop failed: log it, stand by, contend again
                _log.error("leader.loop_failed", error=repr(exc), epoch=term.epoch)
            self.term = None
            _log.info("leader.deposed", epoch=term.epoch, stopping=stop.is_set())
            if not stop.is_set():
                await self.lease.release()

    async def _renew(self, term: Term) -> None:
        while not term.deposed.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(term.deposed.wait(), self.renew_s)
            if term.deposed.is_set():
                return
            try:
                if not await self.lease.renew():
                    _log.warning("leader.lease_lost", epoch=term.epoch)
                    term.deposed.set()
                    return
                self._renewed_at = self._mono()
            except TRANSIENT as exc:
                _log.warning("leader.renew_failed", error=repr(exc), epoch=term.epoch)
            if not self.still_leader():
                _log.warning("leader.lease_expiring", epoch=term.epoch)
                term.deposed.set()
                return
