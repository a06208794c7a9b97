"""OpenTelemetry tracing across NATS hops: W3C ``traceparent`` travels in message headers.

Spans follow OpenTelemetry's messaging semantic conventions (``messaging.system = nats``,
``messaging.destination.name``, ``messaging.operation.type``). With no exporter configured the
API's no-op tracer is used and a span costs a few hundred nanoseconds.

Configure with :func:`configure`: ``TESSERA_OTEL_CONSOLE=1`` prints spans to stderr, and when
``OTEL_EXPORTER_OTLP_ENDPOINT`` is set and ``opentelemetry-exporter-otlp`` is installed, spans
go there.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager

from opentelemetry import context, propagate, trace
from opentelemetry.trace import Link, SpanKind

TRACEPARENT = "traceparent"
_tracer = trace.get_tracer("tessera")


def configure(service_name: str) -> None:
    """Install a tracer provider for this process, named ``service_name`` (once, at start-up)."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

    provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
    if os.environ.get("TESSERA_OTEL_CONSOLE") == "1":
        provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter()))
    if os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import (  # type: ignore[import-not-found]
                OTLPSpanExporter,
            )
        except ImportError:
            pass
        else:
            provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)


def current_traceparent() -> str | None:
    """The W3C traceparent of the current span, or None when there is no recording span."""
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return carrier.get(TRACEPARENT)


@contextmanager
def producer_span(operation: str, subject: str) -> Iterator[str | None]:
    """A PRODUCER span around a publish; yields the traceparent to put in the message headers."""
    with _tracer.start_as_current_span(
        f"{operation} {subject}",
        kind=SpanKind.PRODUCER,
        attributes={
            "messaging.system": "nats",
            "messaging.destination.name": subject,
            "messaging.operation.type": "send",
        },
    ):
        yield current_traceparent()


@contextmanager
def consumer_span(operation: str, destination: str, traceparents: Sequence[str | None]) -> Iterator[None]:
    """A CONSUMER span for a batch, linked to (at most 32 of) the producers' spans."""
    links = []
    for tp in traceparents[:32]:
        if tp:
            span_context = trace.get_current_span(propagate.extract({TRACEPARENT: tp})).get_span_context()
            if span_context.is_valid:
                links.append(Link(span_context))
    with _tracer.start_as_current_span(
        f"{operation} {destination}",
        kind=SpanKind.CONSUMER,
        links=links,
        attributes={
            "messaging.system": "nats",
            "messaging.destination.name": destination,
            "messaging.operation.type": "process",
            "messaging.batch.message_count": len(traceparents),
        },
    ):
        yield


@contextmanager
def continued_from(headers: Mapping[str, str] | None) -> Iterator[None]:
    """Make the trace context carried in ``headers`` (if any) current, e.g. in a request handler."""
    token = context.attach(propagate.extract(dict(headers or {})))
    try:
        yield
    finally:
        context.detach(token)
