from __future__ import annotations

import asyncpg
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tessera_contracts.streams import EVENTS
from tessera_runtime.eventlog import EventLog
from tessera_runtime.projector import Projector
from tessera_runtime.testing import SAMPLE_TOTALS, sample_event, sample_ref


@pytest.fixture(scope="module")
def spans() -> InMemorySpanExporter:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    return exporter


async def test_traceparent_travels_in_headers_and_links_the_projector_span(
    spans: InMemorySpanExporter, log: EventLog, pool: asyncpg.Pool
) -> None:
    tracer = trace.get_tracer("test")
    ref = sample_ref(1)
    with tracer.start_as_current_span("submit job") as request_span:
        await log.append(ref.subject, [sample_event(ref, 1)], 0)
    trace_id = f"{request_span.get_span_context().trace_id:032x}"

    stored = await log.js._jsm.get_msg(EVENTS.name, seq=1)
    assert stored.headers is not None
    header = stored.headers["traceparent"]
    assert header.split("-")[1] == trace_id
    events, _ = await log.load(ref.subject)
    assert events[0].envelope.traceparent == header

    await Projector(SAMPLE_TOTALS, pool, log).catch_up()
    producer = next(s for s in spans.get_finished_spans() if s.kind == trace.SpanKind.PRODUCER)
    consumer = next(s for s in spans.get_finished_spans() if s.kind == trace.SpanKind.CONSUMER)
    assert producer.context.trace_id == request_span.get_span_context().trace_id
    assert producer.attributes is not None and producer.attributes["messaging.system"] == "nats"
    assert [link.context.span_id for link in consumer.links] == [producer.context.span_id]
