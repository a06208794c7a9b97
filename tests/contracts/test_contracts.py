from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import msgspec
import pytest

from tessera_contracts import codec
from tessera_contracts.envelope import envelope
from tessera_contracts.registry import DuplicateEventType, Event, UnknownEventType, event_type, lookup
from tessera_contracts.schema import dump
from tessera_contracts.subjects import AggregateRef, InvalidSubject, dead_letter_subject, tenant_filter
from tessera_runtime.testing import SampleRecorded, sample_event, sample_ref

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def test_envelope_carries_cloudevents_attributes_and_extensions() -> None:
    ref = sample_ref(7)
    env = envelope(
        SampleRecorded(n=3),
        subject=ref.subject,
        source="tessera/test",
        tenant="acme",
        time=NOW,
        correlation_id="req-1",
        causation_id="cmd-1",
    )
    doc = json.loads(codec.encode(env))
    assert doc["specversion"] == "1.0"
    assert doc["type"] == "tessera.testing.sample.recorded.v1"
    assert doc["datacontenttype"] == "application/json"
    assert doc["time"] == "2026-11-29T12:00:00Z"
    assert (doc["tenant"], doc["correlationid"], doc["causationid"]) == ("acme", "req-1", "cmd-1")
    assert doc["data"] == {"n": 3, "note": ""}
    assert len(doc["id"]) == 32


def test_round_trip_and_payload_decoding() -> None:
    env = sample_event(sample_ref(1), 42, note="hi")
    back = codec.decode_envelope(codec.encode(env))
    assert back == env
    assert codec.payload(back) == SampleRecorded(n=42, note="hi")


def test_readers_ignore_unknown_fields_from_newer_writers() -> None:
    doc = json.loads(codec.encode(sample_event(sample_ref(1), 5)))
    doc["newattr"] = "x"
    doc["data"]["added_in_v1_1"] = [1, 2]
    back = codec.decode_envelope(json.dumps(doc).encode())
    assert codec.payload(back) == SampleRecorded(n=5)


def test_unknown_type_and_bad_payload_are_typed_errors() -> None:
    doc = json.loads(codec.encode(sample_event(sample_ref(1), 5)))
    doc["type"] = "tessera.testing.sample.vanished.v9"
    with pytest.raises(UnknownEventType):
        codec.payload(codec.decode_envelope(json.dumps(doc).encode()))
    doc["type"] = "tessera.testing.sample.recorded.v1"
    doc["data"] = {"n": "five"}
    with pytest.raises(codec.DecodeError, match="n"):
        codec.payload(codec.decode_envelope(json.dumps(doc).encode()))
    with pytest.raises(codec.DecodeError):
        codec.decode_envelope(b'{"id": 1}')
    with pytest.raises(codec.DecodeError):
        codec.decode_envelope(b"\xff not json")


def test_event_types_are_versioned_and_unique() -> None:
    with pytest.raises(ValueError, match="v1"):
        event_type("tessera.testing.unversioned")
    with pytest.raises(DuplicateEventType):

        @event_type("tessera.testing.sample.recorded.v1")
        class Impostor(Event, frozen=True):
            n: int

    assert lookup("tessera.testing.sample.recorded.v1") is SampleRecorded


def test_envelope_requires_a_registered_type_and_an_aware_time() -> None:
    class Unregistered(Event, frozen=True):
        x: int = 0

    with pytest.raises(ValueError, match="event_type"):
        envelope(Unregistered(), subject="ev.a.b.c.d", source="s", tenant="b", time=NOW, correlation_id="c")
    with pytest.raises(ValueError, match="timezone"):
        envelope(
            SampleRecorded(n=1),
            subject="ev.a.b.c.d",
            source="s",
            tenant="b",
            time=datetime(2026, 1, 1),
            correlation_id="c",
        )


@pytest.mark.parametrize(
    "tokens",
    [
        ("scheduler", "acme", "job", "a.b"),  # a dot would split the subject
        ("scheduler", "acme", "job", "*"),
        ("scheduler", "acme", "job", ">"),
        ("scheduler", "ac me", "job", "1"),
        ("scheduler", "", "job", "1"),
        ("scheduler", "ACME", "job", "1"),
        ("Scheduler", "acme", "job", "1"),
        ("scheduler", "acme", "job", "x" * 129),
        ("scheduler", "../x", "job", "1"),
    ],
)
def test_subject_tokens_are_validated(tokens: tuple[str, str, str, str]) -> None:
    with pytest.raises(InvalidSubject):
        AggregateRef(*tokens)


def test_subject_naming_round_trips() -> None:
    ref = AggregateRef("scheduler", "acme", "job", "01J9Z")
    assert ref.subject == "ev.scheduler.acme.job.01J9Z"
    assert AggregateRef.parse(ref.subject) == ref
    assert AggregateRef("node", "_system", "node", "gpu-7").subject == "ev.node._system.node.gpu-7"
    assert tenant_filter("acme") == "ev.*.acme.>"
    assert dead_letter_subject("audit") == "dlq.audit"
    with pytest.raises(InvalidSubject):
        AggregateRef.parse("ev.too.short")


def test_dump_writes_a_json_schema_per_event_type(tmp_path: Path) -> None:
    files = dump(tmp_path)
    names = {f.name for f in files}
    assert {"envelope.schema.json", "deadletter.schema.json", "tessera.testing.sample.recorded.v1.schema.json"} <= names
    schema = json.loads((tmp_path / "tessera.testing.sample.recorded.v1.schema.json").read_text())
    assert schema["$defs"]["SampleRecorded"]["required"] == ["n"]
    envelope_schema = json.loads((tmp_path / "envelope.schema.json").read_text())
    required = set(envelope_schema["$defs"]["Envelope"]["required"])
    assert {"id", "source", "type", "subject", "time", "tenant", "correlationid", "data"} <= required
    # Every file is valid JSON Schema-shaped JSON.
    for f in files:
        assert isinstance(msgspec.json.decode(f.read_bytes()), dict)


def test_envelopes_of_other_specs_or_with_naive_times_are_refused() -> None:
    doc = json.loads(codec.encode(sample_event(sample_ref(1), 5)))
    for field, value in [("specversion", "0.3"), ("time", "2026-01-01T00:00:00"), ("datacontenttype", "text/xml")]:
        with pytest.raises(codec.DecodeError):
            codec.decode_envelope(json.dumps({**doc, field: value}).encode())


def test_a_worker_must_ask_for_something_and_name_each_model_once() -> None:
    import msgspec
    import pytest

    from tessera_contracts.api.scheduler import WorkerBody

    assert msgspec.convert({"gpus": 0, "cpu_milli": 500}, WorkerBody).cpu_milli == 500
    for bad, words in (
        ({"gpus": 0}, "must ask for something"),
        ({"gpu_models": ["H100", "H100"]}, "twice"),
        ({"gpus": 2, "milli": 500}, "gpus == 1"),
    ):
        with pytest.raises(msgspec.ValidationError, match=words):
            msgspec.convert(bad, WorkerBody)
