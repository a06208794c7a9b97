"""Fixtures: real NATS (JetStream) and real Postgres for every test, never mocks.

By default the session starts the embedded stack (the same one ``tessera dev up`` starts) in a
temporary folder. With ``TESSERA_TEST_NATS_URL`` and ``TESSERA_TEST_DATABASE_URL`` set, those
servers are used instead. Each test gets fresh streams (deleted and recreated) and a fresh
database of its own, so the servers must be ones whose data may be thrown away: ``NATS_URL`` and
``DATABASE_URL``, which may well point at a user's own stack, are deliberately not read.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import asyncpg
import nats
import nats.js.errors
import pytest
from nats.aio.client import Client as NATS

from tessera_contracts.streams import ALL_STREAMS
from tessera_runtime.devstack import EmbeddedStack
from tessera_runtime.eventlog import EventLog

pytest_plugins = ["tests.support.tenancy"]


class Servers:
    """Where the session's servers listen."""

    def __init__(self, nats_url: str, database_url: str) -> None:
        self.nats_url = nats_url
        self.database_url = database_url

    def database(self, name: str) -> str:
        """The URL of database ``name`` on the same server."""
        base, _, _ = self.database_url.rpartition("/")
        return f"{base}/{name}"


@pytest.fixture(scope="session")
def servers() -> Iterator[Servers]:
    if os.environ.get("TESSERA_TEST_NATS_URL") and os.environ.get("TESSERA_TEST_DATABASE_URL"):
        yield Servers(os.environ["TESSERA_TEST_NATS_URL"], os.environ["TESSERA_TEST_DATABASE_URL"])
        return
    # Not under pytest's own temp root: pytest keeps that 0700, and Postgres runs as another user.
    home = Path(tempfile.mkdtemp(prefix="tessera-tests-"))
    stack = EmbeddedStack(home)
    info = stack.start()
    try:
        yield Servers(info.nats_url, info.database_url)
    finally:
        stack.stop()
        shutil.rmtree(home, ignore_errors=True)


@pytest.fixture
async def nc(servers: Servers) -> AsyncIterator[NATS]:
    client = await nats.connect(servers.nats_url, name="tests")
    yield client
    await client.drain()


@pytest.fixture
async def log(nc: NATS) -> EventLog:
    """An event log with fresh, empty streams."""
    js = nc.jetstream()
    for spec in ALL_STREAMS:
        with contextlib.suppress(nats.js.errors.NotFoundError):
            await js.delete_stream(spec.name)
    event_log = EventLog(nc)
    await event_log.ensure_streams()
    return event_log


@pytest.fixture
async def database_url(servers: Servers) -> AsyncIterator[str]:
    """A fresh database, dropped after the test."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(servers.database_url)
    await admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield servers.database(name)
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


@pytest.fixture
async def pool(database_url: str) -> AsyncIterator[asyncpg.Pool]:
    p = await asyncpg.create_pool(database_url, min_size=1, max_size=6)
    assert p is not None
    yield p
    await p.close()


@pytest.fixture
def repo_root() -> Path:
    return Path(__file__).resolve().parent.parent
