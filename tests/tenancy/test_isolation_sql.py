"""Row-level security: under the app role, one tenant's transaction sees none of another's rows."""

from __future__ import annotations

import asyncpg

from tessera_contracts.api import tenancy as api
from tessera_runtime.tenant_rows import APP_ROLE
from tessera_tenancy import reads
from tessera_tenancy.projections import PLATFORM_WIDE
from tests.support.tenancy import Tenancy


async def seed_two_tenants(t: Tenancy) -> None:
    for tenant in ("acme", "globex"):
        await t.call("create_tenant", api.CreateTenant(tenant=tenant, display_name=tenant), as_=t.admin)
        await t.call(
            "create_project", api.CreateProject(project="vision", display_name="v"), as_=t.admin, tenant=tenant
        )
        await t.call("set_quota", api.SetQuota(max_concurrent_jobs=4), as_=t.admin, tenant=tenant)
        await t.user_with_key(tenant, f"ada-{tenant}", "member", project="vision")


async def tenant_owned_tables(conn: asyncpg.Connection) -> list[tuple[str, str, bool, bool]]:
    """Every live projection table with a tenant_id column: (schema, table, rls, forced)."""
    rows = await conn.fetch(
        """
        SELECT n.nspname, c.relname, c.relrowsecurity, c.relforcerowsecurity
        FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE c.relkind = 'r' AND n.nspname LIKE 'proj\\_%' AND n.nspname NOT LIKE '%\\_\\_%'
          AND EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attname = 'tenant_id')
        ORDER BY 1, 2
        """
    )
    return [(r[0], r[1], r[2], r[3]) for r in rows]


async def test_every_tenant_owned_table_forces_rls_and_leaks_nothing(tenancy: Tenancy) -> None:
    t = tenancy
    await seed_two_tenants(t)
    async with t.pool.acquire() as conn:
        tables = await tenant_owned_tables(conn)
        assert {name for _, name, _, _ in tables} >= {
            "tenants",
            "projects",
            "principals",
            "role_bindings",
            "api_keys",
            "quotas",
        }
        for schema, table, rls, forced in tables:
            assert rls and forced, f"{schema}.{table} must ENABLE and FORCE row level security"
            async with conn.transaction():
                await conn.execute("SELECT set_config('tessera.tenant', '*', true)")
                tenants = {r[0] for r in await conn.fetch(f'SELECT DISTINCT tenant_id FROM "{schema}"."{table}"')}
            assert {"acme", "globex"} <= tenants, f"{schema}.{table} should hold rows of both tenants"
            for me, other in (("acme", "globex"), ("globex", "acme")):
                async with conn.transaction():
                    await conn.execute(f"SET LOCAL ROLE {APP_ROLE}")
                    await conn.execute("SELECT set_config('tessera.tenant', $1, true)", me)
                    leaked = await conn.fetchval(
                        f'SELECT count(*) FROM "{schema}"."{table}" WHERE tenant_id = $1', other
                    )
                    mine = await conn.fetchval(f'SELECT count(*) FROM "{schema}"."{table}"')
                assert leaked == 0, f"{schema}.{table} leaks {other}'s rows to {me}"
                assert mine > 0


async def test_every_table_the_app_role_can_read_is_isolated_or_platform_wide(tenancy: Tenancy) -> None:
    """A new table readable by request handlers must either hold no tenant's data (and say so in
    the projection's PLATFORM_WIDE) or force row-level security: anything else fails here."""
    t = tenancy
    await seed_two_tenants(t)
    rows = await t.pool.fetch(
        """
        SELECT n.nspname, c.relname, c.relrowsecurity, c.relforcerowsecurity
        FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE c.relkind = 'r' AND n.nspname LIKE 'proj\\_%' AND n.nspname NOT LIKE '%\\_\\_%'
          AND has_table_privilege($1, c.oid, 'SELECT')
        """,
        APP_ROLE,
    )
    readable = {(r[0], r[1]): (r[2], r[3]) for r in rows}
    assert ("proj_tenancy", "tenants") in readable
    for (schema, table), (rls, forced) in readable.items():
        if schema == "proj_tenancy" and table in PLATFORM_WIDE:
            continue
        assert rls and forced, f"{schema}.{table} is readable by {APP_ROLE} without forced row-level security"


async def test_the_app_role_is_neither_owner_nor_superuser_and_cannot_write(tenancy: Tenancy) -> None:
    t = tenancy
    await seed_two_tenants(t)
    async with t.pool.acquire() as conn:
        role = await conn.fetchrow("SELECT rolsuper, rolbypassrls FROM pg_roles WHERE rolname = $1", APP_ROLE)
        assert role is not None and not role["rolsuper"] and not role["rolbypassrls"]
        owners = {r[0] for r in await conn.fetch("SELECT tableowner FROM pg_tables WHERE schemaname = 'proj_tenancy'")}
        assert APP_ROLE not in owners
        async with conn.transaction():
            await conn.execute(f"SET LOCAL ROLE {APP_ROLE}")
            await conn.execute("SELECT set_config('tessera.tenant', 'acme', true)")
            try:
                await conn.execute("DELETE FROM proj_tenancy.tenants")
            except asyncpg.InsufficientPrivilegeError:
                pass
            else:
                raise AssertionError("the app role must not write projections")


async def test_the_tenant_setting_does_not_outlive_its_transaction(tenancy: Tenancy) -> None:
    t = tenancy
    await seed_two_tenants(t)
    pool = await asyncpg.create_pool(t.pool._connect_args[0], min_size=1, max_size=1)  # one pooled connection
    assert pool is not None
    try:
        async with reads.scoped(pool, "acme") as conn:
            assert await conn.fetchval("SELECT count(*) FROM tenants") == 1
        # The next user of the same connection, as the app role, has no tenant: it sees nothing.
        async with pool.acquire() as conn, conn.transaction():
            await conn.execute(f"SET LOCAL ROLE {APP_ROLE}")
            assert await conn.fetchval("SELECT count(*) FROM proj_tenancy.tenants") == 0
            assert await conn.fetchval("SELECT current_setting('tessera.tenant', true)") in ("", None)
    finally:
        await pool.close()
