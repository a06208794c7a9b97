"""Crashes and server restarts: nothing lost, nothing applied twice."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import asyncpg
import pytest

from tessera_runtime import connect
from tessera_runtime.devstack import EmbeddedNats
from tessera_runtime.errors import EventLogError
from tessera_runtime.eventlog import AppendRequest, EventLog
from tessera_runtime.projector import Projector
from tessera_runtime.testing import SAMPLE_TOTALS, sample_event, sample_ref

PROJECTOR_PROCESS = """
import asyncio, sys
from tessera_runtime import connect
from tessera_runtime.eventlog import AppendRequest, EventLog
from tessera_runtime.projector import Projector
from tessera_runtime.testing import SAMPLE_TOTALS

async def main():
    nc = await connect.connect_nats(sys.argv[1], "crash-test")
    pool = await connect.connect_postgres(sys.argv[2])
    projector = Projector(SAMPLE_TOTALS, pool, EventLog(nc), batch_size=int(sys.argv[3]))
    print("position", await projector.catch_up(), flush=True)

asyncio.run(main())
"""


async def test_projector_killed_at_random_moments_applies_every_event_exactly_once(
    servers: object, log: EventLog, pool: asyncpg.Pool, database_url: str
) -> None:
    aggregates, per = 30, 100
    refs = [sample_ref(i) for i in range(aggregates)]
    for k in range(per):
        await log.append_many([AppendRequest(r.subject, [sample_event(r, k)], None) for r in refs])
    rng = random.Random(20261129)  # seeded: a failing run replays
    nats_url = servers.nats_url  # type: ignore[attr-defined]
    kills = 0
    for _ in range(6):
        proc = subprocess.Popen(
            [sys.executable, "-c", PROJECTOR_PROCESS, nats_url, database_url, str(rng.choice([7, 50, 200]))],
            stdout=subprocess.PIPE,
        )
        await asyncio.sleep(rng.uniform(0.3, 1.5))
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            kills += 1
        proc.wait()
    final = subprocess.run(
        [sys.executable, "-c", PROJECTOR_PROCESS, nats_url, database_url, "100"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert final.stdout.split() == ["position", str(aggregates * per)]
    rows = await pool.fetch("SELECT aggregate, events, total FROM proj_sample_totals.totals")
    assert len(rows) == aggregates
    assert {(r["events"], r["total"]) for r in rows} == {(per, sum(range(per)))}
    assert kills >= 1, "the seed should kill at least one projector mid-run"


@pytest.mark.slow
async def test_appends_and_projector_survive_a_nats_restart(tmp_path: Path, pool: asyncpg.Pool) -> None:
    server = EmbeddedNats(tmp_path / "nats")
    url = server.start()
    try:
        nc = await connect.connect_nats(url, "restart-test")
        log = EventLog(nc, timeout_s=1.0)
        await log.ensure_streams()
        stop = asyncio.Event()
        projector = Projector(SAMPLE_TOTALS, pool, log, batch_size=25, idle_fetch_s=0.2)
        follower = asyncio.create_task(projector.run(stop))
        total, acknowledged, retries = 600, 0, 0
        restarted = asyncio.Event()

        async def writer() -> None:
            nonlocal acknowledged, retries
            for i in range(total):
                ref = sample_ref(i % 20)
                env = sample_event(ref, 1)  # one id per event: a retry is deduplicated
                while True:
                    try:
                        await log.append(ref.subject, [env], None)
                        break
                    except EventLogError:
                        retries += 1
                        await asyncio.sleep(0.1)
                acknowledged += 1
                if i == total // 3:
                    restarted.set()
                await asyncio.sleep(0.002)

        writing = asyncio.create_task(writer())
        await restarted.wait()
        await asyncio.to_thread(server.restart)
        await asyncio.wait_for(writing, 60)
        head = await log.head()
        for _ in range(300):
            if projector.position >= head:
                break
            await asyncio.sleep(0.1)
        stop.set()
        await asyncio.wait_for(follower, 10)
        assert acknowledged == total
        assert head == total, f"{head - total} events stored twice"
        rows = await pool.fetch("SELECT events, total FROM proj_sample_totals.totals")
        assert sum(r["events"] for r in rows) == total
        assert sum(r["total"] for r in rows) == total
        await nc.drain()
    finally:
        server.stop()


async def test_projection_service_stops_gracefully_on_sigterm(
    servers: object, log: EventLog, pool: asyncpg.Pool, database_url: str, repo_root: Path
) -> None:
    nats_url = servers.nats_url  # type: ignore[attr-defined]
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tessera_cli.main",
            "projections",
            "run",
            "audit",
            "--nats-url",
            nats_url,
            "--database-url",
            database_url,
        ],
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "TESSERA_LOG_LEVEL": "INFO"},
    )
    try:
        refs = [sample_ref(i) for i in range(50)]
        await log.append_many([AppendRequest(r.subject, [sample_event(r, 1), sample_event(r, 2)], 0) for r in refs])
        for _ in range(200):
            try:
                if await pool.fetchval("SELECT position FROM proj_audit._checkpoint") == 100:
                    break
            except asyncpg.UndefinedTableError:
                pass
            await asyncio.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        _, stderr = await asyncio.to_thread(proc.communicate, timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, stderr
    assert '"event": "service.stopped"' in stderr
    assert await pool.fetchval("SELECT count(*) FROM proj_audit.events") == 100
