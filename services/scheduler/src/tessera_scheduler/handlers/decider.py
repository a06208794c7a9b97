"""The leader's work for one term: fold the log into a fresh core, then decide, append, repeat.

1. **Rebuild.** A new :class:`Core` applies the whole log (scheduler and tenancy events) from
   sequence 1 through the term's own ``LeaderElected``, each event at its envelope time.
2. **Loop.** Read what is new and apply it; once every decision this term appended has been read
   back and applied, ask the core: first which nodes fell silent (``lose_node``), else
   ``decide(now)``; append the decisions in one pipelined batch, each on its aggregate's subject,
   in the order the core gave them (one request per event, so the log keeps that order).
3. **Stop** the moment the term is deposed: the lease was lost or not renewed in time, a newer
   ``LeaderElected`` was read, or (checked just before each append) the election subject has
   moved past this term's record. What slips through anyway is void by its epoch.

The core is the only judge of what its events mean: decisions read back are applied like every
other event, so a decision that no longer fits (the job was cancelled in between) is ignored by
the core exactly as it is by every other reader.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Protocol

from tessera_contracts import codec, rpc
from tessera_contracts.envelope import Envelope, envelope
from tessera_contracts.events import scheduler as ev
from tessera_contracts.registry import Event, UnknownEventType
from tessera_contracts.subjects import SYSTEM_TENANT
from tessera_runtime import logs
from tessera_runtime.eventlog import AppendRequest, EventLog
from tessera_runtime.jetstream import Delivered, PullReader, ReaderGap
from tessera_runtime.rpc import Call, RpcError, RpcServer
from tessera_scheduler import refs
from tessera_scheduler.handlers.jobs import LIVE_SERVICE, Explanation
from tessera_scheduler.heartbeats import HeartbeatMonitor
from tessera_scheduler.leader import Term

SUBJECTS = ("ev.scheduler.>", "ev.tenancy.>")
"""What the core folds: the scheduler's own events and the tenancy facts (quotas, priority classes)."""
SOURCE = "tessera/scheduler"
BATCH = 1000

_log = logs.get("decider")


class Core(Protocol):
    """What the decision loop needs of the scheduler core (:class:`tessera_scheduler.domain.core.SchedulerCore`)."""

    @property
    def epoch(self) -> int:
        """The latest ``LeaderElected`` epoch applied (0 = none)."""
        ...

    def apply(self, event: Event, at: float) -> bool:
        """Fold one logged event (``at``: its unix time); False when ignored."""
        ...

    def decide(self, now: float) -> list[Event]:
        """The decisions to append now, in order; the core's state is unchanged."""
        ...

    def lose_node(self, node: str, silent_s: float) -> list[Event]:
        """``NodeLost`` and the preemptions it implies; the core's state is unchanged."""
        ...

    def explain(self, job_id: str, now: float) -> str:
        """Why the job waits and what would let it run."""
        ...


CoreFactory = Callable[[], Core]


