"""Tenant isolation of read models, shared by every service that keeps tenant-owned rows.

- :data:`APP_ROLE`: the role request handlers read as: neither owner nor superuser,
  ``NOBYPASSRLS``, SELECT only on a schema's tables (not on ``_checkpoint``/``_dead_letters``).
- :func:`isolation_ddl`: the DDL around a projection's tables: the app role (created when the
  connecting role may), row-level security enabled *and forced* on each tenant-owned table with a
  ``tenant_isolation`` policy for the app role (``tessera.tenant`` must equal the row's
  ``tenant_id``; ``'*'`` means nothing to it) and a ``runtime_all_tenants`` policy for the role
  that created the schema (the projector's, which sets ``'*'``), and the read grants.
- :func:`scoped`: a read-only transaction as the app role with ``tessera.tenant`` set for that
  transaction only, so a pooled connection never carries a tenant to the next request.
- :func:`encode_cursor`/:func:`decode_cursor`: the opaque list cursors of paged reads.
"""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from typing import Any

import asyncpg

APP_ROLE = "tessera_app"
ALL = "*"
"""The all-tenants scope of the runtime's own transactions (never the app role's)."""

_CREATE_APP_ROLE = """
DO $$ BEGIN
    CREATE ROLE tessera_app NOLOGIN NOSUPERUSER NOBYPASSRLS NOINHERIT;
EXCEPTION WHEN duplicate_object THEN NULL;
END $$;
"""

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

_GRANT_READ = r"""
DO $$ DECLARE t text; BEGIN
    EXECUTE format('GRANT USAGE ON SCHEMA %I TO tessera_app', current_schema());
    FOR t IN SELECT tablename FROM pg_tables WHERE schemaname = current_schema() AND tablename NOT LIKE '\_%' LOOP
        EXECUTE format('GRANT SELECT ON %I.%I TO tessera_app', current_schema(), t);
    END LOOP;
END $$;
"""


def isolation_ddl(tables: str, tenant_owned: Iterable[str]) -> str:
    """A projection's DDL: the app role, ``tables`` (CREATE TABLE statements), RLS on ``tenant_owned``, grants.

    Every table in ``tenant_owned`` must have a ``tenant_id text`` column.
    """
    return _CREATE_APP_ROLE + tables + "".join(_POLICY.format(t=t) for t in tenant_owned) + _GRANT_READ


@asynccontextmanager
async def scoped(pool: asyncpg.Pool, schema: str, tenant: str) -> AsyncIterator[asyncpg.Connection]:
    """A read-only transaction as :data:`APP_ROLE` in ``schema``, seeing ``tenant``'s rows and platform-wide tables.

    Raises:
        ValueError: ``tenant`` is the all-tenants scope (a service's deliberate cross-tenant read
            stays the owning role and says so in its own code).
    """
    if tenant == ALL:
        raise ValueError("scoped() serves one tenant")
    async with pool.acquire() as conn, conn.transaction(readonly=True):
        await conn.execute(f"SET LOCAL ROLE {APP_ROLE}")
        await conn.execute(f"SET LOCAL search_path TO {schema}")
        await conn.execute("SELECT set_config('tessera.tenant', $1, true)", tenant)
        yield conn


class BadCursor(ValueError):
    """The ``after`` cursor was not made by this service (a 400 at the API)."""


def encode_cursor(key: list[Any]) -> str:
    """An opaque cursor for the row whose sort key is ``key`` (strings and ints)."""
    return base64.urlsafe_b64encode(json.dumps(key).encode()).decode().rstrip("=")


def decode_cursor(cursor: str | None, kinds: tuple[type[str] | type[int], ...]) -> list[Any] | None:
    """The sort key inside a cursor, one element per entry of ``kinds`` (None for no cursor).

    A ``str`` element is at most 256 characters without NUL; an ``int`` one is a positive
    64-bit integer (a stream sequence).

    Raises:
        BadCursor: not a cursor of this shape.
    """
    if cursor is None:
        return None
    try:
        key = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    except (ValueError, UnicodeDecodeError):
        raise BadCursor("invalid cursor") from None
    if not isinstance(key, list) or len(key) != len(kinds):
        raise BadCursor("invalid cursor")
    for value, kind in zip(key, kinds, strict=True):
        if type(value) is not kind:
            raise BadCursor("invalid cursor")
        if isinstance(value, str) and (len(value) > 256 or "\x00" in value):
            raise BadCursor("invalid cursor")
        if isinstance(value, int) and not 0 < value < 2**63:
            raise BadCursor("invalid cursor")
    return key
