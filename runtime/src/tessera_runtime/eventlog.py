"""The event log: append, load and read Tessera's one JetStream stream (``TESSERA_EVENTS``).

Appends use two headers (ARCHITECTURE.md §2):

- ``Nats-Expected-Last-Subject-Sequence``: optimistic concurrency per aggregate (one subject per
  aggregate); a mismatch is :class:`~tessera_runtime.errors.ConcurrencyConflict`;
- ``Nats-Msg-Id`` = the envelope's id: a retried append inside the stream's duplicate window is
  acknowledged as a duplicate and stored once.

Appends to different aggregates are pipelined (many publishes in flight on one connection);
appends to one aggregate are sequential, each expecting the sequence the previous one got.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import NamedTuple

import msgspec
import nats.errors
import nats.js.errors
from nats.aio.client import Client as NATS
from nats.js import api

from tessera_contracts import codec
from tessera_contracts.envelope import Envelope
from tessera_contracts.streams import ALL_STREAMS, EVENTS, StreamSpec
from tessera_runtime import tracing
from tessera_runtime.errors import AppendTimeout, ConcurrencyConflict, EventLogError
from tessera_runtime.jetstream import Delivered, PubAck, Publisher, PullReader, ReaderGap

EXPECTED_LAST_SUBJECT_SEQ = "Nats-Expected-Last-Subject-Sequence"
MSG_ID = "Nats-Msg-Id"
WRONG_LAST_SEQUENCE = 10071  # JetStream API error code: "wrong last sequence"


class Appended(NamedTuple):
    """The log's answer to one appended event: its stream sequence, and whether it was a retry."""

    seq: int
    duplicate: bool


class AppendRequest(NamedTuple):
    """Events for one aggregate, with the last subject sequence the caller saw (None: don't check).

    ``expected_last_seq`` is a *stream* sequence: 0 means "the aggregate must have no events yet".
    """

    subject: str
    events: Sequence[Envelope]
    expected_last_seq: int | None


class StoredEvent(msgspec.Struct, frozen=True):
    """One event read back from the log, with its stream sequence (1-based, gap-free per stream)."""

    seq: int
    subject: str
    envelope: Envelope


def stream_config(spec: StreamSpec, replicas: int) -> api.StreamConfig:
    """The nats-py stream configuration for a :class:`StreamSpec`."""
    return api.StreamConfig(
        name=spec.name,
        description=spec.description,
        subjects=list(spec.subjects),
        retention=api.RetentionPolicy.LIMITS,
        storage=api.StorageType.FILE if spec.file_storage else api.StorageType.MEMORY,
        num_replicas=replicas,
        duplicate_window=spec.duplicate_window_s,
        deny_delete=spec.deny_delete,
        deny_purge=spec.deny_purge,
        allow_rollup_hdrs=spec.allow_rollup_hdrs,
        max_age=spec.max_age_s,
        discard=api.DiscardPolicy.OLD,
    )


