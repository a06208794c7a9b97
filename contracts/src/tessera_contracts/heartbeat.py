"""Node heartbeats: the liveness signal of node agents, on core NATS (never the event log).

A node agent publishes a :class:`Heartbeat` on ``hb.<node>`` every few seconds (core NATS
publish, fire and forget: a lost heartbeat costs nothing, the next one follows). The active
scheduler subscribes to ``hb.>``; a registered node silent for longer than the scheduler's node
timeout (30 s by default) is declared lost with a ``NodeLost`` decision in the log, and its jobs
are requeued. Heartbeats are not events: a fleet of 10,000 nodes beating every 5 s would add
2,000 messages a second to the log that no projection needs; only the *conclusion* (lost) is
recorded.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

import msgspec

from tessera_contracts.events.scheduler import NodeId

HEARTBEAT_ROOT = "hb"
HEARTBEAT_FILTER = f"{HEARTBEAT_ROOT}.>"
"""The subscription subject for every node's heartbeats."""


class Heartbeat(msgspec.Struct, frozen=True, kw_only=True):
    """One heartbeat of a node agent.

    Attributes:
        node: the node id, as in its ``NodeRegistered`` event.
        at: when the agent sent it (its clock; informational, the scheduler uses its own).
        seq: the agent's counter, 1, 2, ... (restarts from 1 when the agent restarts).
        running: ids of the jobs whose workers run on the node now.
    """

    node: NodeId
    at: Annotated[datetime, msgspec.Meta(tz=True)]
    seq: int = 0
    running: tuple[str, ...] = ()


def heartbeat_subject(node: str) -> str:
    """``hb.<node>``.

    Raises:
        ValueError: ``node`` is not a node id (``[A-Za-z0-9_-]``, 1-128 characters).
    """
    msgspec.convert(node, NodeId)  # raises msgspec.ValidationError, a ValueError
    return f"{HEARTBEAT_ROOT}.{node}"


_decoder = msgspec.json.Decoder(Heartbeat)


def encode_heartbeat(beat: Heartbeat) -> bytes:
    """A heartbeat as JSON bytes."""
    return msgspec.json.encode(beat)


def decode_heartbeat(raw: bytes) -> Heartbeat:
    """A heartbeat from JSON bytes.

    Raises:
        msgspec.DecodeError: not a heartbeat.
    """
    return _decoder.decode(raw)
