"""Jobs: submit, cancel, read, list and explain.

A submit is checked against the tenancy facts the projection folds (the project exists, the
priority class exists); when the projection does not show them yet (it may lag a project created
a moment ago), the log itself is asked, so a submit never fails because of lag.
"""

from __future__ import annotations

from datetime import datetime
from typing import get_args

import asyncpg
import msgspec

from tessera_contracts import codec, rpc
from tessera_contracts.api import scheduler as api
from tessera_contracts.api.common import Page
from tessera_contracts.envelope import envelope
from tessera_contracts.events import scheduler as ev
from tessera_contracts.events import tenancy as tev
from tessera_contracts.rbac import Permission
from tessera_contracts.registry import Event
from tessera_runtime import rpc as rpc_runtime
from tessera_runtime.errors import ConcurrencyConflict
from tessera_runtime.rpc import Call, RpcError, allow
from tessera_scheduler import reads, refs
from tessera_scheduler.handlers.base import SOURCE, Base, bad_input, bound_projects
from tessera_scheduler.projections import TERMINAL, WAITING

JOB_STATES: frozenset[str] = frozenset(get_args(api.JobState))
HISTORY_LIMIT = 200
"""Most recent history rows ``explain`` returns."""
CANCEL_ATTEMPTS = 5
LIVE_SERVICE = "scheduler_leader"
"""RPC service only the active scheduler answers (``explain`` with the core's live reasoning)."""
LIVE_TIMEOUT_S = 1.0


def worker_spec(body: api.WorkerBody) -> ev.WorkerSpec:
    """The event's worker spec for a request's: ``milli`` defaults to a whole device for GPU workers.

    A worker asking for device memory, a MIG slice or no GPU at all has ``milli`` None.
    """
    whole = body.gpus > 0 and body.gpu_memory_mib is None and body.mig_profile is None
    return ev.WorkerSpec(
        gpus=body.gpus,
        milli=(body.milli if body.milli is not None else 1000) if whole else None,
        gpu_memory_mib=body.gpu_memory_mib,
        mig_profile=body.mig_profile,
        gpu_models=tuple(body.gpu_models),
        cpu_milli=body.cpu_milli,
        memory_mib=body.memory_mib,
    )


def pending_view(tenant: str, event: ev.JobSubmitted, at: datetime) -> api.JobView:
    """The view of a job just submitted, from its event (when the projection is slow to show it)."""
    w = event.worker
    return api.JobView(
        tenant=tenant,
        project=event.project,
        queue=event.queue,
        id=event.job_id,
        name=event.name,
        state="pending",
        priority_class=event.priority_class,
        priority=event.priority,
        preemptible=event.preemptible,
        workers=event.workers,
        gpus=w.gpus,
        milli=w.milli,
        gpu_memory_mib=w.gpu_memory_mib,
        mig_profile=w.mig_profile,
        gpu_models=list(w.gpu_models),
        gpu_model=None,
        borrowed_milli=0,
        placements=[],
        reason=None,
        message=None,
        preemptions=0,
        last_preemption=None,
        outcome=None,
        submitted_by=event.submitted_by,
        submitted_at=at,
        admitted_at=None,
        placed_at=None,
        ended_at=None,
    )


def state_sentence(job: api.JobView) -> str:
    """Where a job is, in words (when no queueing reason says more)."""
    nodes = ", ".join(sorted({p.node for p in job.placements})) or "-"
    match job.state:
        case "pending":
            return "pending: waiting for the scheduler's next cycle"
        case "preempted":
            return f"preempted ({job.last_preemption or '-'}); waiting to be scheduled again"
        case "admitted":
            return f"admitted: quota is reserved ({job.gpu_model or 'no GPU'}); waiting for devices"
        case "placed":
            return f"placed on {nodes}; waiting for the node agent to start it"
        case "running":
            return f"running on {nodes}"
        case "succeeded" | "failed":
            return f"finished: {job.outcome or job.state}" + (f" ({job.message})" if job.message else "")
        case _:
            return job.message or "cancelled"


class Explanation(msgspec.Struct, frozen=True):
    """The active scheduler's live reasoning about one job (``rpc.scheduler_leader.explain``)."""

    text: str


