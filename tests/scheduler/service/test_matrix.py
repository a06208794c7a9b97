"""Role x scheduler endpoint x (own tenant, other tenant), through the real gateway and the real services.

Written out by hand, like ``tests/gateway/test_matrix.py`` (whose coverage check includes
:data:`CASES`): a project-bound role sees nothing of other projects (404), a viewer may read but
not write (403), and another tenant's anything is a 404 for all but platform admins.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

from tests.scheduler.service.conftest import World

ROLES = ("platform-admin", "tenant-admin", "member", "viewer", "project-member", "project-viewer")
OWN, OTHER = "acme", "globex"
JOB = {"name": "m", "priority_class": "normal"}


@dataclass(frozen=True)
class Case:
    method: str
    path: str  # {t}: tenant; {j}: a job of the tenant's project vision ({jn}: of nlp), fresh for each request
    body: dict[str, Any] | None
    own: dict[str, int]
    tenant_scoped: bool = True


def same(status: int) -> dict[str, int]:
    return dict.fromkeys(ROLES, status)


def writers(ok: int, *, bound_elsewhere: int | None = None) -> dict[str, int]:
    out = {**same(ok), "viewer": 403, "project-viewer": 403}
    if bound_elsewhere is not None:
        out |= {"project-member": bound_elsewhere, "project-viewer": bound_elsewhere}
    return out


CASES: dict[str, Case] = {
    "submit_job": Case("POST", "/v1/tenants/{t}/projects/vision/jobs", JOB, writers(201)),
    "submit_job_other_project": Case(
        "POST", "/v1/tenants/{t}/projects/nlp/jobs", JOB, writers(201, bound_elsewhere=404)
    ),
    "list_jobs": Case("GET", "/v1/tenants/{t}/jobs", None, same(200)),
    "get_job": Case("GET", "/v1/tenants/{t}/jobs/{j}", None, same(200)),
    "get_job_other_project": Case(
        "GET", "/v1/tenants/{t}/jobs/{jn}", None, {**same(200), "project-member": 404, "project-viewer": 404}
    ),
    "cancel_job": Case("POST", "/v1/tenants/{t}/jobs/{j}/cancel", {}, writers(200)),
    "explain_job": Case("GET", "/v1/tenants/{t}/jobs/{j}/explain", None, same(200)),
    "list_nodes": Case("GET", "/v1/nodes", None, {**same(403), "platform-admin": 200}, tenant_scoped=False),
}
TEMPLATES = [("/projects/vision", "/projects/{project}"), ("/projects/nlp", "/projects/{project}")]
TEMPLATES += [("{t}", "{tenant}"), ("{jn}", "{job}"), ("{j}", "{job}")]
"""Concrete path parts -> the OpenAPI templates (for the coverage check of ``tests/gateway/test_matrix.py``)."""


async def test_role_scheduler_endpoint_tenant_matrix(world: World) -> None:
    for tenant in (OWN, OTHER):
        await world.tenant(tenant, nominal=1000, projects=("vision", "nlp"))
    await world.start_scheduler("s1")
    for role, (base, project) in {
        "tenant-admin": ("tenant-admin", None),
        "member": ("member", None),
        "viewer": ("viewer", None),
        "project-member": ("member", "vision"),
        "project-viewer": ("viewer", "vision"),
    }.items():
        world.keys[role] = await world.key(OWN, role, base, project)
    world.keys["platform-admin"] = world.tenancy.admin_key

    shared = {(t, p): (await world.submit(t, p, who="platform"))["id"] for t in (OWN, OTHER) for p in ("vision", "nlp")}
    failures = []
    for (name, case), role in itertools.product(CASES.items(), ROLES):
        for tenant in (OWN, OTHER) if case.tenant_scoped else (OWN,):
            expected = case.own[role] if tenant == OWN or role == "platform-admin" else 404
            path = case.path.replace("{t}", tenant).replace("{jn}", shared[tenant, "nlp"])
            if "{j}" in path:  # a fresh job for a write (a cancelled job cannot be cancelled again)
                job = (await world.submit(tenant, "vision", who="platform"))["id"] if case.body is not None else None
                path = path.replace("{j}", job or shared[tenant, "vision"])
            response = await world.gateway.request(
                case.method, path, json=case.body, headers={"Authorization": f"Bearer {world.keys[role]}"}
            )
            if response.status_code != expected:
                failures.append(f"{name} as {role} on {tenant}: {response.status_code} != {expected} {response.text}")
            if response.status_code >= 400:
                assert response.headers["content-type"].startswith("application/problem+json")
    assert not failures, "\n".join(failures)