class EventLog:
    """Client of the event log over one NATS connection.

    Args:
        nc: a connected nats-py client.
        stream: the stream to use (default :data:`tessera_contracts.streams.EVENTS`).
        timeout_s: how long an append waits for the server's acknowledgement, in seconds.
        max_in_flight: how many publishes may await acknowledgement at once (back-pressure).
    """

    def __init__(
        self,
        nc: NATS,
        *,
        stream: StreamSpec = EVENTS,
        timeout_s: float = 5.0,
        max_in_flight: int = 4096,
    ) -> None:
        self.nc = nc
        self.js = nc.jetstream(timeout=timeout_s)
        self.stream = stream
        self.timeout_s = timeout_s
        self.max_in_flight = max_in_flight
        self._publisher = Publisher(nc)

    async def ensure_streams(self, replicas: int = 1) -> None:
        """Create Tessera's streams where missing, with :mod:`tessera_contracts.streams`'s settings.

        An existing stream is left as it is: its configuration (replicas, say) is an operator's
        decision, not something every process start should rewrite.

        Raises:
            nats.js.errors.APIError: the server refused a setting (e.g. too few servers for ``replicas``).
        """
        for spec in ALL_STREAMS:
            try:
                await self.js.stream_info(spec.name)
            except nats.js.errors.NotFoundError:
                await self.js.add_stream(stream_config(spec, replicas))

    async def append(self, subject: str, events: Sequence[Envelope], expected_last_seq: int | None) -> list[Appended]:
        """Append events to one aggregate, in order.

        Each event after the first expects the sequence its predecessor got, so the batch is
        contiguous on its subject. (It is not atomic: a crash part-way leaves a prefix, which
        readers see as a complete, shorter history.)

        Raises:
            ConcurrencyConflict: the aggregate's last sequence is not ``expected_last_seq``.
            AppendTimeout: no acknowledgement within ``timeout_s``; retrying is safe.
            EventLogError: the server refused the append for another reason.
            ValueError: an envelope's ``subject`` is not ``subject``.
        """
        [result] = await self.append_many([AppendRequest(subject, events, expected_last_seq)])
        if isinstance(result, EventLogError):
            raise result
        return result

    async def append_many(self, requests: Sequence[AppendRequest]) -> list[list[Appended] | EventLogError]:
        """Append to many aggregates at once, pipelined; one result per request, in order.

        The k-th events of all requests go out together (up to ``max_in_flight`` at a time), each
        expecting the sequence the (k-1)-th got. A request that fails yields its error in its
        slot and sends nothing more; the others are unaffected.

        Raises:
            ValueError: an envelope's ``subject`` is not its request's ``subject``.
        """
        for r in requests:
            for env in r.events:
                if env.subject != r.subject:
                    raise ValueError(f"envelope subject {env.subject!r} is not {r.subject!r}")
        done: list[list[Appended]] = [[] for _ in requests]
        failed: list[EventLogError | None] = [None] * len(requests)
        expected = [r.expected_last_seq for r in requests]
        depth = max((len(r.events) for r in requests), default=0)
        with tracing.producer_span("append", self.stream.name) as traceparent:
            for k in range(depth):
                wave = [i for i, r in enumerate(requests) if k < len(r.events) and failed[i] is None]
                for start in range(0, len(wave), self.max_in_flight):
                    chunk = wave[start : start + self.max_in_flight]
                    sent: list[tuple[int, asyncio.Future[PubAck]]] = []
                    for i in chunk:
                        try:
                            future = await self._send(
                                requests[i].subject, requests[i].events[k], expected[i], traceparent
                            )
                        except (nats.errors.Error, OSError) as exc:  # too large, buffer full, closed
                            failed[i] = EventLogError(f"append to {requests[i].subject} not sent: {exc}")
                            continue
                        sent.append((i, future))
                    if sent:
                        await asyncio.wait([f for _, f in sent], timeout=self.timeout_s)
                    self._publisher.forget([f for _, f in sent if not f.done()])
                    for i, future in sent:
                        try:
                            ack = self._result(requests[i].subject, future, expected[i])
                        except ConcurrencyConflict as exc:
                            ack_or_none = await self._stored_already(requests[i].events[k], expected[i])
                            if ack_or_none is None:
                                failed[i] = exc
                                continue
                            ack = ack_or_none
                        except EventLogError as exc:
                            failed[i] = exc
                            continue
                        done[i].append(ack)
                        expected[i] = ack.seq
        return [failed[i] or done[i] for i in range(len(requests))]

    async def _send(
        self, subject: str, env: Envelope, expected: int | None, traceparent: str | None
    ) -> asyncio.Future[PubAck]:
        if env.traceparent is None and traceparent is not None:
            env = msgspec.structs.replace(env, traceparent=traceparent)  # the caller's stays as it was
        headers = {MSG_ID: env.id}
        if traceparent is not None:
            headers[tracing.TRACEPARENT] = traceparent
        if expected is not None:
            headers[EXPECTED_LAST_SUBJECT_SEQ] = str(expected)
        return await self._publisher.publish(subject, codec.encode(env), headers)

    async def _stored_already(self, env: Envelope, expected: int | None) -> Appended | None:
        """After a conflict, tell whether this very event was stored by an earlier try.

        The earlier try's acknowledgement may have been lost.

        Servers differ on whether the expected-sequence check or the msg-id dedup comes first
        (2.9 answers a retry "duplicate", 2.10+ "wrong last sequence"), so a retry can look like
        a conflict. It is ours if the first event after ``expected`` on the subject has our id.
        """
        try:
            msg = await self.js._jsm.get_msg(self.stream.name, seq=(expected or 0) + 1, subject=env.subject, next=True)
        except nats.js.errors.NotFoundError:
            return None
        if msg.headers and msg.headers.get(MSG_ID) == env.id and msg.seq is not None:
            return Appended(msg.seq, True)
        return None

    def _result(self, subject: str, future: asyncio.Future[PubAck], expected: int | None) -> Appended:
        if not future.done():
            future.cancel()
            raise AppendTimeout(f"no acknowledgement for {subject} within {self.timeout_s}s")
        ack = future.result()
        if ack.error is not None:
            if ack.error.get("err_code") == WRONG_LAST_SEQUENCE:
                raise ConcurrencyConflict(subject, expected or 0, str(ack.error.get("description", "")))
            raise EventLogError(f"append to {subject} refused: {ack.error.get('description', ack.error)}")
        return Appended(ack.seq, ack.duplicate)

    async def last_sequence(self, subject: str) -> int:
        """The stream sequence of the last event on ``subject``; 0 when it has none."""
        try:
            msg = await self.js.get_last_msg(self.stream.name, subject)
        except nats.js.errors.NotFoundError:
            return 0
        return int(msg.seq or 0)

    async def load(self, subject: str) -> tuple[list[StoredEvent], int]:
        """All events of one aggregate, in order, and the last sequence to expect when appending.

        Raises:
            tessera_contracts.codec.DecodeError: a stored event is not a valid envelope.
        """
        last = await self.last_sequence(subject)
        if last == 0:
            return [], 0
        for _attempt in range(3):
            try:
                return await self._read_subject(subject, last), last
            except ReaderGap:
                continue
        raise EventLogError(f"could not read {subject}: messages kept getting lost on the way")

    async def _read_subject(self, subject: str, last: int) -> list[StoredEvent]:
        events: list[StoredEvent] = []
        async with self.reader((subject,), start_seq=1) as reader:
            while not events or events[-1].seq < last:
                msgs = await reader.fetch(1000, timeout_s=self.timeout_s)
                if not msgs and await reader.pending() == 0:
                    raise EventLogError(f"{subject} ends before sequence {last}")
                events += [to_stored(m) for m in msgs]
        return [e for e in events if e.seq <= last]

    def reader(self, filter_subjects: Sequence[str], *, start_seq: int) -> PullReader:
        """A reader of this log's stream from ``start_seq``, narrowed to ``filter_subjects``."""
        return PullReader(self.nc, self.stream.name, filter_subjects, start_seq=start_seq)

    async def head(self) -> int:
        """The stream's last sequence (0 when empty).

        Raises:
            EventLogError: the stream does not exist on this server.
        """
        try:
            info = await self.js.stream_info(self.stream.name)
        except nats.js.errors.NotFoundError:
            raise EventLogError(
                f"no event log on this NATS server (stream {self.stream.name} is missing); start Tessera's services"
            ) from None
        return int(info.state.last_seq)


def to_stored(msg: Delivered) -> StoredEvent:
    """Decode a message read from the stream.

    Raises:
        tessera_contracts.codec.DecodeError: the body is not a valid envelope.
    """
    return StoredEvent(msg.seq, msg.subject, codec.decode_envelope(msg.data))
