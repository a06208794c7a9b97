"""Lean JetStream publishing and pulling on a nats-py connection, for the event log's hot paths.

nats-py's own helpers cost a task and a timer per message (``publish`` is a request with its own
``wait_for``; ``fetch`` awaits ``next_msg`` per message), and its ``publish_async`` never resolves
when the server answers with an error. These two classes use the documented JetStream wire
protocol directly, with one reply subscription each:

- :class:`Publisher`: a publish carries a reply subject ``<inbox>.<n>``; the server's PubAck
  (``{"stream","seq","duplicate"}`` or ``{"error":{...}}``) resolves the matching future.
- :class:`PullReader`: pull requests on ``$JS.API.CONSUMER.MSG.NEXT.<stream>.<consumer>``; first
  ``no_wait`` for whatever is stored, then, if nothing was, one lingering request that returns as
  soon as a message arrives or ``expires`` passes. The stream sequence and pending count are read
  from the ``$JS.ACK...`` reply subject (JetStream's ack-subject format, v1 and v2).

References: NATS JetStream wire API (docs.nats.io, "JetStream wire API reference").
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Sequence

import msgspec
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.js import api

STATUS = "Status"
MAX_PULL_BYTES = 8 * 1024 * 1024
"""Bytes one pull request may deliver: far below the client's 64 MiB pending limit, so a batch of
large events cannot make the server or the client cut the connection as a slow consumer."""


class PubAck(msgspec.Struct):
    """A JetStream publish acknowledgement (or its error)."""

    stream: str = ""
    seq: int = 0
    duplicate: bool = False
    error: dict[str, object] | None = None


_decode_ack = msgspec.json.Decoder(PubAck).decode


class Publisher:
    """Pipelined JetStream publishes: many in flight, one reply subscription."""

    def __init__(self, nc: NATS) -> None:
        self.nc = nc
        self._prefix = ""
        self._pending: dict[str, asyncio.Future[PubAck]] = {}
        self._counter = itertools.count(1)
        self._lock = asyncio.Lock()

    async def _ensure_started(self) -> None:
        if self._prefix:
            return
        async with self._lock:
            if not self._prefix:
                prefix = self.nc.new_inbox()
                await self.nc.subscribe(prefix + ".*", cb=self._on_reply)
                self._prefix = prefix

    async def _on_reply(self, msg: Msg) -> None:
        future = self._pending.pop(msg.subject[len(self._prefix) + 1 :], None)
        if future is None or future.done():
            return
        if msg.headers and msg.headers.get(STATUS) == "503":
            future.set_result(PubAck(error={"code": 503, "description": "no stream listens on this subject"}))
            return
        try:
            future.set_result(_decode_ack(msg.data))
        except msgspec.DecodeError as exc:
            future.set_result(PubAck(error={"code": 500, "description": f"bad ack: {exc}"}))

    async def publish(self, subject: str, body: bytes, headers: dict[str, str]) -> asyncio.Future[PubAck]:
        """Send one message; the returned future resolves with the server's :class:`PubAck`."""
        await self._ensure_started()
        token = str(next(self._counter))
        future: asyncio.Future[PubAck] = asyncio.get_running_loop().create_future()
        self._pending[token] = future
        await self.nc.publish(subject, body, reply=f"{self._prefix}.{token}", headers=headers)
        return future

    def forget(self, futures: Sequence[asyncio.Future[PubAck]]) -> None:
        """Drop the bookkeeping of futures the caller gave up on (timed out)."""
        gone = {id(f) for f in futures}
        for token in [t for t, f in self._pending.items() if id(f) in gone]:
            del self._pending[token]


class Delivered(msgspec.Struct, frozen=True):
    """One message pulled from a stream.

    Its stream sequence, subject, body, and how many messages matching the consumer's filter
    remain after it.
    """

    seq: int
    subject: str
    data: bytes
    pending: int


def parse_ack_subject(reply: str) -> tuple[int, int, int]:
    """(stream sequence, consumer sequence, pending) from a ``$JS.ACK`` reply subject.

    v1: ``$JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending>`` (9 tokens);
    v2: ``$JS.ACK.<domain>.<account>.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending>[.<token>]``.

    Raises:
        ValueError: not an ack subject.
    """
    tokens = reply.split(".")
    if len(tokens) == 9:
        return int(tokens[5]), int(tokens[6]), int(tokens[8])
    if len(tokens) >= 11:
        return int(tokens[7]), int(tokens[8]), int(tokens[10])
    raise ValueError(f"not a JetStream ack subject: {reply!r}")


class ReaderGap(Exception):
    """Messages were lost between the server and this reader.

    Raised when the consumer sequence skips (a message was dropped on the way) or the connection
    was re-established while reading. The reader is then unusable: open a new one from the last
    sequence that was applied.
    """


