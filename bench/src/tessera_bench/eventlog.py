"""``tessera bench eventlog``: append, projection and replay throughput of the event log.

Method (all from one process, on whatever machine runs it):

- append: ``events`` events over ``aggregates`` aggregates, every append carrying
  ``Nats-Expected-Last-Subject-Sequence`` and ``Nats-Msg-Id``; one round appends one event to
  every aggregate, pipelined (``EventLog.append_many``); rounds follow each other, each expecting
  the sequences the previous round got. Measured on a server with the default fsync policy, and
  again on one with ``sync_interval: always``.
- project: the ``audit`` projection catches up over those events (live projector, batches of
  1,000 events, one transaction each).
- replay: the log is grown to ``replay_events`` events, then ``replay.rebuild`` rebuilds the
  ``audit`` projection from sequence 1 into a fresh schema and swaps it in.

Unless ``--nats-url``/``--database-url`` are given, each run starts its own embedded servers in a
temporary folder, so the figures do not depend on what else a stack holds.
"""

from __future__ import annotations

import asyncio
import os
import platform
import tempfile
import time
from pathlib import Path
from typing import Any

from tessera_contracts import codec
from tessera_runtime import connect, replay
from tessera_runtime.audit import AUDIT
from tessera_runtime.devstack import EmbeddedNats, EmbeddedStack
from tessera_runtime.eventlog import AppendRequest, EventLog
from tessera_runtime.projector import Projector
from tessera_runtime.testing import sample_event, sample_ref


async def append_events(log: EventLog, events: int, aggregates: int, note: str, start: int = 0) -> float:
    """Append ``events`` events round-robin over ``aggregates`` aggregates; returns seconds taken."""
    refs = [sample_ref(start + i) for i in range(aggregates)]
    last = [await log.last_sequence(r.subject) for r in refs]
    began = time.perf_counter()
    done = 0
    while done < events:
        n = min(aggregates, events - done)
        requests = [
            AppendRequest(refs[i].subject, [sample_event(refs[i], done + i, note=note)], last[i]) for i in range(n)
        ]
        for i, result in enumerate(await log.append_many(requests)):
            if not isinstance(result, list):
                raise result
            last[i] = result[-1].seq
        done += n
    return time.perf_counter() - began


async def _measure(
    nats_url: str, database_url: str, events: int, aggregates: int, note: str, replay_events: int
) -> dict[str, Any]:
    nc = await connect.connect_nats(nats_url, "bench", deadline_s=10)
    pool = await connect.connect_postgres(database_url, deadline_s=10)
    try:
        log = EventLog(nc)
        await log.ensure_streams()
        append_s = await append_events(log, events, aggregates, note)
        sample = sample_event(sample_ref(0), 0, note=note)
        out: dict[str, Any] = {
            "events": events,
            "aggregates": aggregates,
            "payload_bytes": len(sample.data),
            "message_bytes": len(codec.encode(sample)),
            "append_events_per_s": round(events / append_s),
        }
        async with pool.acquire() as conn:
            await conn.execute("DROP SCHEMA IF EXISTS proj_audit CASCADE")
        projector = Projector(AUDIT, pool, log, batch_size=1000)
        began = time.perf_counter()
        await projector.catch_up()
        project_s = time.perf_counter() - began
        out["projected_events"] = projector.position
        out["project_events_per_s"] = round(projector.position / project_s)
        grow = replay_events - await log.head()
        if grow > 0:
            await append_events(log, grow, aggregates, note, start=aggregates)
        began = time.perf_counter()
        position = await replay.rebuild(pool, log, AUDIT, batch_size=5000)
        replay_s = time.perf_counter() - began
        out |= {
            "replay_events": position,
            "replay_wall_s": round(replay_s, 2),
            "replay_events_per_s": round(position / replay_s),
        }
        out["postgres"] = await pool.fetchval("SHOW server_version")
        version = nc.connected_server_version
        out["nats_server"] = f"{version.major}.{version.minor}.{version.patch}"
        return out
    finally:
        await pool.close()
        await nc.drain()


async def _append_only(nats_url: str, events: int, aggregates: int, note: str) -> float:
    nc = await connect.connect_nats(nats_url, "bench", deadline_s=10)
    try:
        log = EventLog(nc)
        await log.ensure_streams()
        return events / await append_events(log, events, aggregates, note)
    finally:
        await nc.drain()


def run(
    *,
    events: int = 200_000,
    aggregates: int = 1000,
    payload_bytes: int = 256,
    replay_events: int = 1_000_000,
    sync_events: int = 50_000,
    nats_url: str | None = None,
    database_url: str | None = None,
) -> dict[str, Any]:
    """Run the benchmark and return its figures (see the module docstring for the method)."""
    note = "x" * max(0, payload_bytes - 16)  # the rest of the payload is {"n":…,"note":""}
    result: dict[str, Any] = {"benchmark": "eventlog", "cpus": os.cpu_count(), "python": platform.python_version()}
    if nats_url and database_url:
        result |= asyncio.run(_measure(nats_url, database_url, events, aggregates, note, replay_events))
        result["servers"] = "given"
        return result
    with tempfile.TemporaryDirectory(prefix="tessera-bench-") as tmp:
        with EmbeddedStack(Path(tmp) / "default") as stack:
            info = stack.info
            result |= asyncio.run(_measure(info.nats_url, info.database_url, events, aggregates, note, replay_events))
        if sync_events:
            nats_always = EmbeddedNats(Path(tmp) / "always", sync_interval="always")
            url = nats_always.start()
            try:
                rate = asyncio.run(_append_only(url, sync_events, aggregates, note))
            finally:
                nats_always.stop()
            result["append_sync_always_events"] = sync_events
            result["append_sync_always_events_per_s"] = round(rate)
    result["servers"] = "embedded"
    return result
