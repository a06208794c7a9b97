"""The scheduler service in-process on the test's NATS and Postgres, behind the real gateway.

``world`` gives: the real tenancy service (``tests.support.tenancy``), one or more scheduler
instances (projector, RPC server, heartbeats, elector, decider with the real core), the gateway
app through ``httpx.ASGITransport``, and helpers that act as a node agent would: register a node
(``NodeRegistered`` in the log), beat (``hb.<node>``), finish a job (``JobFinished``).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import httpx
import nats.js.errors
import pytest
from nats.aio.client import Client as NATS

from tessera_contracts.api import tenancy as tapi
from tessera_contracts.envelope import envelope
from tessera_contracts.events import scheduler as ev
from tessera_contracts.heartbeat import Heartbeat, encode_heartbeat, heartbeat_subject
from tessera_contracts.registry import Event
from tessera_gateway.app import create_app
from tessera_gateway.settings import GatewaySettings
from tessera_runtime.eventlog import EventLog
from tessera_runtime.projector import Projector
from tessera_scheduler import refs
from tessera_scheduler.app import Scheduler, SchedulerSettings, build
from tessera_scheduler.projections import SCHEDULER
from tests.support.tenancy import Tenancy

FAST = SchedulerSettings(node_timeout_s=2.0, lease_s=2.0, renew_s=0.5, poll_s=0.25, cycle_s=0.05, min_runtime_s=0)


@dataclass
class Instance:
    """One scheduler instance and the tasks that run it."""

    name: str
    scheduler: Scheduler
    stop: asyncio.Event
    projector_task: asyncio.Task[None]
    elector_task: asyncio.Task[None]

    @property
    def leading(self) -> bool:
        return self.scheduler.elector.is_leader

    async def crash(self) -> None:
        """Die without a goodbye: the lease is not released, nothing is drained."""
        self.elector_task.cancel()
        self.scheduler.elector.lease.revision = None  # a dead process renews nothing and releases nothing
        with contextlib.suppress(asyncio.CancelledError):
            await self.elector_task
        await self.scheduler.stop()
        self.stop.set()
        await self.projector_task

    async def shutdown(self) -> None:
        self.stop.set()
        await asyncio.gather(self.elector_task, self.projector_task, return_exceptions=True)
        await self.scheduler.stop()


@dataclass
class World:
    """Tenancy, schedulers, gateway and a pretend node agent."""

    tenancy: Tenancy
    nc: NATS
    log: EventLog
    gateway: httpx.AsyncClient
    bucket: str
    instances: list[Instance] = field(default_factory=list)
    keys: dict[str, str] = field(default_factory=dict)
    beats: dict[str, asyncio.Task[None]] = field(default_factory=dict)

    # -- schedulers -----------------------------------------------------------------------------

    async def start_scheduler(self, name: str, settings: SchedulerSettings = FAST, *, elect: bool = True) -> Instance:
        """Start an instance; without ``elect`` it only projects and answers (it never contends)."""
        settings = SchedulerSettings(**{**_fields(settings), "lease_bucket": self.bucket})
        projector = Projector(SCHEDULER, self.tenancy.pool, self.log, idle_fetch_s=0.1)
        scheduler = await build(self.nc, self.log, self.tenancy.pool, projector, settings, holder=name)
        stop = asyncio.Event()
        instance = Instance(
            name,
            scheduler,
            stop,
            asyncio.create_task(projector.run(stop)),
            asyncio.create_task(scheduler.elector.run(stop) if elect else stop.wait()),
        )
        self.instances.append(instance)
        return instance

    async def leader(self, timeout_s: float = 10.0) -> Instance:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for instance in self.instances:
                if instance.leading and instance.scheduler.decider.leading:
                    return instance
            await asyncio.sleep(0.05)
        raise AssertionError("no scheduler became leader")

    # -- tenancy --------------------------------------------------------------------------------

    async def tenant(
        self,
        tenant: str,
        *,
        nominal: int = 0,
        model: str = "H100",
        cohort: str | None = None,
        borrowing_limit: int | None = None,
        projects: tuple[str, ...] = ("vision",),
    ) -> None:
        t = self.tenancy
        await t.call("create_tenant", tapi.CreateTenant(tenant=tenant, display_name=tenant.title()), as_=t.admin)
        for project in projects:
            await t.call(
                "create_project", tapi.CreateProject(project=project, display_name=project), as_=t.admin, tenant=tenant
            )
        if nominal:
            gpus = [tapi.GpuQuotaBody(gpu_model=model, nominal_milli=nominal, borrowing_limit_milli=borrowing_limit)]
            await t.call("set_quota", tapi.SetQuota(cohort=cohort, gpus=gpus), as_=t.admin, tenant=tenant)
        self.keys[f"{tenant}-admin"] = await self.key(tenant, f"admin-{tenant}", "tenant-admin")

    async def key(self, tenant: str, name: str, role: str, project: str | None = None) -> str:
        t = self.tenancy
        user = await t.call(
            "create_user", tapi.CreateUser(name=name, role=role, project=project), as_=t.admin, tenant=tenant
        )
        issued = await t.call(
            "issue_key", tapi.IssueKey(name="k"), as_=t.admin, result=tapi.IssuedKey, tenant=tenant, user=user["id"]
        )
        return str(issued.secret)

    async def priority_class(self, name: str, value: int, preemptible: bool = True) -> None:
        t = self.tenancy
        body = tapi.DefinePriorityClass(value=value, preemptible=preemptible)
        await t.call("define_priority_class", body, as_=t.admin, name=name)

    # -- HTTP -----------------------------------------------------------------------------------

    def headers(self, who: str = "platform") -> dict[str, str]:
        key = self.tenancy.admin_key if who == "platform" else self.keys[who]
        return {"Authorization": f"Bearer {key}"}

    async def submit(self, tenant: str, project: str = "vision", who: str | None = None, **body: Any) -> dict[str, Any]:
        payload = {"name": "train", "priority_class": "normal", "command": ["python", "train.py"], **body}
        response = await self.gateway.post(
            f"/v1/tenants/{tenant}/projects/{project}/jobs",
            json=payload,
            headers=self.headers(who or f"{tenant}-admin"),
        )
        assert response.status_code == 201, response.text
        job: dict[str, Any] = response.json()
        return job

    async def job(self, tenant: str, job_id: str, who: str | None = None) -> dict[str, Any]:
        response = await self.gateway.get(
            f"/v1/tenants/{tenant}/jobs/{job_id}", headers=self.headers(who or "platform")
        )
        assert response.status_code == 200, response.text
        job: dict[str, Any] = response.json()
        return job

    async def wait_job(self, tenant: str, job_id: str, *states: str, timeout_s: float = 10.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        job = await self.job(tenant, job_id)
        while job["state"] not in states:
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"job {job_id} is {job['state']} ({job['reason']}: {job['message']}), not {states}"
                )
            await asyncio.sleep(0.05)
            job = await self.job(tenant, job_id)
        return job

    # -- the node agent's part ------------------------------------------------------------------

    async def append(self, ref_subject: str, tenant: str, event: Event) -> int:
        env = envelope(
            event, subject=ref_subject, source="tessera/test-agent", tenant=tenant, time=datetime.now(UTC),
            correlation_id="test-agent",
        )  # fmt: skip
        [ack] = await self.log.append(ref_subject, [env], None)
        return ack.seq

    async def register_node(self, node: str, gpus: int = 1, model: str = "H100", beat: bool = True) -> None:
        if beat:
            self.start_beating(node)
        devices = tuple(ev.DeviceInfo(uuid=f"GPU-{node}-{i}", model=model, memory_mib=81920) for i in range(gpus))
        event = ev.NodeRegistered(node=node, cluster="c1", cpu_milli=64_000, memory_mib=512_000, devices=devices)
        await self.append(refs.node_ref(node).subject, "_system", event)

    def start_beating(self, node: str, every_s: float = 0.2) -> None:
        async def beat() -> None:
            seq = 0
            while True:
                seq += 1
                data = encode_heartbeat(Heartbeat(node=node, at=datetime.now(UTC), seq=seq))
                await self.nc.publish(heartbeat_subject(node), data)
                await asyncio.sleep(every_s)

        self.beats[node] = asyncio.create_task(beat())

    def stop_beating(self, node: str) -> None:
        self.beats.pop(node).cancel()

    async def finish(self, tenant: str, job_id: str, outcome: str = "succeeded") -> None:
        await self.append(refs.job_ref(tenant, job_id).subject, tenant, ev.JobFinished(job_id=job_id, outcome=outcome))  # type: ignore[arg-type]


def _fields(settings: SchedulerSettings) -> dict[str, Any]:
    return {name: getattr(settings, name) for name in settings.__struct_fields__}


@pytest.fixture
async def world(tenancy: Tenancy, nc: NATS, log: EventLog, servers: Any) -> AsyncIterator[World]:
    bucket = f"TEST_LEASES_{uuid.uuid4().hex[:10]}"
    idempotency = f"TEST_IDEMPOTENCY_{uuid.uuid4().hex[:10]}"
    app = await create_app(
        nc, GatewaySettings(nats_url=servers.nats_url, rpc_timeout_s=5.0, idempotency_bucket=idempotency)
    )
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gateway.test") as client:
        w = World(tenancy, nc, log, client, bucket)
        await w.priority_class("normal", 10)
        await w.priority_class("high", 100, preemptible=False)
        try:
            yield w
        finally:
            for task in w.beats.values():
                task.cancel()
            for instance in w.instances:
                await instance.shutdown()
    js = nc.jetstream()
    for name in (bucket, idempotency):
        with contextlib.suppress(nats.js.errors.NotFoundError):
            await js.delete_key_value(name)
