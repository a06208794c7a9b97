"""Test support shared by every component's tests: a sample event type and projection.

``SampleRecorded`` events and the ``sample_totals`` projection exercise the runtime without any
service: the projection keeps, per aggregate, the count and sum of ``n``, and rejects negative
``n`` (a deterministic "poison" event for dead-letter tests).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import asyncpg

from tessera_contracts import codec
from tessera_contracts.envelope import Envelope, envelope
from tessera_contracts.registry import Event, event_type
from tessera_contracts.subjects import AggregateRef
from tessera_runtime.eventlog import StoredEvent

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


@event_type("tessera.testing.sample.recorded.v1")
class SampleRecorded(Event, frozen=True, kw_only=True):
    """A number recorded on a sample aggregate; ``note`` pads the payload to a chosen size."""

    n: int
    note: str = ""


def sample_ref(i: int, tenant: str = "acme") -> AggregateRef:
    """The ``i``-th sample aggregate of ``tenant``: ``ev.testing.<tenant>.sample.s<i>``."""
    return AggregateRef("testing", tenant, "sample", f"s{i}")


def sample_event(
    ref: AggregateRef, n: int, *, note: str = "", seq_hint: int = 0, event_id: str | None = None
) -> Envelope:
    """An envelope holding ``SampleRecorded(n)`` for aggregate ``ref``.

    Its time is ``seq_hint`` seconds after 2026-01-01 UTC, so that tests are deterministic.
    """
    return envelope(
        SampleRecorded(n=n, note=note),
        subject=ref.subject,
        source="tessera/testing",
        tenant=ref.tenant,
        time=EPOCH + timedelta(seconds=seq_hint),
        correlation_id=f"corr-{ref.id}",
        event_id=event_id,
    )


class SampleTotals:
    """Projection ``sample_totals``: ``totals(aggregate, events, total)`` over sample events."""

    name = "sample_totals"
    version = 1
    subjects: tuple[str, ...] = ("ev.testing.>",)
    ddl = """
    CREATE TABLE totals (
        aggregate text PRIMARY KEY,
        events bigint NOT NULL,
        total bigint NOT NULL
    );
    """

    async def apply(self, conn: asyncpg.Connection, events: Sequence[StoredEvent]) -> None:
        """Add each event's ``n`` to its aggregate's row.

        Raises:
            ValueError: an event has a negative ``n`` (the poison case).
        """
        rows = []
        for e in events:
            data = codec.payload(e.envelope)
            assert isinstance(data, SampleRecorded)
            if data.n < 0:
                raise ValueError(f"negative sample {data.n} at sequence {e.seq}")
            rows.append((e.subject, data.n))
        await conn.executemany(
            "INSERT INTO totals AS t (aggregate, events, total) VALUES ($1, 1, $2)"
            " ON CONFLICT (aggregate) DO UPDATE SET events = t.events + 1, total = t.total + $2",
            rows,
        )


SAMPLE_TOTALS = SampleTotals()