class Decider:
    """Runs the leader's loop for each term it is given (see the module docstring).

    Args:
        log: the event log.
        core_factory: makes a fresh, empty core for each term.
        heartbeats: the node heartbeat monitor.
        node_timeout_s: a registered node silent this long is lost, seconds.
        cycle_s: the longest wait for new events before deciding again, seconds.
        wall: unix time, seconds; ``mono``: a monotonic clock, seconds (injected for tests).
    """

    def __init__(
        self,
        log: EventLog,
        core_factory: CoreFactory,
        heartbeats: HeartbeatMonitor,
        *,
        node_timeout_s: float = 30.0,
        cycle_s: float = 0.2,
        wall: Callable[[], float] = time.time,
        mono: Callable[[], float] = time.monotonic,
    ) -> None:
        self.log = log
        self.core_factory = core_factory
        self.heartbeats = heartbeats
        self.node_timeout_s = node_timeout_s
        self.cycle_s = cycle_s
        self._wall = wall
        self._mono = mono
        self.core: Core | None = None
        self.position = 0
        self.ignored = 0
        """Events the core ignored this term (stale epochs, decisions that no longer fit)."""
        self._tenants: dict[str, str] = {}
        self._ready: dict[str, float] = {}  # node -> monotonic time it was (re)registered, or -inf
        self._term: Term | None = None

    @property
    def leading(self) -> bool:
        """A term is running and not deposed."""
        return self._term is not None and not self._term.deposed.is_set()

    async def lead(self, term: Term, still_leader: Callable[[], bool]) -> None:
        """Lead for one term: rebuild, then decide until ``term.deposed`` is set (or set it on a newer election)."""
        self._term, self.core, self.position, self.ignored = term, self.core_factory(), 0, 0
        self._tenants, self._ready = {}, {}
        explain = RpcServer(self.log.nc, LIVE_SERVICE)
        explain.operation("explain")(self._explain)
        reader: PullReader | None = None
        try:
            began = self._mono()
            reader = await self._reader()
            while self.position < term.seq and not term.deposed.is_set():
                reader = await self._read(reader, term, rebuilding=True)
            _log.info(
                "decider.rebuilt", epoch=term.epoch, position=self.position, seconds=round(self._mono() - began, 3)
            )
            if self.core.epoch != term.epoch:
                term.deposed.set()  # a newer election is already in the log
            await explain.start()
            await self._loop(term, still_leader, reader)
        finally:
            await explain.stop()
            if reader is not None:
                await reader.close()
            self._term = None

    async def _loop(self, term: Term, still_leader: Callable[[], bool], reader: PullReader) -> None:
        awaiting = 0  # highest sequence this term appended
        while not term.deposed.is_set():
            reader = await self._read(reader, term, rebuilding=False)
            if term.deposed.is_set() or self.position < awaiting:
                continue
            decisions = self._lost_nodes() or self._decide()
            if not decisions:
                continue
            if not still_leader() or await self.log.last_sequence(refs.LEADER_REF.subject) != term.seq:
                term.deposed.set()  # the lease may have passed on, or a successor was elected
                break
            awaiting = max(awaiting, await self._append(term, decisions))

    # -- reading --------------------------------------------------------------------------------

    async def _reader(self) -> PullReader:
        reader = self.log.reader(SUBJECTS, start_seq=self.position + 1)
        await reader.open()
        return reader

    async def _read(self, reader: PullReader, term: Term, *, rebuilding: bool) -> PullReader:
        """Fetch and apply one batch; a lost delivery reopens the reader after the last applied event."""
        try:
            msgs = await reader.fetch(BATCH, timeout_s=self.cycle_s if not rebuilding else 1.0)
        except ReaderGap as exc:
            _log.warning("decider.reader_gap", error=str(exc), position=self.position)
            await reader.close()
            return await self._reader()
        self._apply(msgs, term, rebuilding=rebuilding)
        return reader

    def _apply(self, msgs: Sequence[Delivered], term: Term, *, rebuilding: bool) -> None:
        assert self.core is not None
        now = self._mono()
        for msg in msgs:
            self.position = msg.seq
            try:
                env = codec.decode_envelope(msg.data)
                event = codec.payload(env)
            except (codec.DecodeError, UnknownEventType) as exc:
                _log.warning("decider.skipped_event", seq=msg.seq, error=str(exc)[:300])
                continue
            applied = self.core.apply(event, env.time.timestamp())
            if not applied:
                self.ignored += 1
                continue
            match event:
                case ev.JobSubmitted():
                    self._tenants[event.job_id] = env.tenant
                case ev.NodeRegistered():
                    self._ready[event.node] = float("-inf") if rebuilding else now
                case ev.NodeLost():
                    self._ready.pop(event.node, None)
                case ev.LeaderElected() if event.epoch != term.epoch and msg.seq > term.seq:
                    _log.warning("decider.superseded", epoch=term.epoch, by=event.epoch, holder=event.holder)
                    term.deposed.set()
                case _:
                    pass

    # -- deciding -------------------------------------------------------------------------------

    def _lost_nodes(self) -> list[Event]:
        """``lose_node`` for each registered node silent ``node_timeout_s`` (counted from the term start at most)."""
        assert self.core is not None and self._term is not None
        now = self._mono()
        events: list[Event] = []
        for node in sorted(self._ready):
            since = max(self._term.started, self._ready[node], self.heartbeats.last_seen(node))
            silent = now - since
            if silent >= self.node_timeout_s:
                events += self.core.lose_node(node, round(silent, 3))
        return events

    def _decide(self) -> list[Event]:
        assert self.core is not None
        return self.core.decide(self._wall())

    async def _append(self, term: Term, decisions: list[Event]) -> int:
        """Append decisions in order, pipelined; the highest sequence stored (0 when none was)."""
        at = datetime.fromtimestamp(self._wall(), UTC)
        requests = []
        for decision in decisions:
            env = self._envelope(decision, term, at)
            if env is not None:
                requests.append(AppendRequest(env.subject, [env], None))
        results = await self.log.append_many(requests)
        highest = 0
        for request, result in zip(requests, results, strict=True):
            if isinstance(result, Exception):
                _log.warning("decider.append_failed", subject=request.subject, error=str(result)[:300])
                continue
            highest = max([highest, *(a.seq for a in result)])
        return highest

    def _envelope(self, decision: Event, term: Term, at: datetime) -> Envelope | None:
        node = getattr(decision, "node", None)
        job_id = getattr(decision, "job_id", None)
        if isinstance(decision, ev.NodeLost) and node is not None:
            subject, tenant = refs.node_ref(node).subject, SYSTEM_TENANT
        elif job_id is not None and job_id in self._tenants:
            tenant = self._tenants[job_id]
            subject = refs.job_ref(tenant, job_id).subject
        else:
            _log.error("decider.unroutable_decision", type=type(decision).TYPE, job_id=job_id)
            return None
        return envelope(
            decision,
            subject=subject,
            source=SOURCE,
            tenant=tenant,
            time=at,
            correlation_id=f"epoch-{term.epoch}",
        )

    # -- live explanation -----------------------------------------------------------------------

    async def _explain(self, call: Call, body: None) -> Explanation:
        core = self.core
        job_id = call.scope.get("job", "")
        if core is None or not self.leading or job_id not in self._tenants:
            raise RpcError(rpc.NOT_FOUND, f"job {job_id} is not known to the active scheduler")
        return Explanation(text=core.explain(job_id, self._wall()))
