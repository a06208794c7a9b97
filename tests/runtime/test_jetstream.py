from __future__ import annotations

import pytest
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg

from tessera_runtime.eventlog import EventLog
from tessera_runtime.jetstream import ReaderGap, parse_ack_subject
from tessera_runtime.testing import sample_event, sample_ref


def test_ack_subjects_of_both_formats() -> None:
    assert parse_ack_subject("$JS.ACK.S.C.1.42.7.1700000000.3") == (42, 7, 3)
    assert parse_ack_subject("$JS.ACK.dom.acchash.S.C.1.42.7.1700000000.3.tok") == (42, 7, 3)
    with pytest.raises(ValueError):
        parse_ack_subject("_INBOX.x")


async def test_a_lost_delivery_is_a_gap_not_a_skip(nc: NATS, log: EventLog) -> None:
    ref = sample_ref(1)
    await log.append(ref.subject, [sample_event(ref, n) for n in range(3)], 0)
    async with log.reader(("ev.>",), start_seq=1) as reader:
        # Deliveries as the server makes them, the second one lost on the way.
        for cseq in (1, 3):
            reply = f"$JS.ACK.TESSERA_EVENTS.{reader.consumer}.1.{cseq}.{cseq}.1700000000.0"
            await reader._on_msg(Msg(nc, subject=ref.subject, reply=reply, data=b"{}"))
        with pytest.raises(ReaderGap, match="jumped from 1 to 3"):
            await reader.fetch(10, timeout_s=0.5)


async def test_a_reconnect_while_reading_is_a_gap(nc: NATS, log: EventLog) -> None:
    ref = sample_ref(1)
    await log.append(ref.subject, [sample_event(ref, 1)], 0)
    async with log.reader(("ev.>",), start_seq=1) as reader:
        assert [m.seq for m in await reader.fetch(10, timeout_s=1)] == [1]
        nc.stats["reconnects"] += 1  # what nats-py counts when it re-establishes the connection
        with pytest.raises(ReaderGap, match="re-established"):
            await reader.fetch(10, timeout_s=0.5)
