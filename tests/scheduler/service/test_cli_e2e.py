"""``tessera jobs`` as a user runs it: a real ``tessera`` process, the real gateway over HTTP, the real scheduler."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
from collections.abc import AsyncIterator
from typing import Any

import pytest
import uvicorn

from tessera_gateway.app import create_app
from tessera_gateway.settings import GatewaySettings
from tests.scheduler.service.conftest import World


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
async def gateway_url(world: World, servers: Any) -> AsyncIterator[str]:
    """The gateway served over HTTP on the test's event loop (so it shares the test's NATS connection)."""
    app = await create_app(
        world.nc, GatewaySettings(nats_url=servers.nats_url, idempotency_bucket=world.bucket + "_IDEM")
    )
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None, lifespan="off"))
    task = asyncio.create_task(server.serve())
    for _ in range(500):
        if server.started:
            break
        await asyncio.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task
        await world.nc.jetstream().delete_key_value(world.bucket + "_IDEM")


async def tessera(url: str, key: str, *args: str) -> tuple[int, str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("NATS_URL", "DATABASE_URL")}
    env |= {"TESSERA_URL": url, "TESSERA_API_KEY": key}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tessera_cli.main", *args, env=env, stdout=-1, stderr=-1
    )
    out, err = await process.communicate()
    return int(process.returncode or 0), out.decode(), err.decode()


async def test_submit_list_explain_cancel_through_the_cli(world: World, gateway_url: str) -> None:
    await world.tenant("acme", nominal=1000)
    await world.start_scheduler("s1")
    key = world.keys["acme-admin"]
    code, out, err = await tessera(
        gateway_url, key, "jobs", "submit", "-t", "acme", "-p", "vision", "--priority-class", "normal",
        "--gpus", "2", "--json", "--", "python", "train.py",
    )  # fmt: skip
    assert code == 0, err
    job = json.loads(out)
    assert job["name"] == "python" and job["gpus"] == 2
    await world.wait_job("acme", job["id"], "pending")
    reason = None
    for _ in range(200):
        reason = (await world.job("acme", job["id"]))["reason"]
        if reason is not None:
            break
        await asyncio.sleep(0.05)
    assert reason == "Unschedulable"  # no node at all yet

    code, out, err = await tessera(gateway_url, key, "jobs", "list", "-t", "acme", "--state", "pending")
    assert code == 0, err
    assert job["id"] in out and "Unschedulable" in out

    code, out, err = await tessera(gateway_url, key, "jobs", "explain", "-t", "acme", job["id"])
    assert code == 0, err
    assert "Unschedulable" in out.splitlines()[0] and "submitted" in out

    code, out, err = await tessera(gateway_url, key, "jobs", "cancel", "-t", "acme", job["id"])
    assert code == 0 and "cancelled" in out, err
    code, out, err = await tessera(gateway_url, key, "jobs", "cancel", "-t", "acme", job["id"])
    assert code == 5 and err.startswith("tessera: error: ") and "(conflict)" in err

    code, _, err = await tessera(gateway_url, key, "nodes", "list")
    assert code == 3, err  # a tenant admin is not a platform admin
