"""The JSON codec for envelopes and payloads (msgspec; one encoder and decoder per process)."""

from __future__ import annotations

from typing import Any

import msgspec

from tessera_contracts.envelope import Envelope
from tessera_contracts.registry import Event, lookup

_encoder = msgspec.json.Encoder()
_envelope_decoder = msgspec.json.Decoder(Envelope)
_payload_decoders: dict[type[Event], msgspec.json.Decoder[Any]] = {}


class DecodeError(ValueError):
    """Raised when bytes are not a valid envelope, or a payload does not match its type's schema."""


def encode(value: msgspec.Struct) -> bytes:
    """Encode an envelope, a payload or any other contract struct to JSON bytes."""
    return _encoder.encode(value)


def decode_envelope(raw: bytes) -> Envelope:
    """Decode the attributes of one stored event; ``data`` stays raw.

    Raises:
        DecodeError: not JSON, or a required attribute is missing or of the wrong type.
    """
    try:
        return _envelope_decoder.decode(raw)
    except msgspec.DecodeError as exc:
        raise DecodeError(f"not a valid event envelope: {exc}") from None


def payload(env: Envelope) -> Event:
    """Decode an envelope's ``data`` into the class registered for its ``type``.

    Unknown fields are ignored (a newer writer may add optional fields).

    Raises:
        tessera_contracts.registry.UnknownEventType: ``type`` is not registered.
        DecodeError: ``data`` does not match the type's schema.
    """
    cls = lookup(env.type)
    decoder = _payload_decoders.get(cls)
    if decoder is None:
        decoder = _payload_decoders[cls] = msgspec.json.Decoder(cls)
    try:
        event: Event = decoder.decode(env.data)
    except msgspec.DecodeError as exc:
        raise DecodeError(f"{env.type}: {exc}") from None
    return event
