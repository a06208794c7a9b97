from __future__ import annotations

import pytest

from tessera_contracts.streams import EVENTS
from tessera_runtime.errors import ConcurrencyConflict, EventLogError
from tessera_runtime.eventlog import AppendRequest, EventLog
from tessera_runtime.testing import sample_event, sample_ref


async def test_append_then_load_in_order(log: EventLog) -> None:
    ref = sample_ref(1)
    acks = await log.append(ref.subject, [sample_event(ref, n) for n in (5, 6, 7)], expected_last_seq=0)
    assert [a.seq for a in acks] == [1, 2, 3]
    events, last = await log.load(ref.subject)
    assert last == 3
    assert [e.seq for e in events] == [1, 2, 3]
    assert [e.envelope.subject for e in events] == [ref.subject] * 3


async def test_load_of_unknown_aggregate_is_empty(log: EventLog) -> None:
    assert await log.load(sample_ref(404).subject) == ([], 0)


async def test_concurrent_writer_gets_a_typed_conflict_then_retries(log: EventLog) -> None:
    ref = sample_ref(1)
    await log.append(ref.subject, [sample_event(ref, 1)], expected_last_seq=0)
    # A second writer that loaded the aggregate when it was empty is stale.
    with pytest.raises(ConcurrencyConflict) as info:
        await log.append(ref.subject, [sample_event(ref, 2)], expected_last_seq=0)
    assert info.value.subject == ref.subject
    # Reload, re-decide, retry: now it goes through.
    _, last = await log.load(ref.subject)
    acks = await log.append(ref.subject, [sample_event(ref, 2)], expected_last_seq=last)
    assert acks[0].seq == last + 1
    # Another aggregate's appends do not move this aggregate's expected sequence.
    other = sample_ref(2)
    await log.append(other.subject, [sample_event(other, 9)], expected_last_seq=0)
    with pytest.raises(ConcurrencyConflict):
        await log.append(ref.subject, [sample_event(ref, 3)], expected_last_seq=last)


async def test_retried_append_is_stored_once(log: EventLog) -> None:
    ref = sample_ref(1)
    env = sample_event(ref, 1)
    first = await log.append(ref.subject, [env], expected_last_seq=0)
    # The client did not see the ack and retries the very same envelope, with the same
    # expectation: the server answers "duplicate" with the original sequence, not a conflict.
    again = await log.append(ref.subject, [env], expected_last_seq=0)
    assert first[0].duplicate is False
    assert again[0].duplicate is True
    assert again[0].seq == first[0].seq
    assert await log.head() == 1
    info = await log.js.stream_info(EVENTS.name)
    assert info.state.messages == 1


async def test_retried_multi_event_append_is_stored_once(log: EventLog) -> None:
    ref = sample_ref(1)
    envs = [sample_event(ref, 1), sample_event(ref, 2)]
    first = await log.append(ref.subject, envs, expected_last_seq=0)
    again = await log.append(ref.subject, envs, expected_last_seq=0)
    assert [a.seq for a in again] == [a.seq for a in first] == [1, 2]
    assert all(a.duplicate for a in again)
    assert await log.head() == 2
    # A different event with the same stale expectation is still a conflict.
    with pytest.raises(ConcurrencyConflict):
        await log.append(ref.subject, [sample_event(ref, 3)], expected_last_seq=0)


async def test_append_many_pipelines_across_aggregates(log: EventLog) -> None:
    refs = [sample_ref(i) for i in range(200)]
    requests = [AppendRequest(r.subject, [sample_event(r, 1), sample_event(r, 2)], 0) for r in refs]
    requests.append(AppendRequest(refs[0].subject, [sample_event(refs[0], 3)], 0))  # stale
    results = await log.append_many(requests)
    assert all(isinstance(r, list) and len(r) == 2 for r in results[:-1])
    assert isinstance(results[-1], ConcurrencyConflict)
    assert await log.head() == 400
    for r in refs[:5]:
        events, _ = await log.load(r.subject)
        assert [e.envelope.data for e in events] == [
            sample_event(r, 1).data,
            sample_event(r, 2).data,
        ]


async def test_stream_is_append_only(log: EventLog) -> None:
    ref = sample_ref(1)
    await log.append(ref.subject, [sample_event(ref, 1)], expected_last_seq=0)
    info = await log.js.stream_info(EVENTS.name)
    assert info.config.deny_delete and info.config.deny_purge
    assert not info.config.allow_rollup_hdrs
    assert info.config.duplicate_window == EVENTS.duplicate_window_s
    with pytest.raises(Exception, match=r"(?i)purge"):
        await log.js.purge_stream(EVENTS.name)
    with pytest.raises(Exception, match=r"(?i)delete"):
        await log.js.delete_msg(EVENTS.name, 1)


async def test_envelope_subject_must_match(log: EventLog) -> None:
    a, b = sample_ref(1), sample_ref(2)
    with pytest.raises(ValueError, match="subject"):
        await log.append(a.subject, [sample_event(b, 1)], expected_last_seq=None)


async def test_an_unsendable_event_fails_its_own_request_only(log: EventLog) -> None:
    big, small = sample_ref(1), sample_ref(2)
    results = await log.append_many(
        [
            AppendRequest(big.subject, [sample_event(big, 1, note="x" * 2_000_000)], 0),  # over max_payload
            AppendRequest(small.subject, [sample_event(small, 1)], 0),
        ]
    )
    assert isinstance(results[0], EventLogError) and "not sent" in str(results[0])
    assert isinstance(results[1], list) and results[1][0].seq == 1
    assert await log.head() == 1


async def test_existing_streams_are_not_reconfigured(log: EventLog) -> None:
    info = await log.js.stream_info(EVENTS.name)
    info.config.duplicate_window = 30.0
    info.config.description = "tuned by the operator"
    await log.js.update_stream(info.config)
    await log.ensure_streams(replicas=1)
    after = await log.js.stream_info(EVENTS.name)
    assert (after.config.duplicate_window, after.config.description) == (30.0, "tuned by the operator")


async def test_a_missing_stream_and_a_short_aggregate_are_clear_errors(log: EventLog) -> None:
    ref = sample_ref(1)
    await log.append(ref.subject, [sample_event(ref, 1)], 0)
    with pytest.raises(EventLogError, match="ends before sequence 9"):
        await log._read_subject(ref.subject, 9)
    await log.js.delete_stream(EVENTS.name)
    with pytest.raises(EventLogError, match="no event log"):
        await log.head()
