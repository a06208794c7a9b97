from __future__ import annotations

import asyncio
import json

import asyncpg
import pytest

from tessera_contracts.streams import DEAD_LETTERS
from tessera_runtime import replay
from tessera_runtime.audit import AUDIT
from tessera_runtime.eventlog import AppendRequest, EventLog
from tessera_runtime.jetstream import Delivered, PullReader
from tessera_runtime.projector import ProjectionAhead, Projector
from tessera_runtime.testing import SAMPLE_TOTALS, sample_event, sample_ref


async def totals(pool: asyncpg.Pool) -> dict[str, tuple[int, int]]:
    rows = await pool.fetch("SELECT aggregate, events, total FROM proj_sample_totals.totals")
    return {r["aggregate"]: (r["events"], r["total"]) for r in rows}


async def test_applies_batches_and_checkpoints_in_postgres(log: EventLog, pool: asyncpg.Pool) -> None:
    a, b = sample_ref(1), sample_ref(2)
    await log.append(a.subject, [sample_event(a, n) for n in (1, 2, 3)], 0)
    await log.append(b.subject, [sample_event(b, 10)], 0)
    projector = Projector(SAMPLE_TOTALS, pool, log, batch_size=2)
    assert await projector.catch_up() == 4
    assert await totals(pool) == {a.subject: (3, 6), b.subject: (1, 10)}
    assert await pool.fetchval("SELECT position FROM proj_sample_totals._checkpoint") == 4


async def test_redelivered_events_are_skipped_after_a_crash_between_commit_and_anything_else(
    log: EventLog, pool: asyncpg.Pool
) -> None:
    a = sample_ref(1)
    await log.append(a.subject, [sample_event(a, n) for n in (1, 2, 3)], 0)
    first = Projector(SAMPLE_TOTALS, pool, log)
    await first.catch_up()
    # A new process (in-memory position 0, as after a crash right after the commit) is handed
    # the same messages again, e.g. by a consumer that restarted from the beginning.
    restarted = Projector(SAMPLE_TOTALS, pool, log)
    async with log.reader(SAMPLE_TOTALS.subjects, start_seq=1) as reader:
        msgs = await reader.fetch(100, timeout_s=2)
    assert len(msgs) == 3
    await restarted.apply_batch(msgs)
    await restarted.apply_batch(msgs[1:])
    assert await totals(pool) == {a.subject: (3, 6)}
    assert restarted.position == 3
    # New events after the redelivered ones still apply, once.
    await log.append(a.subject, [sample_event(a, 4)], 3)
    await restarted.catch_up()
    assert await totals(pool) == {a.subject: (4, 10)}


async def test_poison_events_go_to_the_dead_letter_stream_and_later_events_still_apply(
    log: EventLog, pool: asyncpg.Pool
) -> None:
    a = sample_ref(1)
    await log.append(a.subject, [sample_event(a, 1)], 0)
    await log.append(a.subject, [sample_event(a, -5)], 1)  # apply() rejects it: poison
    await log.js.publish(a.subject, b"{not json")  # not even an envelope
    await log.append(a.subject, [sample_event(a, 2), sample_event(a, 3)], None)
    projector = Projector(SAMPLE_TOTALS, pool, log)
    assert await projector.catch_up() == 5
    assert await totals(pool) == {a.subject: (3, 6)}
    assert projector.dead_lettered == 2
    rows = await pool.fetch(
        "SELECT stream_sequence, event_type, error, attempts FROM proj_sample_totals._dead_letters"
        " ORDER BY stream_sequence"
    )
    assert [r["stream_sequence"] for r in rows] == [2, 3]
    assert rows[0]["event_type"] == "tessera.testing.sample.recorded.v1"
    assert "negative sample -5" in rows[0]["error"]
    assert rows[0]["attempts"] == 3
    assert rows[1]["event_type"] is None and "envelope" in rows[1]["error"]
    # The dead-letter stream has both, with the original bytes and the error.
    async with PullReader(log.nc, DEAD_LETTERS.name, ("dlq.>",), start_seq=1) as reader:
        dead = await reader.fetch(10, timeout_s=2)
    assert [m.subject for m in dead] == ["dlq.sample_totals", "dlq.sample_totals"]
    records = [json.loads(m.data) for m in dead]
    assert [r["stream_sequence"] for r in records] == [2, 3]
    assert "negative sample" in records[0]["error"]


