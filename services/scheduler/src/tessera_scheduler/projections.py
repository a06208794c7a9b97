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
policy for :data:`APP_ROLE` and a ``runtime_all_tenants`` policy for the projector's role.
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
from tessera_scheduler import summaries

APP_ROLE = "tessera_app"
TENANT_OWNED = ("jobs", "job_history", "projects")
PLATFORM_WIDE = ("nodes", "priority_classes", "election")
TERMINAL = ("succeeded", "failed", "cancelled")
WAITING = ("pending", "preempted")
HOLDING = ("admitted", "placed", "running")
"""States in which a job holds quota (and, once placed, devices)."""

_POLICY = """
ALTER TABLE {t} ENABLE ROW LEVEL SECURITY;
ALTER TABLE {t} FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON {t} TO tessera_app
    USING (tenant_id = current_setting('tessera.tenant', true));
DO $$ BEGIN
    EXECUTE format(
        'CREATE POLICY runtime_all_tenants ON {t} TO %I'
        ' USING (current_setting(''tessera.tenant'', true) = ''*'')'
        ' WITH CHECK (current_setting(''tessera.tenant'', true) = ''*'')',
        current_user
    );
END $$;
"""

DDL = (
    """
DO $$ BEGIN
    CREATE ROLE tessera_app NOLOGIN NOSUPERUSER NOBYPASSRLS NOINHERIT;
EXCEPTION WHEN duplicate_object THEN NULL;
END $$;

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
"""
    + "".join(_POLICY.format(t=t) for t in TENANT_OWNED)
    + r"""
DO $$ DECLARE t text; BEGIN
    EXECUTE format('GRANT USAGE ON SCHEMA %I TO tessera_app', current_schema());
    FOR t IN SELECT tablename FROM pg_tables WHERE schemaname = current_schema() AND tablename NOT LIKE '\_%' LOOP
        EXECUTE format('GRANT SELECT ON %I.%I TO tessera_app', current_schema(), t);
    END LOOP;
END $$;
"""
)

_json = msgspec.json.Encoder()


def _jsonb(value: Any) -> str:
    return _json.encode(value).decode()


class _Batch:
    """The state one batch's apply carries from event to event: the elected epoch."""

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch


async def _job_state(conn: asyncpg.Connection, job_id: str) -> tuple[str, Any] | None:
    row = await conn.fetchrow("SELECT state, placements FROM jobs WHERE job_id = $1", job_id)
    return None if row is None else (row["state"], row["placements"])


async def _history(conn: asyncpg.Connection, e: StoredEvent, job_id: str, data: Event) -> None:
    await conn.execute(
        "INSERT INTO job_history VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING",
        e.envelope.tenant,
        job_id,
        e.seq,
        e.envelope.time,
        summaries.short_type(e.envelope.type),
        summaries.summary(data),
    )


async def _release(conn: asyncpg.Connection, placements_json: Any) -> None:
    """Give back the milli-GPU a job's placements held on their nodes."""
    for p in msgspec.json.decode(placements_json or "[]"):
        milli = sum(int(d.get("milli", 0)) for d in p.get("devices", []))
        await conn.execute(
            "UPDATE nodes SET allocated_milli = greatest(0, allocated_milli - $2) WHERE node = $1", p.get("node"), milli
        )


async def _submitted(conn: asyncpg.Connection, e: StoredEvent, data: ev.JobSubmitted) -> bool:
    w = data.worker
    inserted = await conn.fetchval(
        "INSERT INTO jobs (tenant_id, job_id, seq, project, queue, name, state, priority_class, priority,"
        " preemptible, workers, gpus, milli, gpu_memory_mib, mig_profile, gpu_models, submitted_by, submitted_at)"
        " VALUES ($1, $2, $3, $4, $5, $6, 'pending', $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17)"
        " ON CONFLICT (job_id) DO NOTHING RETURNING true",
        e.envelope.tenant,
        data.job_id,
        e.seq,
        data.project,
        data.queue,
        data.name,
        data.priority_class,
        data.priority,
        data.preemptible,
        data.workers,
        w.gpus,
        w.milli,
        w.gpu_memory_mib,
        w.mig_profile,
        _jsonb(list(w.gpu_models)),
        data.submitted_by,
        e.envelope.time,
    )
    return bool(inserted)


