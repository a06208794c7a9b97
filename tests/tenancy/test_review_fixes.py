"""Regressions found by the security review of the tenancy service (one test per finding)."""

from __future__ import annotations

import asyncio
import base64
import json
from datetime import UTC, datetime

import msgspec
import pytest

from tessera_contracts.api import tenancy as api
from tessera_contracts.api.common import PageRequest
from tessera_contracts.envelope import envelope
from tessera_contracts.events import tenancy as ev
from tessera_contracts.rbac import Principal, RoleBinding
from tessera_runtime import rpc
from tessera_runtime.projector import lock_key
from tessera_runtime.rpc import RpcError
from tessera_runtime.tenant_rows import APP_ROLE
from tessera_tenancy import domain
from tests.support.tenancy import Tenancy


async def status_of(awaitable: object) -> int:
    with pytest.raises(RpcError) as info:
        await awaitable  # type: ignore[misc]
    return info.value.problem.status


async def acme(t: Tenancy, *projects: str) -> None:
    await t.call("create_tenant", api.CreateTenant(tenant="acme", display_name="Acme"), as_=t.admin)
    for p in projects:
        await t.call("create_project", api.CreateProject(project=p, display_name=p), as_=t.admin, tenant="acme")


async def test_platform_admin_exists_only_in_the_platform_tenant(tenancy: Tenancy) -> None:
    t = tenancy
    await acme(t)
    body = api.CreateUser(name="ops-bot", role="platform-admin")
    assert await status_of(t.call("create_user", body, as_=t.admin, tenant="acme")) == 422
    # A binding smuggled into another tenant counts for nothing.
    forged = Principal(
        id="u_1", tenant="acme", name="x", kind="user", roles=(RoleBinding(role="platform-admin", tenant="acme"),)
    )
    assert not forged.is_platform_admin
    # Platform admins are made in _system, by a platform admin.
    second = await t.call("create_user", body, as_=t.admin, result=api.UserView, tenant="_system")
    issued = await t.call(
        "issue_key", api.IssueKey(name="k"), as_=t.admin, result=api.IssuedKey, tenant="_system", user=second.id
    )
    assert (await t.principal(issued.secret)).is_platform_admin


async def test_a_tenant_admin_cannot_mint_keys_for_a_platform_admin(tenancy: Tenancy) -> None:
    t = tenancy
    await acme(t)
    boss = await t.user_with_key("acme", "boss", "tenant-admin")
    status = await status_of(t.call("issue_key", api.IssueKey(name="k"), as_=boss, tenant="_system", user=t.admin.id))
    assert status == 404  # the platform tenant is invisible to it


async def test_the_app_role_cannot_widen_its_scope_nor_read_dead_letters(tenancy: Tenancy) -> None:
    t = tenancy
    await acme(t)
    async with t.pool.acquire() as conn, conn.transaction():
        await conn.execute(f"SET LOCAL ROLE {APP_ROLE}")
        await conn.execute("SELECT set_config('tessera.tenant', '*', true)")
        assert await conn.fetchval("SELECT count(*) FROM proj_tenancy.tenants") == 0
        assert not await conn.fetchval("SELECT has_table_privilege('proj_tenancy._dead_letters', 'SELECT')")
        assert not await conn.fetchval("SELECT has_table_privilege('proj_tenancy._checkpoint', 'SELECT')")


async def test_answers_do_not_depend_on_the_projection_keeping_up(tenancy: Tenancy) -> None:
    """While the projector is held up, a create still answers right and a new key's secret is not lost."""
    t = tenancy
    await acme(t)
    user = await t.call("create_user", api.CreateUser(name="ada", role="member"), as_=t.admin, tenant="acme")
    async with t.pool.acquire() as blocker, blocker.transaction():
        await blocker.execute("SELECT pg_advisory_xact_lock($1)", lock_key("proj_tenancy"))
        project = await t.call(
            "create_project", api.CreateProject(project="late", display_name="Late"), as_=t.admin,
            result=api.ProjectView, tenant="acme",
        )  # fmt: skip
        issued = await t.call(
            "issue_key", api.IssueKey(name="k"), as_=t.admin, result=api.IssuedKey, tenant="acme", user=user["id"]
        )
    assert project.project == "late" and issued.secret.startswith("tsk_")
    await asyncio.sleep(0.5)
    assert (await t.principal(issued.secret)).id == user["id"]


async def test_hostile_cursors_and_other_tenants_users_are_4xx(tenancy: Tenancy) -> None:
    t = tenancy
    await acme(t)
    cursor = base64.urlsafe_b64encode(json.dumps(["\u0000"]).encode()).decode()
    status = await status_of(
        rpc.call(t.nc, "tenancy", "list_projects", principal=t.admin, scope={"tenant": "acme"},
                 page=PageRequest(after=cursor))
    )  # fmt: skip
    assert status == 400
    await t.call("create_tenant", api.CreateTenant(tenant="beta", display_name="Beta"), as_=t.admin)
    other = await t.call("create_user", api.CreateUser(name="eve"), as_=t.admin, tenant="beta")
    boss = await t.user_with_key("acme", "boss", "tenant-admin")
    for op in ("list_keys", "get_user"):
        assert await status_of(t.call(op, as_=boss, tenant="acme", user=other["id"])) == 404
    assert await status_of(t.call("list_keys", as_=boss, tenant="acme", user="u_0")) == 404


