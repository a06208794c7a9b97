"""The event envelope: CloudEvents 1.0 attributes plus Tessera's extensions.

On the wire an event is a CloudEvent in *structured* JSON mode (the whole event, attributes and
``data``, is the NATS message body; ``datacontenttype`` is ``application/json``), so a message
read from the log, from a per-tenant export subject or from a webhook is the same document.

Extension attributes (CloudEvents requires lower-case alphanumeric names):

- ``tenant``: the tenant that owns the aggregate (``_system`` for platform-wide ones);
- ``correlationid``: the id of the user request or workflow the event belongs to;
- ``causationid``: the id of the command or event that caused this one;
- ``traceparent``: W3C trace context of the span that appended it (CloudEvents' distributed
  tracing extension).
"""

from __future__ import annotations

import os
from datetime import datetime
from typing import Annotated, Literal

import msgspec

from tessera_contracts.registry import Event

SPEC_VERSION: Literal["1.0"] = "1.0"
CONTENT_TYPE: Literal["application/json"] = "application/json"


class Envelope(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One event as stored in the log.

    ``specversion`` and ``datacontenttype`` have no defaults so that they are always written
    (CloudEvents requires ``specversion``; defaults would be omitted on the wire).
    Decoding checks what a reader relies on: CloudEvents 1.0, JSON data, an aware ``time``.
    ``data`` stays raw JSON until a reader asks for it (:func:`tessera_contracts.codec.payload`),
    so a projector that only needs attributes never decodes payloads, and an event of a type this
    reader does not know can still be stored, forwarded and dead-lettered intact.
    """

    id: Annotated[str, msgspec.Meta(min_length=1, max_length=128)]
    source: Annotated[str, msgspec.Meta(min_length=1, max_length=256)]
    type: Annotated[str, msgspec.Meta(min_length=1, max_length=256)]
    subject: Annotated[str, msgspec.Meta(min_length=1, max_length=512)]
    time: Annotated[datetime, msgspec.Meta(tz=True)]
    tenant: Annotated[str, msgspec.Meta(min_length=1, max_length=63)]
    correlationid: Annotated[str, msgspec.Meta(min_length=1, max_length=128)]
    data: msgspec.Raw
    specversion: Literal["1.0"]
    datacontenttype: Literal["application/json"]
    causationid: str | None = None
    traceparent: str | None = None


def new_event_id() -> str:
    """A fresh event id: 32 lower-case hex digits (128 random bits, like a UUIDv4's hex form).

    ``os.urandom`` directly: building a ``uuid.UUID`` per event cost about 4% of append time.
    """
    return os.urandom(16).hex()


def envelope(
    event: Event,
    *,
    subject: str,
    source: str,
    tenant: str,
    time: datetime,
    correlation_id: str,
    causation_id: str | None = None,
    event_id: str | None = None,
) -> Envelope:
    """Wrap an event payload in an envelope.

    ``time`` is passed in, never read from a clock here, so that domain code stays deterministic.
    A caller that may retry an append must reuse the same ``event_id``: it is the
    ``Nats-Msg-Id`` the server deduplicates on.

    Raises:
        ValueError: ``event`` is of an unregistered class, or ``time`` has no time zone.
    """
    if not type(event).TYPE:
        raise ValueError(f"{type(event).__name__} has no event type: declare it with @event_type")
    if time.tzinfo is None:
        raise ValueError("event time must be timezone-aware (UTC)")
    return Envelope(
        id=event_id or new_event_id(),
        source=source,
        type=type(event).TYPE,
        subject=subject,
        time=time,
        tenant=tenant,
        correlationid=correlation_id,
        causationid=causation_id,
        data=msgspec.Raw(msgspec.json.encode(event)),
        specversion=SPEC_VERSION,
        datacontenttype=CONTENT_TYPE,
    )
