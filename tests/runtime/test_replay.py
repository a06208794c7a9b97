from __future__ import annotations

import asyncio

import asyncpg
import pytest

from tessera_runtime import checksum, replay
from tessera_runtime.audit import AUDIT
from tessera_runtime.errors import ReplayBusy
from tessera_runtime.eventlog import EventLog
from tessera_runtime.projector import Projector
from tessera_runtime.testing import SAMPLE_TOTALS, sample_event, sample_ref


async def seed(log: EventLog, aggregates: int = 20, per: int = 5) -> None:
    for i in range(aggregates):
        ref = sample_ref(i)
        await log.append(ref.subject, [sample_event(ref, i * 10 + k, seq_hint=k) for k in range(per)], 0)


async def test_verify_is_equal_after_a_rebuild_and_unequal_after_a_tampered_row(
    log: EventLog, pool: asyncpg.Pool
) -> None:
    await seed(log)
    await Projector(SAMPLE_TOTALS, pool, log).catch_up()
    result = await replay.verify(pool, log, SAMPLE_TOTALS)
    assert result.equal and result.position == 100 and result.diffs == []

    await pool.execute(
        "UPDATE proj_sample_totals.totals SET total = total + 1 WHERE aggregate = $1", sample_ref(3).subject
    )
    tampered = await replay.verify(pool, log, SAMPLE_TOTALS)
    assert not tampered.equal
    assert tampered.live_checksum != tampered.rebuilt_checksum
    [diff] = tampered.diffs
    assert diff.table == "totals"
    assert diff.only_in_live == [f"({sample_ref(3).subject},5,161)"]
    assert diff.only_in_rebuilt == [f"({sample_ref(3).subject},5,160)"]

    # A deleted row and an extra row are differences too.
    await pool.execute("DELETE FROM proj_sample_totals.totals WHERE aggregate = $1", sample_ref(4).subject)
    assert not (await replay.verify(pool, log, SAMPLE_TOTALS)).equal

    assert await replay.rebuild(pool, log, SAMPLE_TOTALS) == 100
    after = await replay.verify(pool, log, SAMPLE_TOTALS)
    assert after.equal and after.live_checksum == result.live_checksum
    # Shadow and snapshot schemas are cleaned up.
    leftovers = await pool.fetch("SELECT nspname FROM pg_namespace WHERE nspname LIKE 'proj_sample_totals__%'")
    assert leftovers == []


async def test_verify_compares_at_the_live_checkpoint_while_the_log_moves_on(log: EventLog, pool: asyncpg.Pool) -> None:
    await seed(log)
    await Projector(AUDIT, pool, log).catch_up()
    # Events appended after the live projection's checkpoint are not in the comparison.
    ref = sample_ref(99)
    await log.append(ref.subject, [sample_event(ref, 1)], 0)
    result = await replay.verify(pool, log, AUDIT)
    assert result.equal and result.position == 100
    assert result.tables[0].rows == 100


async def test_rebuild_swaps_while_the_live_projector_runs(log: EventLog, pool: asyncpg.Pool) -> None:
    await seed(log, aggregates=50, per=10)
    stop = asyncio.Event()
    live = Projector(SAMPLE_TOTALS, pool, log, batch_size=7)
    task = asyncio.create_task(live.run(stop))
    writer_refs = [sample_ref(1000 + i) for i in range(100)]

    async def keep_writing() -> None:
        for ref in writer_refs:
            await log.append(ref.subject, [sample_event(ref, 1)], 0)

    await asyncio.gather(keep_writing(), replay.rebuild(pool, log, SAMPLE_TOTALS))
    head = await log.head()
    for _ in range(100):
        if live.position == head:
            break
        await asyncio.sleep(0.05)
    stop.set()
    await task
    rows = await pool.fetch("SELECT aggregate, events, total FROM proj_sample_totals.totals")
    assert sum(r["events"] for r in rows) == 600  # every event exactly once across the swap
    assert (await replay.verify(pool, log, SAMPLE_TOTALS)).equal


async def test_verify_without_a_live_projection_is_a_clear_error(log: EventLog, pool: asyncpg.Pool) -> None:
    with pytest.raises(LookupError, match="no live schema"):
        await replay.verify(pool, log, SAMPLE_TOTALS)


async def test_projector_rebuilds_when_the_projection_version_changes(log: EventLog, pool: asyncpg.Pool) -> None:
    from tessera_runtime.testing import SampleTotals

    await seed(log, aggregates=3, per=2)
    await Projector(SAMPLE_TOTALS, pool, log).catch_up()
    await pool.execute("UPDATE proj_sample_totals.totals SET total = -1")  # what an old version left

    class SampleTotalsV2(SampleTotals):
        version = 2

    stop = asyncio.Event()
    projector = Projector(SampleTotalsV2(), pool, log)
    task = asyncio.create_task(projector.run(stop))
    for _ in range(100):
        if await pool.fetchval("SELECT version FROM proj_sample_totals._checkpoint") == 2:
            break
        await asyncio.sleep(0.05)
    stop.set()
    await task
    assert await pool.fetchval("SELECT min(total) FROM proj_sample_totals.totals") >= 0


async def test_a_second_replay_of_the_same_projection_is_refused(log: EventLog, pool: asyncpg.Pool) -> None:
    await seed(log, aggregates=2, per=2)
    await Projector(SAMPLE_TOTALS, pool, log).catch_up()
    async with replay.exclusive(pool, SAMPLE_TOTALS):
        with pytest.raises(ReplayBusy):
            await replay.verify(pool, log, SAMPLE_TOTALS)
        with pytest.raises(ReplayBusy):
            await replay.rebuild(pool, log, SAMPLE_TOTALS)
    assert (await replay.verify(pool, log, SAMPLE_TOTALS)).equal


async def test_checksums_ignore_row_order_and_count_duplicates(pool: asyncpg.Pool) -> None:
    async def digest(schema: str, rows: list[int]) -> str:
        await pool.execute(f"CREATE SCHEMA {schema}; CREATE TABLE {schema}.t (a int)")
        await pool.executemany(f"INSERT INTO {schema}.t VALUES ($1)", [(r,) for r in rows])
        async with pool.acquire() as conn:
            return checksum.combine(await checksum.table_sums(conn, schema))

    assert await digest("s1", [1, 1, 2]) == await digest("s2", [2, 1, 1])
    assert await digest("s3", [1, 1, 2]) != await digest("s4", [1, 2, 2])
    assert await digest("s5", [1, 1]) != await digest("s6", [1])
