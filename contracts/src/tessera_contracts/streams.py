"""Stream definitions, all in one place.

The event log is ONE stream, ``TESSERA_EVENTS``, over ``ev.>``: a single total order of every
event in the system, so a projection that reads several domains (billing reads the scheduler and
the node agents) sees one deterministic order, and its position is one number. Consumers narrow
it with filter subjects (:mod:`tessera_contracts.subjects`).

Why these settings (ARCHITECTURE.md §2):

- file storage: the log is the system of record;
- ``deny_delete`` / ``deny_purge``: append-only, nothing is erased through the API;
- no rollup headers (``allow_rollup_hdrs = False``): a publisher cannot collapse history;
- duplicate window 2 minutes: long enough to cover a client's retries after a lost ack
  (our appends retry for at most ~30 s), short enough that the server's msg-id index stays small
  (about 100 bytes per id: 2 min at 20,000 events/s is ~240 MB, the most we accept). Retries that
  come later (a user re-POSTing) are deduplicated by the gateway's Idempotency-Key instead;
- limits retention with no limits: events are kept forever (archive with a mirror, not a purge).

``sync_interval`` is a server setting, not a stream one: see ``infra/nats`` and ``tessera dev up
--sync-interval``.
"""

from __future__ import annotations

import msgspec

from tessera_contracts.subjects import DEAD_LETTER_ROOT, EVENT_ROOT


class StreamSpec(msgspec.Struct, frozen=True, kw_only=True):
    """A JetStream stream's settings (the subset Tessera sets; durations in seconds)."""

    name: str
    subjects: tuple[str, ...]
    description: str
    duplicate_window_s: float = 120.0
    deny_delete: bool = True
    deny_purge: bool = True
    allow_rollup_hdrs: bool = False
    file_storage: bool = True
    max_age_s: float = 0.0  # 0 = keep forever


EVENTS = StreamSpec(
    name="TESSERA_EVENTS",
    subjects=(f"{EVENT_ROOT}.>",),
    description="Tessera's append-only event log: every state change of every service.",
)

DEAD_LETTERS = StreamSpec(
    name="TESSERA_DEAD_LETTERS",
    subjects=(f"{DEAD_LETTER_ROOT}.>",),
    description="Events a projector could not decode or apply, with the error (one per projection).",
    max_age_s=90 * 24 * 3600.0,
)

ALL_STREAMS: tuple[StreamSpec, ...] = (EVENTS, DEAD_LETTERS)
