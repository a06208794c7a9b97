"""The embedded stack: NATS (JetStream) and Postgres as child processes on loopback ports."""

from __future__ import annotations

import asyncio
import json
import os
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncpg
import nats
import pytest
from nats.js.api import StorageType, StreamConfig

from tessera_runtime import devstack
from tessera_runtime.devstack import EmbeddedStack, StackError, StackInfo
from tessera_runtime.devstack.process import port_is_free

START_BUDGET_S = 10.0


@pytest.fixture(scope="module")
def started(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[EmbeddedStack, float]]:
    stack = EmbeddedStack(tmp_path_factory.mktemp("devstack"), sync_interval="always")
    began = time.monotonic()
    try:
        stack.start()
        elapsed = time.monotonic() - began
        yield stack, elapsed
    finally:
        stack.stop()


@pytest.fixture
def stack(started: tuple[EmbeddedStack, float]) -> EmbeddedStack:
    return started[0]


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0]
    return state == "Z"  # exited; a non-reaping PID 1 (some containers) keeps the zombie


# -- NATS / Postgres clients (asyncio.run inside plain sync tests)


async def _js_account_info(url: str) -> Any:
    nc = await nats.connect(url, connect_timeout=2, max_reconnect_attempts=0)
    try:
        return await nc.jetstream().account_info()
    finally:
        await nc.close()


async def _js_publish(url: str, stream: str, count: int) -> None:
    nc = await nats.connect(url, connect_timeout=2, max_reconnect_attempts=0)
    try:
        js = nc.jetstream()
        await js.add_stream(StreamConfig(name=stream, subjects=[f"{stream}.>"], storage=StorageType.FILE))
        for i in range(count):
            await js.publish(f"{stream}.x", f"m{i}".encode())
    finally:
        await nc.close()


async def _js_messages(url: str, stream: str) -> int:
    nc = await nats.connect(url, connect_timeout=2, max_reconnect_attempts=0)
    try:
        info = await nc.jetstream().stream_info(stream)
        return int(info.state.messages)
    finally:
        await nc.close()


async def _pg(url: str, *sql: str) -> list[Any]:
    conn = await asyncpg.connect(url, timeout=5)
    try:
        out: list[Any] = []
        for statement in sql:
            out.append(await conn.fetch(statement))
        return out
    finally:
        await conn.close()


# -- the owned stack


def test_starts_within_budget(started: tuple[EmbeddedStack, float]) -> None:
    stack, elapsed = started
    print(f"embedded stack started in {elapsed:.2f} s")
    assert elapsed < START_BUDGET_S
    info = stack.info
    assert info.nats_url == f"nats://127.0.0.1:{stack.nats.port}"
    assert info.database_url == f"postgresql://postgres@127.0.0.1:{stack.postgres.port}/tessera"
    assert info.nats_pid > 0 and info.postgres_pid > 0
    assert (stack.home / "nats" / "nats.log").exists()
    assert (stack.home / "postgres" / "postgres.log").exists()


def test_nats_answers_with_jetstream(stack: EmbeddedStack) -> None:
    info = asyncio.run(_js_account_info(stack.nats.url))
    assert info.limits is not None


def test_nats_sync_interval_reaches_server(stack: EmbeddedStack) -> None:
    assert "sync_interval" in stack.nats.config_path.read_text()
    url = f"http://127.0.0.1:{stack.nats.monitor_port}/varz"
    with urllib.request.urlopen(url, timeout=2) as resp:
        varz = json.load(resp)
    assert varz["jetstream"]["config"]["sync_always"] is True


def test_postgres_answers(stack: EmbeddedStack) -> None:
    rows = asyncio.run(_pg(stack.postgres.url, "select 1 as one", "select current_database()"))
    assert rows[0][0]["one"] == 1
    assert rows[1][0][0] == "tessera"


def test_nats_restart_keeps_port_and_stream(stack: EmbeddedStack) -> None:
    url, pid = stack.nats.url, stack.nats.pid
    asyncio.run(_js_publish(url, "DEVSTACK", 3))
    assert stack.nats.restart() == url
    assert stack.nats.pid != pid
    assert asyncio.run(_js_messages(url, "DEVSTACK")) == 3


def test_postgres_restart_keeps_port_and_data(stack: EmbeddedStack) -> None:
    url, pid = stack.postgres.url, stack.postgres.pid
    asyncio.run(_pg(url, "create table kept (v int)", "insert into kept values (41), (42)"))
    assert stack.postgres.restart() == url
    assert stack.postgres.pid != pid
    rows = asyncio.run(_pg(url, "select sum(v) from kept"))
    assert rows[0][0][0] == 83


def test_postgres_recovers_after_kill(stack: EmbeddedStack) -> None:
    url, pid = stack.postgres.url, stack.postgres.pid
    assert pid is not None
    asyncio.run(_pg(url, "create table crashed (v int)", "insert into crashed values (7)"))
    stack.postgres.kill()
    assert stack.postgres.pid is None
    assert _gone(pid)
    assert stack.postgres.start() == url
    rows = asyncio.run(_pg(url, "select v from crashed"))
    assert rows[0][0][0] == 7


def test_second_postgres_on_same_data_is_refused(stack: EmbeddedStack) -> None:
    other = devstack.EmbeddedPostgres(stack.postgres.data_dir)
    with pytest.raises(StackError, match="already running"):
        other.start()


# -- detached mode (tessera dev up / down)


def test_up_is_idempotent_and_down_stops(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NATS_URL", raising=False)
    monkeypatch.delenv("DATABASE_URL", raising=False)
    home = tmp_path / "home"
    try:
        first = devstack.up(home)
        record = json.loads((home / "stack.json").read_text())
        assert record["nats_url"] == first.nats_url
        assert record["postgres_pid"] == first.postgres_pid

        again = devstack.up(home)
        assert again == first
        assert devstack.status(home) == first
        assert devstack.resolve_urls(home) == (first.nats_url, first.database_url)
        assert asyncio.run(_pg(first.database_url, "select 1"))[0][0][0] == 1

        assert devstack.down(home) is True
        assert _gone(first.nats_pid)
        assert _gone(first.postgres_pid)
        assert not (home / "stack.json").exists()
        assert (home / "postgres" / "data" / "PG_VERSION").exists()  # data kept
        assert devstack.status(home) is None
        assert devstack.down(home) is False
        with pytest.raises(StackError, match="no stack running"):
            devstack.resolve_urls(home)

        # up after down: same ports (stable URLs), new processes
        third = devstack.up(home)
        assert (third.nats_url, third.database_url) == (first.nats_url, first.database_url)
        assert third.postgres_pid != first.postgres_pid
    finally:
        devstack.down(home)


def test_resolve_urls_prefers_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NATS_URL", "nats://nats.example:4222")
    monkeypatch.setenv("DATABASE_URL", "postgresql://db.example/tessera")
    assert devstack.resolve_urls(tmp_path) == (
        "nats://nats.example:4222",
        "postgresql://db.example/tessera",
    )
    monkeypatch.delenv("DATABASE_URL")
    with pytest.raises(StackError, match="no stack running"):
        devstack.resolve_urls(tmp_path)


def test_stack_info_fields() -> None:
    info = StackInfo("nats://x:1", "postgresql://y:2/tessera", 10, 11, Path("/h"))
    assert (info.nats_pid, info.postgres_pid, info.home) == (10, 11, Path("/h"))


def test_free_port_is_bindable() -> None:
    port = devstack.free_port()
    assert 0 < port < 65536
    assert port_is_free(port)