async def _apply_job_event(conn: asyncpg.Connection, e: StoredEvent, data: Event) -> bool:
    """Apply one job event if it fits the job's state; True when it was applied."""
    job_id = getattr(data, "job_id", "")
    current = await _job_state(conn, job_id)
    if current is None:
        return False
    state, placements = current
    at = e.envelope.time
    match data:
        case ev.JobQueued() if state in WAITING:
            await conn.execute(
                "UPDATE jobs SET reason = $2, message = $3 WHERE job_id = $1", job_id, data.reason, data.message
            )
        case ev.JobAdmitted() if state in WAITING:
            await conn.execute(
                "UPDATE jobs SET state = 'admitted', gpu_model = $2, borrowed_milli = $3, admitted_at = $4,"
                " reason = NULL, message = NULL WHERE job_id = $1",
                job_id,
                data.gpu_model,
                data.borrowed_milli,
                at,
            )
        case ev.JobPlaced() if state == "admitted":
            nodes = sorted({p.node for p in data.placements})
            ready = await conn.fetchval("SELECT count(*) FROM nodes WHERE node = ANY($1) AND state = 'ready'", nodes)
            if ready != len(nodes):
                return False  # the core ignores a placement on a node it does not know or has lost
            await conn.execute(
                "UPDATE jobs SET state = 'placed', gpu_model = $2, placements = $3, placed_at = $4 WHERE job_id = $1",
                job_id,
                data.gpu_model,
                _jsonb(data.placements),
                at,
            )
            for p in data.placements:
                await conn.execute(
                    "UPDATE nodes SET allocated_milli = allocated_milli + $2 WHERE node = $1",
                    p.node,
                    sum(d.milli for d in p.devices),
                )
        case ev.JobStarted() if state == "placed":
            await conn.execute("UPDATE jobs SET state = 'running' WHERE job_id = $1", job_id)
        case ev.JobPreempted() if state in HOLDING:
            await _release(conn, placements)
            await conn.execute(
                "UPDATE jobs SET state = 'preempted', placements = '[]', borrowed_milli = 0, preemptions = $2,"
                " last_preemption = $3, reason = NULL, message = $4, admitted_at = NULL, placed_at = NULL"
                " WHERE job_id = $1",
                job_id,
                data.preemptions,
                data.reason,
                data.message or None,
            )
        case ev.JobFinished() if state in ("placed", "running"):
            await _release(conn, placements)
            await conn.execute(
                "UPDATE jobs SET state = $2, outcome = $3, ended_at = $4, message = $5, placements = '[]'"
                " WHERE job_id = $1",
                job_id,
                "succeeded" if data.outcome == "succeeded" else "failed",
                data.outcome,
                at,
                data.message or None,
            )
        case ev.JobCancelled() if state not in TERMINAL:
            await _release(conn, placements)
            await conn.execute(
                "UPDATE jobs SET state = 'cancelled', ended_at = $2, reason = NULL, message = $3, placements = '[]'"
                " WHERE job_id = $1",
                job_id,
                at,
                f"cancelled by {data.by}" + (f": {data.reason}" if data.reason else ""),
            )
        case _:
            return False
    return True


async def _apply_node_event(conn: asyncpg.Connection, e: StoredEvent, data: Event) -> None:
    match data:
        case ev.NodeRegistered():
            devices = _jsonb(data.devices)
            row = await conn.fetchrow("SELECT allocated_milli, devices FROM nodes WHERE node = $1", data.node)
            if row is not None and row["allocated_milli"] > 0:
                # A busy node keeps its inventory (as in the core): it may only come back to life.
                if msgspec.json.decode(row["devices"]) == msgspec.json.decode(devices):
                    await conn.execute("UPDATE nodes SET state = 'ready' WHERE node = $1", data.node)
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


async def _apply_one(conn: asyncpg.Connection, batch: _Batch, e: StoredEvent) -> None:
    try:
        data = codec.payload(e.envelope)
    except UnknownEventType:
        return  # a newer writer's event type: nothing here depends on it
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
            if await _submitted(conn, e, data):
                await _history(conn, e, data.job_id, data)
        case (
            ev.JobQueued()
            | ev.JobAdmitted()
            | ev.JobPlaced()
            | ev.JobStarted()
            | ev.JobPreempted()
            | ev.JobFinished()
            | ev.JobCancelled()
        ):
            if await _apply_job_event(conn, e, data):
                await _history(conn, e, data.job_id, data)
        case ev.NodeRegistered() | ev.NodeLost():
            await _apply_node_event(conn, e, data)
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
        for e in events:
            await _apply_one(conn, batch, e)


SCHEDULER = SchedulerProjection()
