"""The dead-letter record: what a projector publishes on ``dlq.<projection>`` for a poison event."""

from __future__ import annotations

from datetime import datetime

import msgspec


class DeadLetter(msgspec.Struct, kw_only=True, frozen=True):
    """One poison event, with why it was set aside.

    ``original`` is the stored message body exactly as it was in the log (base64 in JSON), so the
    event can be inspected and, once the projector is fixed, replayed from its sequence.
    """

    projection: str
    stream_sequence: int
    subject: str
    event_type: str | None
    error: str
    attempts: int
    dead_lettered_at: datetime
    original: bytes
