"""The scheduler's read model (schema ``proj_scheduler``), with row-level security on every tenant-owned table.

Tables:

- ``jobs`` (tenant-owned): one row per job, everything :class:`~tessera_contracts.api.scheduler.JobView`
  shows, advanced by the job's events through the lifecycle of
  :mod:`tessera_contracts.events.scheduler`;
- ``job_history`` (tenant-owned): one row per applied job event (stream sequence, time, type,
  a sentence), for ``explain``;
- ``projects`` (tenant-owned): the tenants' projects, folded from tenancy events (submits are
  checked against them);
- ``nodes`` (platform-wide): each registered node, its capacity and what is allocated on it;
- ``priority_classes`` (platform-wide): folded from tenancy events (a submit resolves its class);
- ``election`` (platform-wide, one row): the latest ``LeaderElected`` epoch seen in the log.

**Fencing.** A decision (``JobQueued``, ``JobAdmitted``, ``JobPlaced``, ``JobPreempted``,
``NodeLost``) is applied only when :func:`tessera_contracts.events.scheduler.is_current` holds for
the epoch stored in ``election`` at that point of the log, exactly as the scheduler core folds
it; a deposed leader's late decisions change nothing here. Decisions that no longer fit the job's
state (a placement for a job cancelled meanwhile) are ignored too, as the core ignores them.

Row-level security follows the tenancy projection: RLS enabled and forced, a ``tenant_isolation``
policy for :data:`~tessera_runtime.tenant_rows.APP_ROLE` and a ``runtime_all_tenants`` policy for the projector's role.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import asyncpg
import msgspec

from tessera_contracts import codec
from tessera_contracts.events import scheduler as ev
from tessera_contracts.events import tenancy as tev
from tessera_contracts.registry import Event, UnknownEventType
from tessera_runtime.eventlog import StoredEvent
from tessera_runtime.tenant_rows import isolation_ddl
from tessera_scheduler import summaries

TENANT_OWNED = ("jobs", "job_history", "projects")
PLATFORM_WIDE = ("nodes", "priority_classes", "election")
TERMINAL = ("succeeded", "failed", "cancelled")
WAITING = ("pending", "preempted")
HOLDING = ("admitted", "placed", "running")
"""States in which a job holds quota (and, once placed, devices)."""


DDL = isolation_ddl(
    """
