"""Queries on the scheduler read model, scoped to one tenant per transaction.

As in the tenancy service: :func:`scoped` opens a read-only transaction as
:data:`~tessera_scheduler.projections.APP_ROLE` with ``tessera.tenant`` set for that transaction
only, so row-level security hides every other tenant's jobs whatever the SQL says. The
platform-wide tables (nodes, priority classes, election) are read in the reserved tenant's scope.

Lists are cursor-paginated, newest job first: the cursor is the stream sequence of the last
``JobSubmitted`` shown, base64url-encoded.
"""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import asyncpg
import msgspec

from tessera_contracts.api import scheduler as api
from tessera_contracts.api.common import Page, PageRequest
from tessera_scheduler.projections import APP_ROLE

SCHEMA = "proj_scheduler"


class BadCursor(ValueError):
    """The ``after`` cursor was not made by this service."""


@asynccontextmanager
async def scoped(pool: asyncpg.Pool, tenant: str) -> AsyncIterator[asyncpg.Connection]:
    """A read-only transaction as the app role, seeing ``tenant``'s rows and the platform-wide tables.

    Raises:
        ValueError: ``tenant`` is the all-tenants scope ``*``.
    """
    if tenant == "*":
        raise ValueError("scoped() serves one tenant")
    async with pool.acquire() as conn, conn.transaction(readonly=True):
        await conn.execute(f"SET LOCAL ROLE {APP_ROLE}")
        await conn.execute(f"SET LOCAL search_path TO {SCHEMA}")
        await conn.execute("SELECT set_config('tessera.tenant', $1, true)", tenant)
        yield conn


def encode_cursor(seq: int) -> str:
    """An opaque cursor for the job submitted at stream sequence ``seq``."""
    return base64.urlsafe_b64encode(json.dumps([seq]).encode()).decode().rstrip("=")


def decode_cursor(cursor: str | None) -> int | None:
    """The sequence inside a cursor (None for no cursor).

    Raises:
        BadCursor: not a cursor of this service.
    """
    if cursor is None:
        return None
    try:
        key = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    except (ValueError, UnicodeDecodeError):
        raise BadCursor("invalid cursor") from None
    if not isinstance(key, list) or len(key) != 1 or type(key[0]) is not int or not 0 < key[0] < 2**63:
        raise BadCursor("invalid cursor")
    return int(key[0])


async def job_page(
    conn: asyncpg.Connection,
    tenant: str,
    page: PageRequest,
    *,
    projects: list[str] | None,
    queue: str | None,
    state: str | None,
) -> tuple[list[asyncpg.Record], str | None]:
    """One page of the tenant's jobs, newest first, narrowed by project(s), queue and state (None: any)."""
    before = decode_cursor(page.after)
    rows = await conn.fetch(
        "SELECT * FROM jobs WHERE tenant_id = $1 AND ($2::text[] IS NULL OR project = ANY($2))"
        " AND ($3::text IS NULL OR queue = $3) AND ($4::text IS NULL OR state = $4)"
        " AND ($5::bigint IS NULL OR seq < $5) ORDER BY seq DESC LIMIT $6",
        tenant,
        projects,
        queue,
        state,
        before,
        page.limit + 1,
    )
    more = len(rows) > page.limit
    rows = rows[: page.limit]
    return rows, encode_cursor(rows[-1]["seq"]) if more and rows else None


async def node_page(conn: asyncpg.Connection, page: PageRequest) -> tuple[list[asyncpg.Record], str | None]:
    """One page of the nodes, by node id (the cursor is the last id shown)."""
    after = _decode_text_cursor(page.after)
    rows = await conn.fetch(
        "SELECT * FROM nodes WHERE ($1::text IS NULL OR node > $1) ORDER BY node LIMIT $2", after, page.limit + 1
    )
    more = len(rows) > page.limit
    rows = rows[: page.limit]
    if not (more and rows):
        return rows, None
    return rows, base64.urlsafe_b64encode(json.dumps([rows[-1]["node"]]).encode()).decode().rstrip("=")


def _decode_text_cursor(cursor: str | None) -> str | None:
    if cursor is None:
        return None
    try:
        key = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    except (ValueError, UnicodeDecodeError):
        raise BadCursor("invalid cursor") from None
    if not isinstance(key, list) or len(key) != 1 or not isinstance(key[0], str) or len(key[0]) > 256:
        raise BadCursor("invalid cursor")
    if "\x00" in key[0]:
        raise BadCursor("invalid cursor")
    return key[0]


# -- row -> view ----------------------------------------------------------------------------------


def job_view(r: asyncpg.Record) -> api.JobView:
    """A ``jobs`` row as a view."""
    return api.JobView(
        tenant=r["tenant_id"],
        project=r["project"],
        queue=r["queue"],
        id=r["job_id"],
        name=r["name"],
        state=r["state"],
        priority_class=r["priority_class"],
        priority=r["priority"],
        preemptible=r["preemptible"],
        workers=r["workers"],
        gpus=r["gpus"],
        milli=r["milli"],
        gpu_memory_mib=r["gpu_memory_mib"],
        mig_profile=r["mig_profile"],
        gpu_models=msgspec.json.decode(r["gpu_models"], type=list[str]),
        gpu_model=r["gpu_model"],
        borrowed_milli=r["borrowed_milli"],
        placements=msgspec.json.decode(r["placements"], type=list[api.PlacementView]),
        reason=r["reason"],
        message=r["message"],
        preemptions=r["preemptions"],
        last_preemption=r["last_preemption"],
        outcome=r["outcome"],
        submitted_by=r["submitted_by"],
        submitted_at=r["submitted_at"],
        admitted_at=r["admitted_at"],
        placed_at=r["placed_at"],
        ended_at=r["ended_at"],
    )


def node_view(r: asyncpg.Record) -> api.NodeView:
    """A ``nodes`` row as a view."""
    return api.NodeView(
        node=r["node"],
        cluster=r["cluster"],
        region=r["region"],
        labels=json.loads(r["labels"]),
        state=r["state"],
        gpus=r["gpus"],
        gpu_models=json.loads(r["gpu_models"]),
        allocated_milli=r["allocated_milli"],
        capacity_milli=r["capacity_milli"],
        registered_at=r["registered_at"],
    )


def page(items: list[Any], cursor: str | None) -> Page[Any]:
    """A page of views."""
    return Page(items=items, next=cursor)