async def test_quota_hierarchy_holds_from_both_sides(tenancy: Tenancy) -> None:
    t = tenancy
    await acme(t, "vision", "nlp")
    gpu = api.GpuQuotaBody
    project_quota = api.SetQuota(gpus=[gpu(gpu_model="H100", nominal_milli=4000)])
    assert await status_of(t.call("set_quota", project_quota, as_=t.admin, tenant="acme", project="vision")) == 422
    await t.call(
        "set_quota", api.SetQuota(gpus=[gpu(gpu_model="H100", nominal_milli=8000)]), as_=t.admin, tenant="acme"
    )
    await t.call("set_quota", project_quota, as_=t.admin, tenant="acme", project="vision")
    lower = api.SetQuota(gpus=[gpu(gpu_model="H100", nominal_milli=1000)])
    assert await status_of(t.call("set_quota", lower, as_=t.admin, tenant="acme")) == 422
    # Budgets are stored to the thousandth, never with a wild exponent.
    budget = msgspec.json.decode(b'{"monthly_gpu_hour_budget": "0E-999999999"}', type=api.SetQuota)
    view = await t.call("set_quota", budget, as_=t.admin, result=api.QuotaView, tenant="acme", project="nlp")
    assert str(view.monthly_gpu_hour_budget) == "0.000"
    with pytest.raises(msgspec.ValidationError, match="decimal places"):
        msgspec.json.decode(b'{"monthly_gpu_hour_budget": "1E-30000"}', type=api.SetQuota)
    assert await t.projector.wait_until(await t.log.head())
    assert t.projector.dead_lettered == 0


async def test_a_project_bound_viewer_sees_only_its_projects_quotas(tenancy: Tenancy) -> None:
    t = tenancy
    await acme(t, "vision", "nlp")
    gpu = api.GpuQuotaBody(gpu_model="H100", nominal_milli=1000)
    await t.call("set_quota", api.SetQuota(gpus=[gpu]), as_=t.admin, tenant="acme")
    for p in ("vision", "nlp"):
        await t.call("set_quota", api.SetQuota(gpus=[gpu]), as_=t.admin, tenant="acme", project=p)
    viewer = await t.user_with_key("acme", "pv", "viewer", project="vision")
    quotas = await t.call("list_quotas", as_=viewer, tenant="acme")
    assert [q["project"] for q in quotas["items"]] == [None, "vision"]


async def test_an_interrupted_bootstrap_and_an_orphaned_name_are_completed(nc, log, pool) -> None:  # type: ignore[no-untyped-def]
    """A crash between the steps of a command must not lock a name or the platform forever."""
    from tessera_runtime.projector import Projector
    from tessera_tenancy.handlers import TenancyHandlers
    from tessera_tenancy.projections import TENANCY
    from tests.support.tenancy import PEPPER

    now = datetime(2026, 11, 29, tzinfo=UTC)

    async def crash_after(ref: object, event: object) -> None:
        env = envelope(event, subject=ref.subject, source="t", tenant=ref.tenant, time=now, correlation_id="c")  # type: ignore[arg-type, attr-defined]
        await log.append(ref.subject, [env], 0)  # type: ignore[attr-defined]

    await crash_after(domain.BOOTSTRAP_REF, ev.PlatformBootstrapped(principal_id="u_00000000000000aa"))
    await crash_after(
        domain.username_ref("_system", "ada"),
        ev.UsernameClaimed(tenant="_system", name="ada", principal_id="u_00000000000000bb"),
    )
    projector = Projector(TENANCY, pool, log, idle_fetch_s=0.2)
    stop = asyncio.Event()
    follower = asyncio.create_task(projector.run(stop))
    server = rpc.RpcServer(nc, "tenancy")
    TenancyHandlers(log, pool, projector, PEPPER).register(server)
    await server.start()
    try:
        raw = await rpc.call(nc, "tenancy", "bootstrap", api.Bootstrap(name="root"))
        issued = msgspec.json.decode(raw, type=api.IssuedKey)
        assert issued.key.user_id == "u_00000000000000aa"
        admin = msgspec.json.decode(
            await rpc.call(nc, "tenancy", "verify_key", api.VerifyKey(secret=issued.secret)), type=Principal
        )
        raw = await rpc.call(
            nc, "tenancy", "create_user", api.CreateUser(name="ada"), principal=admin, scope={"tenant": "_system"}
        )
        assert msgspec.json.decode(raw)["id"] == "u_00000000000000bb"
        with pytest.raises(RpcError) as again:
            await rpc.call(nc, "tenancy", "bootstrap", api.Bootstrap(name="root"))
        assert again.value.problem.status == 409
    finally:
        await server.stop()
        stop.set()
        await follower