class JobOps(Base):
    """Submit, cancel, read, list and explain jobs."""

    # -- commands -------------------------------------------------------------------------------

    async def submit_job(self, call: Call, body: api.SubmitJob) -> api.JobView:
        """Submit a job to a project's queue (``project.write``).

        Raises:
            RpcError: 404 when the project does not exist (or is invisible), 422 when the priority
                class does not exist, 403 without the permission.
        """
        principal = call.require_principal()
        tenant, project = call.scope.get("tenant", ""), call.scope.get("project", "")
        allow(principal, Permission.PROJECT_WRITE, tenant, project)
        with bad_input():
            refs.project_ref(tenant, project)
        if not await self._project_exists(tenant, project):
            raise RpcError(rpc.NOT_FOUND, f"project {tenant}/{project} not found")
        priority = await self._priority_class(body.priority_class)
        if priority is None:
            raise RpcError(rpc.UNPROCESSABLE, f"priority class {body.priority_class} does not exist")
        value, class_preemptible = priority
        now = self.clock()
        for _attempt in range(3):
            event = ev.JobSubmitted(
                job_id=refs.new_job_id(),
                tenant=tenant,
                project=project,
                queue=body.queue,
                name=body.name,
                priority_class=body.priority_class,
                priority=value,
                preemptible=class_preemptible if body.preemptible is None else body.preemptible,
                workers=body.workers,
                worker=worker_spec(body.worker),
                selector=ev.NodeSelector(
                    cluster=body.selector.cluster, region=body.selector.region, labels=dict(body.selector.labels)
                ),
                command=tuple(body.command),
                env=dict(body.env),
                max_runtime_s=body.max_runtime_s,
                submitted_by=principal.id,
            )
            ref = refs.job_ref(tenant, event.job_id)
            env = envelope(
                event, subject=ref.subject, source=SOURCE, tenant=tenant, time=now, correlation_id=call.correlation_id
            )
            try:
                [ack] = await self.log.append(ref.subject, [env], 0)
            except ConcurrencyConflict:
                continue  # a job id drawn twice: draw another
            if await self.projector.wait_until(ack.seq, self.visibility_timeout_s):
                found = await self._job(tenant, event.job_id)
                if found is not None:
                    return found
            return pending_view(tenant, event, now)
        raise RpcError(rpc.CONFLICT, "could not draw a free job id; try again")

    async def cancel_job(self, call: Call, body: api.CancelJob) -> api.JobView:
        """Cancel a job (``project.write`` on its project); its allocation ends now.

        Raises:
            RpcError: 404 for an unknown or invisible job, 409 when it has already ended.
        """
        principal = call.require_principal()
        tenant, job_id = call.scope.get("tenant", ""), call.scope.get("job", "")
        allow(principal, Permission.TENANT_READ, tenant)
        with bad_input():
            ref = refs.job_ref(tenant, job_id)
        for _attempt in range(CANCEL_ATTEMPTS):
            stored, last = await self.log.load(ref.subject)
            history = [codec.payload(e.envelope) for e in stored]
            submitted = next((e for e in history if isinstance(e, ev.JobSubmitted)), None)
            if submitted is None:
                raise RpcError(rpc.NOT_FOUND, f"job {job_id} not found")
            allow(principal, Permission.PROJECT_WRITE, tenant, submitted.project)
            ended = _ended(history)
            if ended is not None:
                raise RpcError(rpc.CONFLICT, f"job {job_id} has already {ended}")
            event = ev.JobCancelled(job_id=job_id, by=principal.id, reason=body.reason)
            env = envelope(
                event,
                subject=ref.subject,
                source=SOURCE,
                tenant=tenant,
                time=self.clock(),
                correlation_id=call.correlation_id,
            )
            try:
                [ack] = await self.log.append(ref.subject, [env], last)
            except ConcurrencyConflict:
                continue  # the scheduler decided about the job meanwhile: look again
            self.unavailable_unless(await self.projector.wait_until(ack.seq, self.visibility_timeout_s))
            return await self._require_job(tenant, job_id)
        raise RpcError(rpc.CONFLICT, f"job {job_id} is being changed by others; try again")

    # -- queries --------------------------------------------------------------------------------

    async def get_job(self, call: Call, body: None) -> api.JobView:
        """One job (``project.read`` on its project)."""
        return await self._visible_job(call)

    async def list_jobs(self, call: Call, body: None) -> Page[api.JobView]:
        """The tenant's jobs, newest first; ``scope`` may narrow by ``project``, ``queue`` and ``state``.

        A principal bound to some projects sees only theirs.

        Raises:
            RpcError: 400 for an unknown state or a bad cursor; 404 for an invisible project.
        """
        principal = call.require_principal()
        tenant = call.scope.get("tenant", "")
        allow(principal, Permission.TENANT_READ, tenant)
        project, queue, state = call.scope.get("project"), call.scope.get("queue"), call.scope.get("state")
        if state is not None and state not in JOB_STATES:
            raise RpcError(rpc.INVALID, f"state must be one of {', '.join(sorted(JOB_STATES))}")
        if project is not None:
            allow(principal, Permission.PROJECT_READ, tenant, project)
            projects: list[str] | None = [project]
        else:
            projects = bound_projects(principal, tenant)
        with bad_input():
            async with reads.scoped(self.pool, tenant) as conn:
                rows, cursor = await reads.job_page(
                    conn, tenant, call.page, projects=projects, queue=queue, state=state
                )
        return reads.page([reads.job_view(r) for r in rows], cursor)

    async def explain_job(self, call: Call, body: None) -> api.ExplainView:
        """Where the job is, why, and what would let it run; with its history, oldest first."""
        job = await self._visible_job(call)
        async with reads.scoped(self.pool, job.tenant) as conn:
            rows = await conn.fetch(
                "SELECT * FROM (SELECT seq, at, type, summary FROM job_history WHERE job_id = $1"
                " ORDER BY seq DESC LIMIT $2) h ORDER BY seq",
                job.id,
                HISTORY_LIMIT,
            )
        history = [{"at": r["at"].isoformat(), "type": r["type"], "summary": r["summary"]} for r in rows]
        return api.ExplainView(job=job, summary=await self._summary(job), history=history)

    # -- helpers --------------------------------------------------------------------------------

    async def _summary(self, job: api.JobView) -> str:
        if job.state in TERMINAL:
            return state_sentence(job)
        live = await self._live_explanation(job.id)
        if live:
            return live
        if job.state in WAITING and job.reason is not None:
            return f"waiting ({job.reason}): {job.message or ''}".rstrip(": ")
        return state_sentence(job)

    async def _live_explanation(self, job_id: str) -> str | None:
        """The active scheduler's own explanation, when one answers within a second."""
        try:
            answer = await rpc_runtime.call_as(
                Explanation,
                self.log.nc,
                LIVE_SERVICE,
                "explain",
                scope={"job": job_id},
                timeout_s=LIVE_TIMEOUT_S,
            )
        except (RpcError, msgspec.DecodeError):
            return None
        return answer.text or None

    async def _visible_job(self, call: Call) -> api.JobView:
        principal = call.require_principal()
        tenant, job_id = call.scope.get("tenant", ""), call.scope.get("job", "")
        allow(principal, Permission.TENANT_READ, tenant)
        job = await self._require_job(tenant, job_id)
        allow(principal, Permission.PROJECT_READ, tenant, job.project)
        return job

    async def _job(self, tenant: str, job_id: str) -> api.JobView | None:
        async with reads.scoped(self.pool, tenant) as conn:
            row = await conn.fetchrow("SELECT * FROM jobs WHERE tenant_id = $1 AND job_id = $2", tenant, job_id)
        return None if row is None else reads.job_view(row)

    async def _require_job(self, tenant: str, job_id: str) -> api.JobView:
        job = await self._job(tenant, job_id)
        if job is None:
            raise RpcError(rpc.NOT_FOUND, f"job {job_id} not found")
        return job

    async def _project_exists(self, tenant: str, project: str) -> bool:
        async with reads.scoped(self.pool, tenant) as conn:
            found = await conn.fetchval(
                "SELECT true FROM projects WHERE tenant_id = $1 AND project = $2", tenant, project
            )
        if found:
            return True
        return bool(await self.log.last_sequence(refs.project_ref(tenant, project).subject) > 0)

    async def _priority_class(self, name: str) -> tuple[int, bool] | None:
        """(value, preemptible) of a priority class; None when it does not exist."""
        async with reads.scoped(self.pool, "_system") as conn:
            row: asyncpg.Record | None = await conn.fetchrow(
                "SELECT value, preemptible FROM priority_classes WHERE name = $1", name
            )
        if row is not None:
            return int(row["value"]), bool(row["preemptible"])
        with bad_input():
            subject = refs.priority_class_ref(name).subject
        stored, _ = await self.log.load(subject)
        defined = [e for e in (codec.payload(s.envelope) for s in stored) if isinstance(e, tev.PriorityClassDefined)]
        return (defined[-1].value, defined[-1].preemptible) if defined else None


def _ended(history: list[Event]) -> str | None:
    """How the job ended (``finished``, ``been cancelled``), None while it has not."""
    for event in history:
        if isinstance(event, ev.JobFinished):
            return "finished"
        if isinstance(event, ev.JobCancelled):
            return "been cancelled"
    return None