CREATE TABLE jobs (
    tenant_id text NOT NULL,
    job_id text PRIMARY KEY,
    seq bigint NOT NULL,            -- stream sequence of JobSubmitted: the list order
    project text NOT NULL,
    queue text NOT NULL,
    name text NOT NULL,
    state text NOT NULL,
    priority_class text NOT NULL,
    priority integer NOT NULL,
    preemptible boolean NOT NULL,
    workers integer NOT NULL,
    gpus integer NOT NULL,
    milli integer,
    gpu_memory_mib integer,
    mig_profile text,
    gpu_models jsonb NOT NULL,
    gpu_model text,
    borrowed_milli integer NOT NULL DEFAULT 0,
    placements jsonb NOT NULL DEFAULT '[]',
    reason text,
    message text,
    preemptions integer NOT NULL DEFAULT 0,
    last_preemption text,
    outcome text,
    submitted_by text NOT NULL,
    submitted_at timestamptz NOT NULL,
    admitted_at timestamptz,
    placed_at timestamptz,
    ended_at timestamptz
);
CREATE UNIQUE INDEX jobs_by_tenant ON jobs (tenant_id, seq);
CREATE TABLE job_history (
    tenant_id text NOT NULL,
    job_id text NOT NULL,
    seq bigint NOT NULL,
    at timestamptz NOT NULL,
    type text NOT NULL,
    summary text NOT NULL,
    PRIMARY KEY (job_id, seq)
);
CREATE TABLE projects (
    tenant_id text NOT NULL,
    project text NOT NULL,
    PRIMARY KEY (tenant_id, project)
);
CREATE TABLE nodes (
    node text PRIMARY KEY,
    cluster text NOT NULL,
    region text NOT NULL,
    labels jsonb NOT NULL,
    state text NOT NULL,
    gpus integer NOT NULL,
    gpu_models jsonb NOT NULL,
    capacity_milli integer NOT NULL,
    allocated_milli integer NOT NULL DEFAULT 0,
    devices jsonb NOT NULL,          -- the inventory as registered (a busy node keeps it)
    registered_at timestamptz NOT NULL
);
CREATE TABLE priority_classes (
    name text PRIMARY KEY,
    value integer NOT NULL,
    preemptible boolean NOT NULL
);
CREATE TABLE election (
    singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    epoch bigint NOT NULL,
    holder text NOT NULL,
    elected_at timestamptz NOT NULL
);
""",
    TENANT_OWNED,
)

_json = msgspec.json.Encoder()


def _jsonb(value: Any) -> str:
    return _json.encode(value).decode()


JOB_COLUMNS = (
    "tenant_id",
    "job_id",
    "seq",
    "project",
    "queue",
    "name",
    "state",
    "priority_class",
    "priority",
    "preemptible",
    "workers",
    "gpus",
    "milli",
    "gpu_memory_mib",
    "mig_profile",
    "gpu_models",
    "gpu_model",
    "borrowed_milli",
    "placements",
    "reason",
    "message",
    "preemptions",
    "last_preemption",
    "outcome",
    "submitted_by",
    "submitted_at",
    "admitted_at",
    "placed_at",
    "ended_at",
)
_MUTABLE = JOB_COLUMNS[JOB_COLUMNS.index("state") :]
_INSERT_JOB = (
    f"INSERT INTO jobs ({', '.join(JOB_COLUMNS)}) VALUES ({', '.join(f'${i + 1}' for i in range(len(JOB_COLUMNS)))})"
    " ON CONFLICT (job_id) DO NOTHING"
)
_UPDATED = tuple(c for c in _MUTABLE if c not in ("submitted_by", "submitted_at"))
_UPDATE_JOB = "UPDATE jobs SET " + ", ".join(f"{c} = ${i + 2}" for i, c in enumerate(_UPDATED)) + " WHERE job_id = $1"
Row = dict[str, Any]


class _Batch:
    """One batch's work: job rows read once and written once, history rows, node allocation deltas.

    Job events are the bulk of the log (a job has five or more); applying them to rows held in
    memory and writing each touched row once per batch (``executemany``, one pipelined round trip
    per statement) keeps the read model up with the decision loop. Node and tenancy events are
    rare and written as they come, after the pending node deltas.
    """

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch
        self.jobs: dict[str, Row | None] = {}
        self.new: dict[str, None] = {}
        self.dirty: dict[str, None] = {}
        self.history: list[tuple[Any, ...]] = []
        self.node_delta: dict[str, int] = {}
        self.ready: dict[str, bool] = {}

    async def load_jobs(self, conn: asyncpg.Connection, job_ids: Sequence[str]) -> None:
        """Read the rows of the batch's jobs that exist already (one query)."""
        wanted = [j for j in dict.fromkeys(job_ids) if j not in self.jobs]
        for job_id in wanted:
            self.jobs[job_id] = None
        for r in await conn.fetch(f"SELECT {', '.join(JOB_COLUMNS)} FROM jobs WHERE job_id = ANY($1)", wanted):
            row = dict(r)
            row["placements"] = msgspec.json.decode(row["placements"])
            row["gpu_models"] = msgspec.json.decode(row["gpu_models"])
            self.jobs[row["job_id"]] = row

    async def node_ready(self, conn: asyncpg.Connection, nodes: Sequence[str]) -> bool:
        """Whether every node is registered and not lost (cached for the batch)."""
        unknown = [n for n in nodes if n not in self.ready]
        if unknown:
            for n in unknown:
                self.ready[n] = False
            for r in await conn.fetch("SELECT node, state FROM nodes WHERE node = ANY($1)", unknown):
                self.ready[r["node"]] = r["state"] == "ready"
        return all(self.ready[n] for n in nodes)

    def release(self, row: Row) -> None:
        """Give back the milli-GPU a job's placements held on their nodes."""
        for p in row["placements"]:
            node = p.get("node")
            milli = sum(int(d.get("milli", 0)) for d in p.get("devices", []))
            self.node_delta[node] = self.node_delta.get(node, 0) - milli

    async def flush_nodes(self, conn: asyncpg.Connection) -> None:
        """Write the pending node allocation deltas."""
        if self.node_delta:
            await conn.executemany(
                "UPDATE nodes SET allocated_milli = greatest(0, allocated_milli + $2) WHERE node = $1",
                [(node, delta) for node, delta in self.node_delta.items() if delta],
            )
            self.node_delta.clear()

    async def flush(self, conn: asyncpg.Connection) -> None:
        """Write every touched job row once, the history rows and the node deltas."""
        inserts = [self.jobs[j] for j in self.new]
        if inserts:
            await conn.executemany(_INSERT_JOB, [_job_values(row, JOB_COLUMNS) for row in inserts if row])
        updates = [self.jobs[j] for j in self.dirty if j not in self.new]
        if updates:
            await conn.executemany(
                _UPDATE_JOB, [(row["job_id"], *_job_values(row, _UPDATED)) for row in updates if row]
            )
        if self.history:
            await conn.executemany(
                "INSERT INTO job_history VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING", self.history
            )
        await self.flush_nodes(conn)


