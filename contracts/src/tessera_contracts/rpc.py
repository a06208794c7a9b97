"""Commands and queries over NATS request/reply: subjects, the request and reply envelopes, errors.

The gateway (and other callers) send a :class:`Request` to ``rpc.<service>.<operation>``; the
owning service answers with a :class:`Reply`: either a result body or an RFC 9457 problem. The
caller's identity travels as a :class:`~tessera_contracts.rbac.Principal` that the gateway
obtained by verifying the API key with the tenancy service; services authorise with it.

No responder (or no connection) is :data:`UNAVAILABLE` (503) and no answer in time is
:data:`TIMEOUT` (504); the gateway adds ``Retry-After`` to both. A caller never waits without a
bound.
"""

from __future__ import annotations

import re

import msgspec

from tessera_contracts.api.common import PageRequest
from tessera_contracts.rbac import Principal

RPC_ROOT = "rpc"
_TOKEN = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
PROBLEM_BASE = "https://tessera.dev/problems/"


def rpc_subject(service: str, operation: str) -> str:
    """``rpc.<service>.<operation>``.

    Raises:
        ValueError: a token is not a lower-case identifier.
    """
    for token in (service, operation):
        if not _TOKEN.match(token):
            raise ValueError(f"invalid rpc token {token!r}")
    return f"{RPC_ROOT}.{service}.{operation}"


class Request(msgspec.Struct, kw_only=True, frozen=True):
    """One command or query.

    ``body`` is the operation's own JSON (``{}`` when it has none); ``scope`` holds the path
    parameters (``tenant``, ``project``, ``user``, ``key``, ``cluster``, ``pool``, ``name``);
    ``page`` the list cursor; ``correlation_id`` becomes the events' ``correlationid``.
    """

    body: msgspec.Raw
    correlation_id: str
    principal: Principal | None = None
    scope: dict[str, str] = {}
    page: PageRequest | None = None


class Problem(msgspec.Struct, kw_only=True, frozen=True, omit_defaults=True):
    """An RFC 9457 problem detail. ``type`` is ``PROBLEM_BASE + code``; ``code`` is stable."""

    type: str
    title: str
    status: int
    code: str
    detail: str = ""
    errors: list[dict[str, str]] | None = None


class Reply(msgspec.Struct, kw_only=True, frozen=True):
    """The answer: ``body`` (the operation's result JSON; ``null`` with a problem) or ``problem``."""

    body: msgspec.Raw = msgspec.Raw(b"null")
    problem: Problem | None = None


# Stable problem codes, with the HTTP status each maps to.
INVALID = ("invalid-request", 400)
UNAUTHENTICATED = ("unauthenticated", 401)
FORBIDDEN = ("forbidden", 403)
NOT_FOUND = ("not-found", 404)
METHOD_NOT_ALLOWED = ("method-not-allowed", 405)
NOT_ACCEPTABLE = ("not-acceptable", 406)
CONFLICT = ("conflict", 409)
GONE = ("gone", 410)
PAYLOAD_TOO_LARGE = ("payload-too-large", 413)
UNSUPPORTED_MEDIA_TYPE = ("unsupported-media-type", 415)
UNPROCESSABLE = ("unprocessable", 422)
TOO_MANY = ("rate-limited", 429)
INTERNAL = ("internal", 500)
UNAVAILABLE = ("unavailable", 503)
TIMEOUT = ("timeout", 504)

TITLES = {
    "invalid-request": "The request is not valid",
    "unauthenticated": "Authentication is required",
    "forbidden": "Not allowed",
    "not-found": "Not found",
    "method-not-allowed": "Method not allowed",
    "not-acceptable": "Not acceptable",
    "payload-too-large": "The request body is too large",
    "unsupported-media-type": "Unsupported media type",
    "conflict": "Conflict with the current state",
    "gone": "Gone",
    "unprocessable": "The request cannot be processed",
    "rate-limited": "Too many requests",
    "internal": "Internal error",
    "unavailable": "Service unavailable",
    "timeout": "The service did not answer in time",
}


def problem(kind: tuple[str, int], detail: str = "", errors: list[dict[str, str]] | None = None) -> Problem:
    """Build a :class:`Problem` from one of the code constants above."""
    code, status = kind
    return Problem(type=PROBLEM_BASE + code, title=TITLES[code], status=status, code=code, detail=detail, errors=errors)