async def test_a_failing_batch_is_retried_event_by_event(log: EventLog, pool: asyncpg.Pool) -> None:
    refs = [sample_ref(i) for i in range(5)]
    for i, r in enumerate(refs):
        await log.append(r.subject, [sample_event(r, -1 if i == 2 else i)], 0)
    projector = Projector(SAMPLE_TOTALS, pool, log, batch_size=100)
    await projector.catch_up()
    # Only the poison event is missing; its batch-mates were applied once each.
    assert await totals(pool) == {r.subject: (1, i) for i, r in enumerate(refs) if i != 2}


async def test_checkpoint_and_rows_commit_together(log: EventLog, pool: asyncpg.Pool) -> None:
    class CrashesBeforeCheckpoint(Projector):
        crashes = 1

        async def _store_checkpoint(self, conn: asyncpg.Connection, position: int) -> None:
            if self.crashes:
                self.crashes -= 1
                raise OSError("connection lost between the rows and the checkpoint")
            await super()._store_checkpoint(conn, position)

    a = sample_ref(1)
    await log.append(a.subject, [sample_event(a, n) for n in (1, 2, 3)], 0)
    projector = CrashesBeforeCheckpoint(SAMPLE_TOTALS, pool, log)
    with pytest.raises(OSError, match="between the rows"):
        await projector.catch_up()
    # The rows written before the failure rolled back with it.
    assert await totals(pool) == {}
    assert await pool.fetchval("SELECT position FROM proj_sample_totals._checkpoint") == 0
    assert await projector.catch_up() == 3
    assert await totals(pool) == {a.subject: (3, 6)}


async def test_a_dead_letter_is_published_and_counted_once_across_a_retry(log: EventLog, pool: asyncpg.Pool) -> None:
    class FailsAfterPublishing(Projector):
        failures = 1

        async def _dead_letter(self, conn: asyncpg.Connection, msg: Delivered, error: str, attempts: int) -> None:
            await super()._dead_letter(conn, msg, error, attempts)
            if self.failures:
                self.failures -= 1
                raise OSError("crashed after publishing the dead letter")

    a = sample_ref(1)
    await log.append(a.subject, [sample_event(a, -1), sample_event(a, 5)], 0)
    projector = FailsAfterPublishing(SAMPLE_TOTALS, pool, log)
    with pytest.raises(OSError):
        await projector.catch_up()
    assert await projector.catch_up() == 2
    assert projector.dead_lettered == 1
    assert await totals(pool) == {a.subject: (1, 5)}
    info = await log.js.stream_info(DEAD_LETTERS.name)
    assert info.state.messages == 1


async def test_large_events_are_never_skipped(log: EventLog, pool: asyncpg.Pool) -> None:
    """Batches of big events must not overrun the client (a slow-consumer cut-off loses messages)."""
    refs = [sample_ref(i) for i in range(40)]
    note = "x" * 900_000  # 40 x 4 = 160 events of 900 KB: 144 MB, over the client's 64 MB pending limit
    for k in range(4):
        await log.append_many([AppendRequest(r.subject, [sample_event(r, k, note=note)], None) for r in refs])
    projector = Projector(AUDIT, pool, log, batch_size=1000)
    assert await projector.catch_up() == 160
    assert await pool.fetchval("SELECT count(*) FROM proj_audit.events") == 160
    assert await replay.rebuild(pool, log, AUDIT) == 160
    assert await pool.fetchval("SELECT count(*) FROM proj_audit.events") == 160


async def test_a_checkpoint_past_the_end_of_the_log_stops_the_projector(log: EventLog, pool: asyncpg.Pool) -> None:
    a = sample_ref(1)
    await log.append(a.subject, [sample_event(a, 1)], 0)
    await Projector(SAMPLE_TOTALS, pool, log).catch_up()
    await pool.execute("UPDATE proj_sample_totals._checkpoint SET position = 99")  # as if the stream was recreated
    with pytest.raises(ProjectionAhead, match="log ends at 1"):
        await Projector(SAMPLE_TOTALS, pool, log).run(asyncio.Event())