def _job_values(row: Row, columns: Sequence[str]) -> tuple[Any, ...]:
    return tuple(_jsonb(row[c]) if c in ("placements", "gpu_models") else row[c] for c in columns)


def _history(batch: _Batch, e: StoredEvent, job_id: str, data: Event) -> None:
    batch.history.append(
        (
            e.envelope.tenant,
            job_id,
            e.seq,
            e.envelope.time,
            summaries.short_type(e.envelope.type),
            summaries.summary(data),
        )
    )


def _submitted(batch: _Batch, e: StoredEvent, data: ev.JobSubmitted) -> bool:
    if batch.jobs.get(data.job_id) is not None:
        return False  # a job id is submitted once (the log's expected sequence 0 sees to it)
    w = data.worker
    batch.jobs[data.job_id] = {
        "tenant_id": e.envelope.tenant,
        "job_id": data.job_id,
        "seq": e.seq,
        "project": data.project,
        "queue": data.queue,
        "name": data.name,
        "state": "pending",
        "priority_class": data.priority_class,
        "priority": data.priority,
        "preemptible": data.preemptible,
        "workers": data.workers,
        "gpus": w.gpus,
        "milli": w.milli,
        "gpu_memory_mib": w.gpu_memory_mib,
        "mig_profile": w.mig_profile,
        "gpu_models": list(w.gpu_models),
        "gpu_model": None,
        "borrowed_milli": 0,
        "placements": [],
        "reason": None,
        "message": None,
        "preemptions": 0,
        "last_preemption": None,
        "outcome": None,
        "submitted_by": data.submitted_by,
        "submitted_at": e.envelope.time,
        "admitted_at": None,
        "placed_at": None,
        "ended_at": None,
    }
    batch.new[data.job_id] = None
    return True


async def _apply_job_event(conn: asyncpg.Connection, batch: _Batch, e: StoredEvent, data: Event) -> bool:
    """Apply one job event to its row if it fits the job's state; True when it was applied."""
    job_id = getattr(data, "job_id", "")
    row = batch.jobs.get(job_id)
    if row is None:
        return False
    state = row["state"]
    at = e.envelope.time
    match data:
        case ev.JobQueued() if state in WAITING:
            row.update(reason=data.reason, message=data.message)
        case ev.JobAdmitted() if state in WAITING:
            row.update(
                state="admitted",
                gpu_model=data.gpu_model,
                borrowed_milli=data.borrowed_milli,
                admitted_at=at,
                reason=None,
                message=None,
            )
        case ev.JobPlaced() if state == "admitted":
            if not await batch.node_ready(conn, sorted({p.node for p in data.placements})):
                return False  # the core ignores a placement on a node it does not know or has lost
            row.update(
                state="placed",
                gpu_model=data.gpu_model,
                placements=msgspec.to_builtins(data.placements),
                placed_at=at,
            )
            for p in data.placements:
                batch.node_delta[p.node] = batch.node_delta.get(p.node, 0) + sum(d.milli for d in p.devices)
        case ev.JobStarted() if state == "placed":
            row["state"] = "running"
        case ev.JobPreempted() if state in HOLDING:
            batch.release(row)
            row.update(
                state="preempted",
                placements=[],
                borrowed_milli=0,
                preemptions=data.preemptions,
                last_preemption=data.reason,
                reason=None,
                message=data.message or None,
                admitted_at=None,
                placed_at=None,
            )
        case ev.JobFinished() if state in ("placed", "running"):
            batch.release(row)
            row.update(
                state="succeeded" if data.outcome == "succeeded" else "failed",
                outcome=data.outcome,
                ended_at=at,
                message=data.message or None,
                placements=[],
            )
        case ev.JobCancelled() if state not in TERMINAL:
            batch.release(row)
            row.update(
                state="cancelled",
                ended_at=at,
                reason=None,
                message=f"cancelled by {data.by}" + (f": {data.reason}" if data.reason else ""),
                placements=[],
            )
        case _:
            return False
    batch.dirty[job_id] = None
    return True


