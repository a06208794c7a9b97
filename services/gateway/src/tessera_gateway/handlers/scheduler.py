"""Routes owned by the scheduler service: jobs (per tenant) and nodes (platform admins).

Each handler forwards to ``rpc.scheduler.<operation>`` with the path parameters in ``scope``
(``tenant``, ``project``, ``job``) and, for the job list, the filters too (``project``,
``queue``, ``state``). Routes under ``/v1/tenants/{tenant}`` are guarded by
:func:`~tessera_gateway.guards.tenant_visible`; the scheduler checks the project permission of
each job itself (a job in a project the caller cannot see is a 404, like another tenant's).
"""

from __future__ import annotations

from typing import Annotated, Any

from litestar import Response, Router, get, post
from litestar.di import NamedDependency
from litestar.params import JSONBody, PathParameter, QueryParameter
from litestar.types import Guard

from tessera_contracts.api.common import SLUG_PATTERN, Page
from tessera_contracts.api.scheduler import CancelJob, ExplainView, JobState, JobView, NodeView, SubmitJob
from tessera_gateway.forward import Forwarder
from tessera_gateway.guards import json_body, platform_admin, strict_body, tenant_visible
from tessera_gateway.openapi import READ_ERRORS, WRITE_ERRORS, problem_responses
from tessera_gateway.params import After, Limit, ProjectSlug, TenantSlug, page_of

SERVICE = "scheduler"
JOB_ID_PATTERN = r"^j_[0-9a-f]{26}$"

JobId = Annotated[
    str, PathParameter(pattern=JOB_ID_PATTERN, min_length=28, max_length=28, description="A job id, j_<26 hex>.")
]
ProjectFilter = Annotated[
    str | None,
    QueryParameter(pattern=SLUG_PATTERN, max_length=63, description="Only jobs of this project."),
]
QueueFilter = Annotated[
    str | None,
    QueryParameter(pattern=SLUG_PATTERN, max_length=63, description="Only jobs of this queue."),
]
StateFilter = Annotated[JobState | None, QueryParameter(name="state", description="Only jobs in this state.")]


def _read() -> dict[str, Any]:
    return {"responses": problem_responses(*READ_ERRORS)}


def _write(*guards: Guard) -> dict[str, Any]:
    return {"responses": problem_responses(*WRITE_ERRORS), "guards": [*guards, json_body, strict_body]}


@post("/projects/{project:str}/jobs", operation_id="submit_job", status_code=201, **_write())
async def submit_job(
    write: NamedDependency[Forwarder], tenant: TenantSlug, project: ProjectSlug, data: JSONBody[SubmitJob]
) -> Response[JobView]:
    """Submit a job to a queue of the project (`project.write`).

    The priority class must exist; `preemptible` defaults to the class's. `workers` > 1 makes a
    gang: all workers are placed at once or none is. Send an `Idempotency-Key`: a retried submit
    never makes two jobs.
    """
    return await write(SERVICE, "submit_job", data, scope={"tenant": tenant, "project": project})


@get("/jobs", operation_id="list_jobs", **_read())
async def list_jobs(
    read: NamedDependency[Forwarder],
    tenant: TenantSlug,
    project: ProjectFilter = None,
    queue: QueueFilter = None,
    job_state: StateFilter = None,  # `state` is a name Litestar reserves
    limit: Limit = 50,
    after: After = None,
) -> Response[Page[JobView]]:
    """The tenant's jobs, newest first (those of the projects the caller can see)."""
    scope = {"tenant": tenant}
    for name, value in (("project", project), ("queue", queue), ("state", job_state)):
        if value is not None:
            scope[name] = value
    return await read(SERVICE, "list_jobs", scope=scope, page=page_of(limit, after))


@get("/jobs/{job:str}", operation_id="get_job", **_read())
async def get_job(read: NamedDependency[Forwarder], tenant: TenantSlug, job: JobId) -> Response[JobView]:
    """One job: its state, where it runs, why it waits."""
    return await read(SERVICE, "get_job", scope={"tenant": tenant, "job": job})


@post("/jobs/{job:str}/cancel", operation_id="cancel_job", status_code=200, **_write())
async def cancel_job(
    write: NamedDependency[Forwarder], tenant: TenantSlug, job: JobId, data: JSONBody[CancelJob]
) -> Response[JobView]:
    """Cancel a job (`project.write` on its project); its allocation ends now. 409 once it has ended.

    The body may be `{}`.
    """
    return await write(SERVICE, "cancel_job", data, scope={"tenant": tenant, "job": job})


@get("/jobs/{job:str}/explain", operation_id="explain_job", **_read())
async def explain_job(read: NamedDependency[Forwarder], tenant: TenantSlug, job: JobId) -> Response[ExplainView]:
    """Where the job is, why it waits and what would let it run, with its history."""
    return await read(SERVICE, "explain_job", scope={"tenant": tenant, "job": job})


@get("/nodes", operation_id="list_nodes", guards=[platform_admin], **_read())
async def list_nodes(
    read: NamedDependency[Forwarder], limit: Limit = 50, after: After = None
) -> Response[Page[NodeView]]:
    """Every node, its state and what is allocated on it (platform admin)."""
    return await read(SERVICE, "list_nodes", page=page_of(limit, after))


def router() -> Router:
    """The scheduler routes, relative to ``/v1``."""
    in_tenant = Router(
        path="/tenants/{tenant:str}",
        guards=[tenant_visible],
        route_handlers=[submit_job, list_jobs, get_job, cancel_job, explain_job],
    )
    return Router(path="/", tags=["scheduler"], route_handlers=[list_nodes, in_tenant])
