"""Replay: rebuild a projection from the log and swap it in, or verify the live one against a rebuild.

- :func:`rebuild` builds ``proj_<name>__build`` from sequence 1, catches up to the head while
  holding the live projection's advisory lock (so the live projector pauses for the last few
  events only), then swaps the schemas in one transaction. The live projector resumes on the new
  schema; its next batch skips whatever the rebuild already applied.
- :func:`verify` snapshots the live tables and their checkpoint in one repeatable-read
  transaction, rebuilds a shadow schema up to exactly that checkpoint, and compares checksums
  (:mod:`tessera_runtime.checksum`); on a difference it lists the differing rows.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg
import msgspec

from tessera_runtime import checksum
from tessera_runtime.errors import ReplayBusy
from tessera_runtime.eventlog import EventLog
from tessera_runtime.projection import Projection, schema_of
from tessera_runtime.projector import ALL_TENANTS, Projector, lock_key, quote_ident


class VerifyResult(msgspec.Struct, frozen=True, kw_only=True):
    """The outcome of :func:`verify` for one projection.

    ``position`` is the stream sequence both sides were built to; ``equal`` is whether their
    combined checksums match; ``diffs`` lists differing rows per table when they do not.
    """

    projection: str
    position: int
    live_checksum: str
    rebuilt_checksum: str
    equal: bool
    tables: list[checksum.TableSum]
    diffs: list[checksum.RowDiff]


async def _drop(conn: asyncpg.Connection, schema: str) -> None:
    await conn.execute(f"DROP SCHEMA IF EXISTS {quote_ident(schema)} CASCADE")


@asynccontextmanager
async def exclusive(pool: asyncpg.Pool, projection: Projection) -> AsyncIterator[None]:
    """Hold the projection's replay lock (a session advisory lock) for one rebuild or verify.

    Raises:
        ReplayBusy: another rebuild or verify of this projection holds it.
    """
    key = lock_key(schema_of(projection.name, "replay"))
    async with pool.acquire() as conn:
        if not await conn.fetchval("SELECT pg_try_advisory_lock($1)", key):
            raise ReplayBusy(f"a rebuild or verify of {projection.name} is already running")
        try:
            yield
        finally:
            await conn.execute("SELECT pg_advisory_unlock($1)", key)


async def rebuild(pool: asyncpg.Pool, log: EventLog, projection: Projection, batch_size: int = 5000) -> int:
    """Rebuild ``projection`` from the whole log into a fresh schema and swap it in.

    Returns the position (stream sequence) the new live schema is at.

    Raises:
        ReplayBusy: another rebuild or verify of this projection is running.
    """
    async with exclusive(pool, projection):
        return await _rebuild(pool, log, projection, batch_size)


async def _rebuild(pool: asyncpg.Pool, log: EventLog, projection: Projection, batch_size: int) -> int:
    live = schema_of(projection.name)
    build = schema_of(projection.name, "build")
    async with pool.acquire() as conn:
        await _drop(conn, build)
    builder = Projector(projection, pool, log, schema=build, batch_size=batch_size, publish_dead_letters=False)
    await builder.catch_up()
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", lock_key(live))
        position = await builder.catch_up()  # the tail appended meanwhile; live projector waits
        old = schema_of(projection.name, "old")
        await _drop(conn, old)
        exists = await conn.fetchval("SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)", live)
        if exists:
            await conn.execute(f"ALTER SCHEMA {quote_ident(live)} RENAME TO {quote_ident(old)}")
        await conn.execute(f"ALTER SCHEMA {quote_ident(build)} RENAME TO {quote_ident(live)}")
        await _drop(conn, old)
    return position


async def verify(pool: asyncpg.Pool, log: EventLog, projection: Projection, batch_size: int = 5000) -> VerifyResult:
    """Rebuild ``projection`` in a shadow schema and compare it with the live one.

    The live schema must exist (its projector has run at least once).

    Raises:
        LookupError: there is no live schema for this projection.
        ReplayBusy: another rebuild or verify of this projection is running.
    """
    async with exclusive(pool, projection):
        return await _verify(pool, log, projection, batch_size)


async def _verify(pool: asyncpg.Pool, log: EventLog, projection: Projection, batch_size: int) -> VerifyResult:
    live = schema_of(projection.name)
    snap = schema_of(projection.name, "snap")
    shadow = schema_of(projection.name, "verify")
    async with pool.acquire() as conn:
        await _drop(conn, snap)
        await _drop(conn, shadow)
        async with conn.transaction(isolation="repeatable_read"):
            await conn.execute(ALL_TENANTS)
            try:
                position = await conn.fetchval(f"SELECT position FROM {quote_ident(live)}._checkpoint")
            except asyncpg.UndefinedTableError:
                raise LookupError(f"projection {projection.name!r} has no live schema {live!r}") from None
            await conn.execute(f"CREATE SCHEMA {quote_ident(snap)}")
            for table in await checksum.tables(conn, live):
                await conn.execute(
                    f"CREATE TABLE {quote_ident(snap)}.{quote_ident(table)} AS"
                    f" SELECT * FROM {quote_ident(live)}.{quote_ident(table)}"
                )
    try:
        shadow_projector = Projector(
            projection, pool, log, schema=shadow, batch_size=batch_size, publish_dead_letters=False
        )
        await shadow_projector.catch_up(until_seq=position)
        async with pool.acquire() as conn:
            live_sums = await checksum.table_sums(conn, snap)
            shadow_sums = await checksum.table_sums(conn, shadow)
            live_sum, shadow_sum = checksum.combine(live_sums), checksum.combine(shadow_sums)
            diffs = []
            if live_sum != shadow_sum:
                live_by_name = {s.table: s for s in live_sums}
                shadow_by_name = {s.table: s for s in shadow_sums}
                for table in sorted(set(live_by_name) | set(shadow_by_name)):
                    if live_by_name.get(table) == shadow_by_name.get(table):
                        continue
                    if table in live_by_name and table in shadow_by_name:
                        diffs.append(await checksum.row_diff(conn, snap, shadow, table))
                    else:
                        side = "live" if table in live_by_name else "rebuilt"
                        diffs.append(checksum.RowDiff(table, [f"<table only in {side}>"], []))
    finally:
        async with pool.acquire() as conn:
            await _drop(conn, snap)
            await _drop(conn, shadow)
    return VerifyResult(
        projection=projection.name,
        position=position,
        live_checksum=live_sum,
        rebuilt_checksum=shadow_sum,
        equal=live_sum == shadow_sum,
        tables=live_sums,
        diffs=diffs,
    )
