"""The audit index: one row per event of the log, for "who changed what, when" queries.

It reads attributes only (never payloads), so it indexes events of every type, including types
this build does not know. Rows are written with ``COPY``, which is why it is also the projection
the event-log benchmark measures.
"""

from __future__ import annotations

from collections.abc import Sequence

import asyncpg

from tessera_contracts.subjects import EVENT_ROOT
from tessera_runtime.eventlog import StoredEvent

COLUMNS = (
    "seq",
    "event_id",
    "type",
    "subject",
    "tenant",
    "source",
    "time",
    "correlation_id",
    "causation_id",
)


class AuditIndex:
    """Projection ``audit``: table ``events``, one row per event.

    Columns: sequence, event id, type, subject, tenant, source, time, correlation and causation ids.
    """

    name = "audit"
    version = 1
    subjects: tuple[str, ...] = (f"{EVENT_ROOT}.>",)
    ddl = """
    CREATE TABLE events (
        seq bigint PRIMARY KEY,
        event_id text NOT NULL,
        type text NOT NULL,
        subject text NOT NULL,
        tenant text NOT NULL,
        source text NOT NULL,
        time timestamptz NOT NULL,
        correlation_id text NOT NULL,
        causation_id text
    );
    CREATE INDEX events_tenant_time ON events (tenant, time);
    CREATE INDEX events_correlation ON events (correlation_id);
    """

    async def apply(self, conn: asyncpg.Connection, events: Sequence[StoredEvent]) -> None:
        """Insert one row per event (``COPY``; the batch is new, so no conflicts arise)."""
        await conn.copy_records_to_table(
            "events",
            records=[
                (
                    e.seq,
                    e.envelope.id,
                    e.envelope.type,
                    e.subject,
                    e.envelope.tenant,
                    e.envelope.source,
                    e.envelope.time,
                    e.envelope.correlationid,
                    e.envelope.causationid,
                )
                for e in events
            ],
            columns=COLUMNS,
        )


AUDIT = AuditIndex()
