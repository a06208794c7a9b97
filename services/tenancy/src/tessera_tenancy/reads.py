"""Queries on the tenancy read model, scoped to one tenant per transaction.

:func:`scoped` opens a read-only transaction that switches to
:data:`~tessera_runtime.tenant_rows.APP_ROLE` (neither owner nor superuser, no write grants) and
sets ``tessera.tenant`` for that transaction only; row-level security then hides every other
tenant's rows, whatever the SQL says, and the app role has no policy that would widen it.

:func:`platform_wide` is the deliberate exception, for the few reads that must cross tenants —
checking a presented API key (before any tenant is known) and a platform admin's list of all
tenants: it stays the owning role with the runtime's all-tenants scope. Only code that names it
gets it.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from decimal import Decimal
from typing import Any

import asyncpg
import msgspec

from tessera_contracts.api import tenancy as api
from tessera_contracts.api.common import Page, PageRequest
from tessera_contracts.rbac import RoleBinding
from tessera_runtime import tenant_rows
from tessera_runtime.tenant_rows import ALL, decode_cursor, encode_cursor

SCHEMA = "proj_tenancy"


def scoped(pool: asyncpg.Pool, tenant: str) -> AbstractAsyncContextManager[asyncpg.Connection]:
    """A read-only transaction as the app role, seeing ``tenant``'s rows and platform-wide tables.

    Raises:
        ValueError: ``tenant`` is the all-tenants scope (use :func:`platform_wide`).
    """
    return tenant_rows.scoped(pool, SCHEMA, tenant)


@asynccontextmanager
async def platform_wide(pool: asyncpg.Pool) -> AsyncIterator[asyncpg.Connection]:
    """A read-only transaction over every tenant's rows (see the module docstring for who may)."""
    async with pool.acquire() as conn, conn.transaction(readonly=True):
        await conn.execute(f"SET LOCAL search_path TO {SCHEMA}")
        await conn.execute("SELECT set_config('tessera.tenant', $1, true)", ALL)
        yield conn


async def page_of(
    conn: asyncpg.Connection, sql: str, key_columns: tuple[str, ...], page: PageRequest, *args: Any
) -> tuple[list[asyncpg.Record], str | None]:
    """Run ``sql`` (a SELECT with ``{after}`` where the cursor condition goes) one page at a time.

    Rows are ordered by ``key_columns``; returns the rows and the next cursor.
    """
    after = decode_cursor(page.after, (str,) * len(key_columns))
    params = list(args)
    if after is None:
        condition = "true"
    else:
        placeholders = ", ".join(f"${len(params) + i + 1}" for i in range(len(after)))
        condition = f"({', '.join(key_columns)}) > ({placeholders})"
        params += after
    query = sql.format(after=condition) + f" ORDER BY {', '.join(key_columns)} LIMIT {page.limit + 1}"
    rows = await conn.fetch(query, *params)
    more = len(rows) > page.limit
    rows = rows[: page.limit]
    cursor = encode_cursor([rows[-1][c] for c in key_columns]) if more and rows else None
    return rows, cursor


# -- row → view -----------------------------------------------------------------------------------


def tenant_view(r: asyncpg.Record) -> api.TenantView:
    """A ``tenants`` row as a view."""
    return api.TenantView(tenant=r["tenant_id"], display_name=r["display_name"], created_at=r["created_at"])


def project_view(r: asyncpg.Record) -> api.ProjectView:
    """A ``projects`` row as a view."""
    return api.ProjectView(
        tenant=r["tenant_id"], project=r["project"], display_name=r["display_name"], created_at=r["created_at"]
    )


def key_view(r: asyncpg.Record) -> api.KeyView:
    """An ``api_keys`` row as a view (never the digest)."""
    return api.KeyView(
        tenant=r["tenant_id"],
        key_id=r["key_id"],
        user_id=r["principal_id"],
        name=r["name"],
        prefix=r["prefix"],
        created_at=r["created_at"],
        expires_at=r["expires_at"],
        revoked_at=r["revoked_at"],
        last_used_at=r["last_used_at"],
    )


def quota_view(r: asyncpg.Record) -> api.QuotaView:
    """A ``quotas`` row as a view."""
    budget = r["monthly_gpu_hour_budget"]
    return api.QuotaView(
        tenant=r["tenant_id"],
        project=r["project"] or None,
        cohort=r["cohort"],
        gpus=msgspec.json.decode(r["gpus"], type=list[api.GpuQuotaView]),
        monthly_gpu_hour_budget=Decimal(budget) if budget is not None else None,
        max_concurrent_jobs=r["max_concurrent_jobs"],
        fair_share_weight=r["fair_share_weight"],
        updated_at=r["updated_at"],
    )


async def roles_of(conn: asyncpg.Connection, principal_ids: list[str]) -> dict[str, list[RoleBinding]]:
    """Role bindings of the given principals."""
    rows = await conn.fetch(
        "SELECT principal_id, tenant_id, role, project FROM role_bindings WHERE principal_id = ANY($1)"
        " ORDER BY principal_id, role, project",
        principal_ids,
    )
    out: dict[str, list[RoleBinding]] = {p: [] for p in principal_ids}
    for r in rows:
        out[r["principal_id"]].append(RoleBinding(role=r["role"], tenant=r["tenant_id"], project=r["project"] or None))
    return out


async def users(conn: asyncpg.Connection, rows: list[asyncpg.Record]) -> list[api.UserView]:
    """``principals`` rows as views, with their roles."""
    roles = await roles_of(conn, [r["id"] for r in rows])
    return [
        api.UserView(
            tenant=r["tenant_id"],
            id=r["id"],
            name=r["name"],
            kind=r["kind"],
            roles=roles[r["id"]],
            created_at=r["created_at"],
        )
        for r in rows
    ]


async def clusters(conn: asyncpg.Connection, rows: list[asyncpg.Record]) -> list[api.ClusterView]:
    """``clusters`` rows as views, with their node pools."""
    pools = await conn.fetch(
        "SELECT cluster, pool, gpu_model, labels FROM node_pools WHERE cluster = ANY($1) ORDER BY cluster, pool",
        [r["cluster"] for r in rows],
    )
    by_cluster: dict[str, list[api.NodePoolView]] = {}
    for p in pools:
        by_cluster.setdefault(p["cluster"], []).append(
            api.NodePoolView(pool=p["pool"], gpu_model=p["gpu_model"], labels=json.loads(p["labels"]))
        )
    return [
        api.ClusterView(
            cluster=r["cluster"],
            region=r["region"],
            provider=r["provider"],
            node_pools=by_cluster.get(r["cluster"], []),
            created_at=r["created_at"],
        )
        for r in rows
    ]


def page(items: list[Any], cursor: str | None) -> Page[Any]:
    """A page of views."""
    return Page(items=items, next=cursor)
