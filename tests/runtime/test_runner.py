"""The service runner as a process: shutdown while NATS is down, and a task that cannot go on."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from pathlib import Path

import asyncpg

from tessera_runtime.devstack import EmbeddedNats


def start_projections(nats_url: str, database_url: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tessera_cli.main", "projections", "run", "audit",
         "--nats-url", nats_url, "--database-url", database_url],
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


async def wait_for_schema(pool: asyncpg.Pool) -> None:
    for _ in range(100):
        if await pool.fetchval("SELECT to_regclass('proj_audit._checkpoint') IS NOT NULL"):
            return
        await asyncio.sleep(0.1)
    raise AssertionError("the projector never created its schema")


async def test_sigterm_while_nats_is_down_still_exits_cleanly(
    tmp_path: Path, pool: asyncpg.Pool, database_url: str
) -> None:
    server = EmbeddedNats(tmp_path / "nats")
    url = server.start()
    proc = start_projections(url, database_url)
    try:
        await wait_for_schema(pool)
        server.kill()
        await asyncio.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        _, stderr = await asyncio.to_thread(proc.communicate, timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
        server.stop()
    assert proc.returncode == 0, stderr
    assert '"event": "service.stopped"' in stderr


async def test_a_projector_that_cannot_go_on_stops_the_service_with_an_error(
    servers: object, pool: asyncpg.Pool, database_url: str
) -> None:
    nats_url = servers.nats_url  # type: ignore[attr-defined]
    proc = start_projections(nats_url, database_url)
    try:
        await wait_for_schema(pool)
        proc.send_signal(signal.SIGTERM)
        await asyncio.to_thread(proc.communicate, timeout=30)
        # Break the projection's schema the way a bad migration would, then start again.
        await pool.execute("ALTER TABLE proj_audit._checkpoint RENAME COLUMN version TO oops")
        proc = start_projections(nats_url, database_url)
        began = time.monotonic()
        _, stderr = await asyncio.to_thread(proc.communicate, timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1
    assert time.monotonic() - began < 25, "the service must stop by itself, not wait for a signal"
    assert '"event": "service.task_failed"' in stderr
    assert stderr.strip().splitlines()[-1].startswith("tessera: error: projections:")
