"""Errors raised by the event-log runtime."""

from __future__ import annotations


class EventLogError(RuntimeError):
    """Base of the event log's errors."""


class ConcurrencyConflict(EventLogError):
    """An append's expected last subject sequence did not match the log.

    Someone else appended to the aggregate since it was loaded. The caller reloads the aggregate,
    decides again and retries (see :func:`tessera_runtime.eventlog.EventLog.append`).
    """

    def __init__(self, subject: str, expected: int, detail: str) -> None:
        super().__init__(f"concurrency conflict on {subject}: expected last sequence {expected}; {detail}")
        self.subject = subject
        self.expected = expected


class AppendTimeout(EventLogError):
    """The server did not acknowledge an append in time; it may or may not be stored.

    Retrying with the same envelope (same event id) is safe: the server deduplicates it.
    """


class ReplayBusy(RuntimeError):
    """Another rebuild or verification of the same projection is running; try again later."""
