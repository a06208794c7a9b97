"""Deterministic checksums of projection schemas, and the rows where two schemas differ.

A table's checksum is a multiset hash of its rows: the MD5 of each row's text form (with the
session time zone pinned to UTC) is split into two 64-bit halves, and each half is summed over
the table as an exact ``numeric``. Sums do not depend on row order, stream through the table in
one pass without sorting, and have no size limit (a single ``string_agg`` of the table would
stop at Postgres's 1 GB value limit, about 5 million audit rows). Unlike XOR, a sum does not
cancel duplicate rows. The table's digest is the MD5 of ``count:sum_high:sum_low``.

Tables whose names start with ``_`` (the runtime's checkpoint and dead-letter tables) are not
part of a projection's data.
"""

from __future__ import annotations

import hashlib

import asyncpg
import msgspec

from tessera_runtime.projector import ALL_TENANTS, quote_ident


class TableSum(msgspec.Struct, frozen=True):
    """One table's row count and checksum (32 hex digits)."""

    table: str
    rows: int
    md5: str


class RowDiff(msgspec.Struct, frozen=True):
    """Rows of one table present on one side only, as Postgres row text (at most ``limit`` each)."""

    table: str
    only_in_live: list[str]
    only_in_rebuilt: list[str]


async def tables(conn: asyncpg.Connection, schema: str) -> list[str]:
    """The projection tables of ``schema`` (not the runtime's ``_`` tables), sorted."""
    rows = await conn.fetch(
        "SELECT table_name FROM information_schema.tables"
        " WHERE table_schema = $1 AND table_type = 'BASE TABLE' AND table_name NOT LIKE '\\_%'"
        " ORDER BY table_name",
        schema,
    )
    return [r["table_name"] for r in rows]


async def table_sums(conn: asyncpg.Connection, schema: str) -> list[TableSum]:
    """Per-table checksums of ``schema``."""
    out = []
    async with conn.transaction(isolation="repeatable_read", readonly=True):
        await conn.execute("SET LOCAL TimeZone = 'UTC'")
        await conn.execute(ALL_TENANTS)
        for table in await tables(conn, schema):
            row = await conn.fetchrow(
                "SELECT count(*) AS n,"
                " coalesce(sum(('x' || substr(h, 1, 16))::bit(64)::bigint::numeric), 0) AS hi,"
                " coalesce(sum(('x' || substr(h, 17, 16))::bit(64)::bigint::numeric), 0) AS lo"
                f" FROM (SELECT md5(t::text) AS h FROM {quote_ident(schema)}.{quote_ident(table)} AS t) AS rows"
            )
            digest = hashlib.md5(f"{row['n']}:{row['hi']}:{row['lo']}".encode()).hexdigest()
            out.append(TableSum(table, row["n"], digest))
    return out


def combine(sums: list[TableSum]) -> str:
    """One SHA-256 (hex) over a schema's table checksums."""
    h = hashlib.sha256()
    for s in sums:
        h.update(f"{s.table}\t{s.rows}\t{s.md5}\n".encode())
    return h.hexdigest()


async def row_diff(conn: asyncpg.Connection, live: str, rebuilt: str, table: str, limit: int = 20) -> RowDiff:
    """Rows of ``table`` only in schema ``live`` and only in schema ``rebuilt`` (multiset difference)."""
    a = f"{quote_ident(live)}.{quote_ident(table)}"
    b = f"{quote_ident(rebuilt)}.{quote_ident(table)}"
    async with conn.transaction(readonly=True):
        await conn.execute("SET LOCAL TimeZone = 'UTC'")
        await conn.execute(ALL_TENANTS)
        only_a = await conn.fetch(
            f"SELECT r FROM (SELECT t::text AS r FROM {a} t EXCEPT ALL SELECT t::text FROM {b} t) d"
            f' ORDER BY r COLLATE "C" LIMIT {int(limit)}'
        )
        only_b = await conn.fetch(
            f"SELECT r FROM (SELECT t::text AS r FROM {b} t EXCEPT ALL SELECT t::text FROM {a} t) d"
            f' ORDER BY r COLLATE "C" LIMIT {int(limit)}'
        )
    return RowDiff(table, [r["r"] for r in only_a], [r["r"] for r in only_b])