class PullReader:
    """An ephemeral, ack-less pull consumer read from ``start_seq`` (see the module docstring).

    Loss detection: an ack-less consumer moves on as soon as it sends, so a message lost in
    transit (the connection dropped, a slow-consumer cut-off) would be skipped silently. Every
    delivery carries the consumer sequence, which has no gaps; the reader checks it, and any
    gap or reconnect raises :class:`ReaderGap` instead of returning later messages. Each pull
    request also caps its bytes (:data:`MAX_PULL_BYTES`) so large events cannot flood the client.
    """

    def __init__(
        self,
        nc: NATS,
        stream: str,
        filter_subjects: Sequence[str],
        *,
        start_seq: int,
        inactive_threshold_s: float = 60.0,
    ) -> None:
        self.nc = nc
        self.js = nc.jetstream()
        self.stream = stream
        self.filter_subjects = tuple(filter_subjects)
        self.start_seq = max(1, start_seq)
        self.inactive_threshold_s = inactive_threshold_s
        self.consumer = ""
        self._inbox = ""
        self._sub: object | None = None
        self._buffer: list[Delivered] = []
        self._want = 0
        self._done = asyncio.Event()
        self._last_cseq = 0
        self._gap: str | None = None
        self._reconnects = 0

    async def __aenter__(self) -> PullReader:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def open(self) -> None:
        """Create the consumer and the delivery subscription."""
        self.consumer = self.nc._nuid.next().decode()
        config = api.ConsumerConfig(
            name=self.consumer,
            deliver_policy=api.DeliverPolicy.BY_START_SEQUENCE,
            opt_start_seq=self.start_seq,
            ack_policy=api.AckPolicy.NONE,
            inactive_threshold=self.inactive_threshold_s,
            mem_storage=True,
            num_replicas=1,
        )
        if len(self.filter_subjects) == 1:
            config.filter_subject = self.filter_subjects[0]
        else:
            config.filter_subjects = list(self.filter_subjects)
        self._reconnects = self.nc.stats["reconnects"]
        await self.js._jsm.add_consumer(self.stream, config=config)
        self._inbox = self.nc.new_inbox()
        self._sub = await self.nc.subscribe(self._inbox, cb=self._on_msg)

    async def _on_msg(self, msg: Msg) -> None:
        status = msg.headers.get(STATUS) if msg.headers else None
        if status is not None:
            if status != "100":  # 100 = heartbeat / flow control; 404, 408, 409 end a request
                self._done.set()
            return
        seq, cseq, pending = parse_ack_subject(msg.reply)
        if cseq != self._last_cseq + 1 and self._gap is None:
            self._gap = f"consumer sequence jumped from {self._last_cseq} to {cseq}"
            self._done.set()
        self._last_cseq = cseq
        self._buffer.append(Delivered(seq, msg.subject, msg.data, pending))
        if len(self._buffer) >= self._want:
            self._done.set()

    async def _request(self, batch: int, timeout_s: float, *, no_wait: bool) -> None:
        self._want = batch
        self._done.clear()
        request: dict[str, object] = {"batch": batch, "max_bytes": MAX_PULL_BYTES}
        if no_wait:
            request["no_wait"] = True
        else:
            request["expires"] = int(timeout_s * 1e9)
        await self.nc.publish(
            f"$JS.API.CONSUMER.MSG.NEXT.{self.stream}.{self.consumer}",
            msgspec.json.encode(request),
            reply=self._inbox,
        )
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._done.wait(), timeout_s + 0.5)

    async def fetch(self, batch: int, timeout_s: float) -> list[Delivered]:
        """Up to ``batch`` messages in sequence order; empty when none came within ``timeout_s``.

        Raises:
            ReaderGap: a message was lost on the way, or the connection was re-established.
        """
        self._check()
        if not self._buffer:
            await self._request(batch, timeout_s, no_wait=True)
        if not self._buffer:
            await self._request(1, timeout_s, no_wait=False)
        self._check()
        out, self._buffer = self._buffer[:batch], self._buffer[batch:]
        return out

    def _check(self) -> None:
        if self._gap is None and self.nc.stats["reconnects"] != self._reconnects:
            self._gap = "the NATS connection was re-established while reading"
        if self._gap is not None:
            self._buffer.clear()
            raise ReaderGap(self._gap)

    async def pending(self) -> int:
        """Messages matching the filter not yet delivered, per the server.

        Raises:
            nats.js.errors.NotFoundError: the consumer is gone (e.g. after a NATS restart).
        """
        info = await self.js._jsm.consumer_info(self.stream, self.consumer)
        return int(info.num_pending or 0) + len(self._buffer)

    async def close(self) -> None:
        """Unsubscribe and delete the consumer (best effort: the server drops idle ones anyway)."""
        sub, self._sub = self._sub, None
        if sub is None:
            return
        try:
            await sub.unsubscribe()  # type: ignore[attr-defined]
            await self.js._jsm.delete_consumer(self.stream, self.consumer)
        except Exception:
            pass
