from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import msgspec
import pytest

from tessera_contracts import codec
from tessera_contracts.api import tenancy as api
from tessera_contracts.api.common import PageRequest
from tessera_contracts.events import tenancy as ev
from tessera_contracts.rbac import RoleBinding
from tessera_runtime import replay, rpc
from tessera_runtime.rpc import RpcError
from tessera_tenancy.domain import quota_ref
from tessera_tenancy.projections import TENANCY
from tests.support.tenancy import Tenancy


async def make_tenant(t: Tenancy, tenant: str, *projects: str) -> None:
    await t.call("create_tenant", api.CreateTenant(tenant=tenant, display_name=tenant.title()), as_=t.admin)
    for p in projects:
        await t.call("create_project", api.CreateProject(project=p, display_name=p), as_=t.admin, tenant=tenant)


async def problem(awaitable: object) -> tuple[int, str]:
    with pytest.raises(RpcError) as info:
        await awaitable  # type: ignore[misc]
    return info.value.problem.status, info.value.problem.detail


async def test_bootstrap_happens_once_and_yields_a_platform_admin(tenancy: Tenancy) -> None:
    assert tenancy.admin.is_platform_admin
    assert tenancy.admin.tenant == "_system"
    status, detail = await problem(tenancy.call("bootstrap", api.Bootstrap(name="again")))
    assert status == 409 and "already bootstrapped" in detail


async def test_keys_are_refused_when_malformed_unknown_revoked_or_expired(tenancy: Tenancy) -> None:
    t = tenancy
    await make_tenant(t, "acme")
    user = await t.call("create_user", api.CreateUser(name="ada", role="member"), as_=t.admin, tenant="acme")
    expires = t.clock.now + timedelta(hours=1)
    issued = await t.call(
        "issue_key", api.IssueKey(name="ci", expires_at=expires), as_=t.admin, result=api.IssuedKey,
        tenant="acme", user=user["id"],
    )  # fmt: skip
    ada = await t.principal(issued.secret)
    assert (ada.tenant, ada.name, ada.roles) == ("acme", "ada", (RoleBinding(role="member", tenant="acme"),))
    assert issued.key.prefix == issued.secret[:20] and issued.secret not in msgspec.json.encode(issued.key).decode()

    for secret, reason in [
        ("not-a-key", "malformed"),
        (issued.secret[:-1] + ("0" if issued.secret[-1] != "0" else "1"), "unknown"),
    ]:
        status, detail = await problem(t.principal(secret))
        assert status == 401 and reason in detail

    t.clock.advance(3601)
    status, detail = await problem(t.principal(issued.secret))
    assert status == 401 and "expired" in detail

    other = await t.call(
        "issue_key", api.IssueKey(name="laptop"), as_=ada, result=api.IssuedKey, tenant="acme", user=user["id"]
    )
    await t.principal(other.secret)
    revoked = await t.call("revoke_key", as_=ada, result=api.KeyView, tenant="acme", key=other.key.key_id)
    assert revoked.revoked_at is not None
    status, detail = await problem(t.principal(other.secret))
    assert status == 401 and "revoked" in detail


async def test_no_key_is_ever_written_to_the_log_or_the_logs(
    tenancy: Tenancy, capfd: pytest.CaptureFixture[str]
) -> None:
    t = tenancy
    await make_tenant(t, "acme")
    user = await t.call("create_user", api.CreateUser(name="ada", role="member"), as_=t.admin, tenant="acme")
    issued = await t.call(
        "issue_key", api.IssueKey(name="k"), as_=t.admin, result=api.IssuedKey, tenant="acme", user=user["id"]
    )
    await t.principal(issued.secret)
    await problem(t.principal(issued.secret + "0"))
    head = await t.log.head()
    async with t.log.reader(("ev.>",), start_seq=1) as reader:
        bodies = []
        while len(bodies) < head:
            bodies += [m.data for m in await reader.fetch(500, timeout_s=2)]
    secrets = (issued.secret, t.admin_key, issued.secret.split("_")[2])
    assert not any(s.encode() in b for s in secrets for b in bodies)
    out, err = capfd.readouterr()
    assert not any(s in out + err for s in secrets)


async def test_names_are_unique_and_validated(tenancy: Tenancy) -> None:
    t = tenancy
    await make_tenant(t, "acme", "vision")
    status, _ = await problem(t.call("create_tenant", api.CreateTenant(tenant="acme", display_name="x"), as_=t.admin))
    assert status == 409
    status, _ = await problem(
        t.call("create_project", api.CreateProject(project="vision", display_name="x"), as_=t.admin, tenant="acme")
    )
    assert status == 409
    await t.call("create_user", api.CreateUser(name="Ada@x.io"), as_=t.admin, tenant="acme")
    status, detail = await problem(t.call("create_user", api.CreateUser(name="ada@X.io"), as_=t.admin, tenant="acme"))
    assert status == 409 and "taken" in detail
    # The same names in another tenant are fine.
    await make_tenant(t, "globex", "vision")
    await t.call("create_user", api.CreateUser(name="ada@x.io"), as_=t.admin, tenant="globex")
    # A body that skipped the gateway's validation is still checked by the service.
    raw = msgspec.Raw(b'{"tenant": "../etc", "display_name": "x"}')
    status, _ = await problem(rpc.call(t.nc, "tenancy", "create_tenant", raw, principal=t.admin))
    assert status == 400
    status, _ = await problem(
        t.call("create_project", api.CreateProject(project="p", display_name="x"), as_=t.admin, tenant="nope")
    )
    assert status == 404


