"""Queries on the scheduler read model, scoped to one tenant per transaction.

As in the tenancy service: :func:`scoped` opens a read-only transaction as
:data:`~tessera_runtime.tenant_rows.APP_ROLE` with ``tessera.tenant`` set for that transaction
only, so row-level security hides every other tenant's jobs whatever the SQL says. The
platform-wide tables (nodes, priority classes, election) are read in the reserved tenant's scope.

Lists are cursor-paginated, newest job first: the cursor is the stream sequence of the last
``JobSubmitted`` shown, base64url-encoded.
"""

from __future__ import annotations

import json
from contextlib import AbstractAsyncContextManager
from typing import Any

import asyncpg
import msgspec

from tessera_contracts.api import scheduler as api
from tessera_contracts.api.common import Page, PageRequest
from tessera_runtime import tenant_rows
from tessera_runtime.tenant_rows import decode_cursor, encode_cursor

SCHEMA = "proj_scheduler"


def scoped(pool: asyncpg.Pool, tenant: str) -> AbstractAsyncContextManager[asyncpg.Connection]:
    """A read-only transaction as the app role, seeing ``tenant``'s rows and the platform-wide tables.

    Raises:
        ValueError: ``tenant`` is the all-tenants scope ``*``.
    """
    return tenant_rows.scoped(pool, SCHEMA, tenant)


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
    after = decode_cursor(page.after, (int,))
    before = None if after is None else after[0]
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
    return rows, encode_cursor([rows[-1]["seq"]]) if more and rows else None


async def node_page(conn: asyncpg.Connection, page: PageRequest) -> tuple[list[asyncpg.Record], str | None]:
    """One page of the nodes, by node id (the cursor is the last id shown)."""
    after = decode_cursor(page.after, (str,))
    rows = await conn.fetch(
        "SELECT * FROM nodes WHERE ($1::text IS NULL OR node > $1) ORDER BY node LIMIT $2",
        None if after is None else after[0],
        page.limit + 1,
    )
    more = len(rows) > page.limit
    rows = rows[: page.limit]
    return rows, encode_cursor([rows[-1]["node"]]) if more and rows else None


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