async def _apply_node_event(conn: asyncpg.Connection, batch: _Batch, e: StoredEvent, data: Event) -> None:
    await batch.flush_nodes(conn)
    match data:
        case ev.NodeRegistered():
            batch.ready[data.node] = True
            devices = _jsonb(data.devices)
            row = await conn.fetchrow("SELECT allocated_milli, devices FROM nodes WHERE node = $1", data.node)
            if row is not None and row["allocated_milli"] > 0:
                # A busy node keeps its inventory (as in the core): it may only come back to life.
                if msgspec.json.decode(row["devices"]) == msgspec.json.decode(devices):
                    await conn.execute("UPDATE nodes SET state = 'ready' WHERE node = $1", data.node)
                else:
                    batch.ready.pop(data.node, None)
                return
            await conn.execute(
                "INSERT INTO nodes (node, cluster, region, labels, state, gpus, gpu_models, capacity_milli, devices,"
                " registered_at) VALUES ($1, $2, $3, $4, 'ready', $5, $6, $7, $8, $9) ON CONFLICT (node) DO UPDATE"
                " SET cluster = $2, region = $3, labels = $4, state = 'ready', gpus = $5, gpu_models = $6,"
                " capacity_milli = $7, devices = $8, registered_at = $9",
                data.node,
                data.cluster,
                data.region,
                _jsonb(data.labels),
                len(data.devices),
                _jsonb(sorted({d.model for d in data.devices})),
                1000 * len(data.devices),
                devices,
                e.envelope.time,
            )
        case ev.NodeLost():
            batch.ready[data.node] = False
            await conn.execute("UPDATE nodes SET state = 'lost' WHERE node = $1", data.node)
        case _:
            pass


async def _apply_tenancy_event(conn: asyncpg.Connection, data: Event) -> None:
    match data:
        case tev.ProjectCreated():
            await conn.execute("INSERT INTO projects VALUES ($1, $2) ON CONFLICT DO NOTHING", data.tenant, data.project)
        case tev.PriorityClassDefined():
            await conn.execute(
                "INSERT INTO priority_classes VALUES ($1, $2, $3) ON CONFLICT (name) DO UPDATE"
                " SET value = $2, preemptible = $3",
                data.name,
                data.value,
                data.preemptible,
            )
        case _:
            pass


_JOB_EVENTS = (
    ev.JobQueued,
    ev.JobAdmitted,
    ev.JobPlaced,
    ev.JobStarted,
    ev.JobPreempted,
    ev.JobFinished,
    ev.JobCancelled,
)


async def _apply_one(conn: asyncpg.Connection, batch: _Batch, e: StoredEvent, data: Event) -> None:
    if not ev.is_current(data, batch.epoch):
        return  # fenced: a deposed leader's decision
    match data:
        case ev.LeaderElected():
            batch.epoch = data.epoch
            await conn.execute(
                "INSERT INTO election VALUES (true, $1, $2, $3) ON CONFLICT (singleton) DO UPDATE"
                " SET epoch = $1, holder = $2, elected_at = $3",
                data.epoch,
                data.holder,
                e.envelope.time,
            )
        case ev.JobSubmitted():
            if _submitted(batch, e, data):
                _history(batch, e, data.job_id, data)
        case _ if isinstance(data, _JOB_EVENTS):
            if await _apply_job_event(conn, batch, e, data):
                _history(batch, e, data.job_id, data)
        case ev.NodeRegistered() | ev.NodeLost():
            await _apply_node_event(conn, batch, e, data)
        case _:
            await _apply_tenancy_event(conn, data)


class SchedulerProjection:
    """Projection ``scheduler``: jobs, their history, nodes, and the tenancy facts submits are checked against."""

    name = "scheduler"
    version = 1
    subjects: tuple[str, ...] = ("ev.scheduler.>", "ev.tenancy.>")
    ddl = DDL

    async def apply(self, conn: asyncpg.Connection, events: Sequence[StoredEvent]) -> None:
        """Apply events in order; decisions are fenced by the epoch stored in ``election``."""
        epoch = await conn.fetchval("SELECT epoch FROM election")
        batch = _Batch(int(epoch or 0))
        decoded: list[tuple[StoredEvent, Event]] = []
        for e in events:
            try:
                decoded.append((e, codec.payload(e.envelope)))
            except UnknownEventType:
                continue  # a newer writer's event type: nothing here depends on it
        await batch.load_jobs(conn, [d.job_id for _e, d in decoded if isinstance(d, (ev.JobSubmitted, *_JOB_EVENTS))])
        for e, data in decoded:
            await _apply_one(conn, batch, e, data)
        await batch.flush(conn)


SCHEDULER = SchedulerProjection()
