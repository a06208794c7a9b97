"""``python -m tessera_gateway`` as its own process: uvicorn on a port, JSON access log, no key in logs."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import uuid
from typing import Any

import httpx
import nats.js.errors
from gateway_support import ADMIN, ADMIN_KEY, FakeTenancy, assert_problem, bearer


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_gateway_process_serves_and_never_logs_keys(servers: Any, fake: FakeTenancy, tmp_path):
    port = _free_port()
    bucket = f"TEST_IDEMPOTENCY_{uuid.uuid4().hex[:10]}"
    env = {
        **os.environ,
        "NATS_URL": servers.nats_url,
        "TESSERA_RPC_TIMEOUT_S": "2",
        "TESSERA_LOG_FORMAT": "json",
        "TESSERA_HOME": str(tmp_path),
        "TESSERA_IDEMPOTENCY_BUCKET": bucket,
    }
    stderr_path = tmp_path / "gateway.stderr"
    bad_key = "tsk_wrong_" + uuid.uuid4().hex
    with stderr_path.open("wb") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tessera_gateway", "--host", "127.0.0.1", "--port", str(port)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=5) as http:
            for _ in range(200):
                try:
                    health = await http.get("/healthz")
                    break
                except httpx.TransportError:
                    assert proc.poll() is None, stderr_path.read_text()
                    await asyncio.sleep(0.1)
            else:
                raise AssertionError("gateway did not come up: " + stderr_path.read_text())
            assert health.status_code == 200 and health.json() == {"status": "ok"}

            me = await http.get("/v1/me", headers={**bearer(ADMIN_KEY), "X-Request-Id": "proc-test-1"})
            assert me.status_code == 200 and me.json()["id"] == ADMIN.id
            assert me.headers["x-request-id"] == "proc-test-1"
            assert "server" not in me.headers
            assert_problem(await http.get("/v1/me", headers=bearer(bad_key)), 401, "unauthenticated")
            assert_problem(await http.get("/v1/nowhere"), 404, "not-found")
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            assert proc.wait(timeout=15) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
            with contextlib.suppress(nats.js.errors.NotFoundError):
                await fake.nc.jetstream().delete_key_value(bucket)

    log = stderr_path.read_text()
    assert ADMIN_KEY not in log and bad_key not in log
    lines = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    access = [line for line in lines if line.get("event") == "http.request"]
    me_line = next(line for line in access if line["request_id"] == "proc-test-1")
    assert me_line | {"ms": 0} == me_line | {
        "method": "GET",
        "path": "/v1/me",
        "route": "/v1/me",
        "status": 200,
        "principal": ADMIN.id,
        "ms": 0,
    }
    assert any(line["status"] == 401 and line["principal"] is None for line in access)
    assert any(line["status"] == 404 and line["path"] == "/v1/nowhere" for line in access)
    assert all(line["service"] == "gateway" for line in lines if "service" in line)
    assert lines[-1]["event"] == "gateway.stopped"