async def test_quota_rules(tenancy: Tenancy) -> None:
    t = tenancy
    await make_tenant(t, "acme", "vision")
    gpu = api.GpuQuotaBody
    quota = api.SetQuota(
        cohort="research",
        gpus=[gpu(gpu_model="H100", nominal_milli=8000, borrowing_limit_milli=4000, lending_limit_milli=2000)],
        monthly_gpu_hour_budget=Decimal("1500.5"),
        max_concurrent_jobs=20,
        fair_share_weight=3,
    )
    view = await t.call("set_quota", quota, as_=t.admin, result=api.QuotaView, tenant="acme")
    assert view.gpus[0].nominal_milli == 8000 and view.monthly_gpu_hour_budget == Decimal("1500.5")
    assert view.fair_share_weight == 3
    stored, _ = await t.log.load(quota_ref("acme", None).subject)
    event = codec.payload(stored[-1].envelope)
    assert isinstance(event, ev.QuotaSet) and event.fair_share_weight == 3, "the scheduler reads it from the event"
    bad = [
        api.SetQuota(gpus=[gpu(gpu_model="H100", nominal_milli=1000, lending_limit_milli=2000)]),
        api.SetQuota(gpus=[gpu(gpu_model="H100", nominal_milli=1), gpu(gpu_model="H100", nominal_milli=2)]),
    ]
    for body in bad:
        status, _ = await problem(t.call("set_quota", body, as_=t.admin, tenant="acme"))
        assert status == 422
    status, detail = await problem(
        t.call(
            "set_quota", api.SetQuota(gpus=[gpu(gpu_model="H100", nominal_milli=9000)]), as_=t.admin,
            tenant="acme", project="vision",
        )
    )  # fmt: skip
    assert status == 422 and "exceeds the tenant" in detail
    status, detail = await problem(
        t.call(
            "set_quota", api.SetQuota(cohort="x", gpus=[gpu(gpu_model="H100", nominal_milli=1000)]), as_=t.admin,
            tenant="acme", project="vision",
        )
    )  # fmt: skip
    assert status == 422 and "cohort belongs to the tenant" in detail
    project_quota = api.SetQuota(gpus=[gpu(gpu_model="H100", nominal_milli=4000)], max_concurrent_jobs=5)
    await t.call("set_quota", project_quota, as_=t.admin, tenant="acme", project="vision")
    quotas = await t.call("list_quotas", as_=t.admin, tenant="acme")
    assert [q["project"] for q in quotas["items"]] == [None, "vision"]
    assert [q["fair_share_weight"] for q in quotas["items"]] == [3, 1]
    for weight in (0, 1001):
        raw = msgspec.Raw(msgspec.json.encode({"fair_share_weight": weight}))
        status, _ = await problem(
            rpc.call(t.nc, "tenancy", "set_quota", raw, principal=t.admin, scope={"tenant": "acme"})
        )
        assert status == 400
    # The tenant quota is the platform's to set; a tenant admin sets project quotas only.
    boss = await t.user_with_key("acme", "boss", "tenant-admin")
    status, _ = await problem(t.call("set_quota", quota, as_=boss, tenant="acme"))
    assert status == 403
    await t.call("set_quota", project_quota, as_=boss, tenant="acme", project="vision")


async def test_pagination_with_cursors(tenancy: Tenancy) -> None:
    t = tenancy
    await make_tenant(t, "acme", *[f"p{i}" for i in range(7)])
    seen, after = [], None
    while True:
        raw = await rpc.call(
            t.nc, "tenancy", "list_projects", principal=t.admin, scope={"tenant": "acme"},
            page=PageRequest(limit=3, after=after),
        )  # fmt: skip
        page = msgspec.json.decode(raw)
        seen += [p["project"] for p in page["items"]]
        after = page["next"]
        if after is None:
            break
    assert seen == [f"p{i}" for i in range(7)]
    status, _ = await problem(
        rpc.call(t.nc, "tenancy", "list_projects", principal=t.admin, scope={"tenant": "acme"},
                 page=PageRequest(after="garbage!"))
    )  # fmt: skip
    assert status == 400


async def test_platform_objects(tenancy: Tenancy) -> None:
    t = tenancy
    await make_tenant(t, "acme")
    await t.call(
        "register_cluster", api.RegisterCluster(cluster="onprem-a", region="eu-west", provider="on-prem"), as_=t.admin
    )
    pool = api.DefineNodePool(gpu_model="H100-80GB", labels={"zone": "a"})
    view = await t.call("define_node_pool", pool, as_=t.admin, result=api.ClusterView, cluster="onprem-a", pool="h100")
    assert view.node_pools == [api.NodePoolView(pool="h100", gpu_model="H100-80GB", labels={"zone": "a"})]
    await t.call(
        "define_priority_class", api.DefinePriorityClass(value=1000, preemptible=False), as_=t.admin, name="high"
    )
    member = await t.user_with_key("acme", "ada", "member")
    assert [c["cluster"] for c in (await t.call("list_clusters", as_=member))["items"]] == ["onprem-a"]
    assert [c["name"] for c in (await t.call("list_priority_classes", as_=member))["items"]] == ["high"]
    status, _ = await problem(
        t.call("register_cluster", api.RegisterCluster(cluster="x", region="r", provider="aws"), as_=member)
    )
    assert status == 403


async def test_projection_replays_to_the_same_checksum(tenancy: Tenancy) -> None:
    t = tenancy
    await make_tenant(t, "acme", "vision")
    await t.user_with_key("acme", "ada", "viewer", project="vision")
    await t.call("set_quota", api.SetQuota(max_concurrent_jobs=3), as_=t.admin, tenant="acme")
    result = await replay.verify(t.pool, t.log, TENANCY)
    assert result.equal and result.tables and all(s.rows >= 0 for s in result.tables)
    assert {s.table for s in result.tables} >= {"tenants", "projects", "principals", "api_keys", "quotas"}
