"""The lease: compare-and-set on the key's revision, expiry judged on the standby's own clock."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator

import nats.js.errors
import pytest
from nats.aio.client import Client as NATS

from tessera_runtime.eventlog import EventLog
from tessera_scheduler.leader import Lease, elect, last_election


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def bucket(nc: NATS) -> AsyncIterator[str]:
    name = f"TEST_LEASES_{uuid.uuid4().hex[:10]}"
    yield name
    with contextlib.suppress(nats.js.errors.NotFoundError):
        await nc.jetstream().delete_key_value(name)


async def test_one_holder_at_a_time_and_takeover_only_after_expiry(nc: NATS, bucket: str) -> None:
    mono, wall = Clock(), Clock()
    a = await Lease.open(nc.jetstream(), "a", 5.0, bucket=bucket)
    b = await Lease.open(nc.jetstream(), "b", 5.0, bucket=bucket)
    for lease in (a, b):
        lease._mono, lease._wall = mono, wall
    assert await a.try_acquire()
    assert not await b.try_acquire()  # b starts watching a's revision now
    mono.now += 3.0
    assert await a.renew()  # a new revision: b's watch starts over
    mono.now += 3.0
    assert not await b.try_acquire()
    mono.now += 4.9
    assert not await b.try_acquire()
    mono.now += 0.2  # a's revision unchanged for 5 s of b's clock
    assert await b.try_acquire()
    assert not await a.renew(), "the old holder learns at once that it lost"
    assert not await a.try_acquire()


async def test_a_released_lease_is_taken_at_once(nc: NATS, bucket: str) -> None:
    a = await Lease.open(nc.jetstream(), "a", 5.0, bucket=bucket)
    b = await Lease.open(nc.jetstream(), "b", 5.0, bucket=bucket)
    assert await a.try_acquire()
    assert not await b.try_acquire()
    await a.release()
    assert await b.try_acquire()


async def test_a_long_dead_holder_is_replaced_by_a_fresh_standby(nc: NATS, bucket: str) -> None:
    wall = Clock()
    a = await Lease.open(nc.jetstream(), "a", 5.0, bucket=bucket)
    a._wall = wall
    assert await a.try_acquire()
    fresh = await Lease.open(nc.jetstream(), "fresh", 5.0, bucket=bucket)
    fresh._wall = Clock()
    fresh._wall.now = wall.now + 60.0  # the record says it expired long ago
    assert await fresh.try_acquire()


async def test_elections_are_strictly_increasing_and_exclusive(log: EventLog) -> None:
    assert await last_election(log) == (0, 0)
    first = await elect(log, "a")
    second = await elect(log, "b")
    assert first is not None and second is not None
    assert (first.epoch, second.epoch) == (1, 2) and second.seq > first.seq
    assert await last_election(log) == (2, second.seq)
