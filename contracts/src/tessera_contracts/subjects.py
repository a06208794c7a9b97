"""Subject naming: one NATS subject per aggregate instance, with the tenant inside it.

``ev.<domain>.<tenant>.<aggregate>.<id>``, for example ``ev.scheduler.acme.job.01J9Z...``.
One subject per aggregate gives per-aggregate optimistic concurrency
(``Nats-Expected-Last-Subject-Sequence``) and lets NATS permissions limit an external subscriber
to one tenant (``ev.*.acme.>``). Platform-wide aggregates (clusters, nodes) use the reserved
tenant token :data:`SYSTEM_TENANT`.
"""

from __future__ import annotations

import re

import msgspec

EVENT_ROOT = "ev"
DEAD_LETTER_ROOT = "dlq"
SYSTEM_TENANT = "_system"

_DOMAIN = re.compile(r"^[a-z][a-z0-9_]{0,31}$")
_TENANT = re.compile(r"^(_system|[a-z0-9][a-z0-9-]{0,62})$")
_AGGREGATE = re.compile(r"^[a-z][a-z0-9_]{0,31}$")
_ID = re.compile(r"^[A-Za-z0-9_-]{1,128}$")


class InvalidSubject(ValueError):
    """Raised when a subject or one of its tokens breaks the naming rules above."""


def _check(kind: str, value: str, pattern: re.Pattern[str]) -> str:
    if not pattern.match(value):
        raise InvalidSubject(f"invalid {kind} token {value!r} (allowed: {pattern.pattern})")
    return value


class AggregateRef(msgspec.Struct, frozen=True):
    """The address of one aggregate instance; ``subject`` is its NATS subject.

    Raises:
        InvalidSubject: a token is empty, too long, or holds ``.``, ``*``, ``>`` or whitespace.
    """

    domain: str
    tenant: str
    aggregate: str
    id: str

    def __post_init__(self) -> None:
        _check("domain", self.domain, _DOMAIN)
        _check("tenant", self.tenant, _TENANT)
        _check("aggregate", self.aggregate, _AGGREGATE)
        _check("id", self.id, _ID)

    @property
    def subject(self) -> str:
        """``ev.<domain>.<tenant>.<aggregate>.<id>``."""
        return f"{EVENT_ROOT}.{self.domain}.{self.tenant}.{self.aggregate}.{self.id}"

    @classmethod
    def parse(cls, subject: str) -> AggregateRef:
        """Parse an event subject back into its parts.

        Raises:
            InvalidSubject: not of the form ``ev.<domain>.<tenant>.<aggregate>.<id>``.
        """
        parts = subject.split(".")
        if len(parts) != 5 or parts[0] != EVENT_ROOT:
            raise InvalidSubject(f"not an event subject: {subject!r}")
        return cls(parts[1], parts[2], parts[3], parts[4])


def domain_filter(domain: str) -> str:
    """The filter subject for every event of one domain: ``ev.<domain>.>``."""
    return f"{EVENT_ROOT}.{_check('domain', domain, _DOMAIN)}.>"


def tenant_filter(tenant: str) -> str:
    """The filter subject for every event of one tenant, all domains: ``ev.*.<tenant>.>``."""
    return f"{EVENT_ROOT}.*.{_check('tenant', tenant, _TENANT)}.>"


def dead_letter_subject(projection: str) -> str:
    """Where a projector's poison events go: ``dlq.<projection>``."""
    return f"{DEAD_LETTER_ROOT}.{_check('projection', projection, _AGGREGATE)}"
