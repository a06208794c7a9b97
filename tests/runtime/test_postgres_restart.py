from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tessera_runtime import connect
from tessera_runtime.devstack import EmbeddedPostgres
from tessera_runtime.eventlog import AppendRequest, EventLog
from tessera_runtime.projector import Projector
from tessera_runtime.testing import SAMPLE_TOTALS, sample_event, sample_ref


@pytest.mark.slow
async def test_projector_resumes_after_a_postgres_restart(tmp_path: Path, log: EventLog) -> None:
    server = EmbeddedPostgres(tmp_path / "pg")
    url = server.start()
    try:
        pool = await connect.connect_postgres(url, min_size=1, max_size=4)
        stop = asyncio.Event()
        projector = Projector(SAMPLE_TOTALS, pool, log, batch_size=10, idle_fetch_s=0.2)
        follower = asyncio.create_task(projector.run(stop))
        refs = [sample_ref(i) for i in range(10)]
        for k in range(30):
            if k == 10:
                await asyncio.to_thread(server.restart)
            await log.append_many([AppendRequest(r.subject, [sample_event(r, 1)], None) for r in refs])
            await asyncio.sleep(0.02)
        for _ in range(300):
            if projector.position == 300:
                break
            await asyncio.sleep(0.1)
        stop.set()
        await asyncio.wait_for(follower, 10)
        rows = await pool.fetch("SELECT events FROM proj_sample_totals.totals")
        assert sorted(r["events"] for r in rows) == [30] * 10
        await pool.close()
    finally:
        server.stop()
