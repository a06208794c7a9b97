"""Coarse guards, run after authentication and before body validation.

They only save the services a round trip and keep the answers uniform; the owning service
re-checks every fine permission itself with the same :func:`~tessera_contracts.rbac.authorize`.

- :func:`tenant_visible` (every route under ``/v1/tenants/{tenant}``): a principal with no role
  in the tenant gets 404, so other tenants' existence does not leak (the reserved tenant
  ``_system`` included: only platform admins reach it);
- :func:`platform_admin` (creating tenants, clusters, node pools, priority classes; setting a
  tenant's quota): 403 for anyone else;
- :func:`json_body` (routes with a body): 415 unless the body is declared JSON (or undeclared);
- :func:`strict_body` (routes with a body): 400 unless the body decodes *strictly* into the
  route's ``data`` type (no ``0`` for a bool, no ``"5"`` for an int, no number for a time), with
  the same ``errors`` as Litestar's own validation. Litestar converts bodies leniently
  (``strict=False``, which query strings need) and has no switch for bodies alone, so this
  guard decodes the raw body first; what passes decodes the same either way.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec
from litestar import Request
from litestar.connection import ASGIConnection
from litestar.handlers import BaseRouteHandler, HTTPRouteHandler

from tessera_contracts import rpc
from tessera_contracts.rbac import PLATFORM_TENANT, Decision, Permission, Principal, authorize
from tessera_gateway.params import TENANT_PATTERN
from tessera_gateway.problems import GatewayProblem

_TENANT = re.compile(TENANT_PATTERN)
_JSON_TYPE = re.compile(r"^application/(?:[a-z0-9.+-]+\+)?json$")


def principal_of(connection: ASGIConnection[Any, Any, Any, Any]) -> Principal:
    """The authenticated caller.

    Raises:
        GatewayProblem: 401 when the route is not behind :class:`~tessera_gateway.auth.BearerAuth`.
    """
    user = connection.scope.get("user")
    if not isinstance(user, Principal):
        raise GatewayProblem(rpc.UNAUTHENTICATED, "authentication is required")
    return user


def _raise_for(decision: Decision, what: str) -> None:
    if decision is Decision.NOT_FOUND:
        raise GatewayProblem(rpc.NOT_FOUND, f"{what} not found")
    if decision is Decision.FORBIDDEN:
        raise GatewayProblem(rpc.FORBIDDEN, f"not allowed on {what}")


def tenant_visible(connection: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler) -> None:
    """Allow only principals with a role in the path's tenant (or platform admins).

    Raises:
        GatewayProblem: 400 for a malformed tenant, 404 when the tenant is not visible.
    """
    tenant = connection.path_params.get("tenant")
    if not isinstance(tenant, str) or not _TENANT.fullmatch(tenant):
        raise GatewayProblem(
            rpc.INVALID,
            f"tenant must be a slug or {PLATFORM_TENANT}",
            errors=[{"key": "tenant", "source": "path", "message": f"does not match {TENANT_PATTERN}"}],
        )
    _raise_for(authorize(principal_of(connection), Permission.TENANT_READ, tenant), f"tenant {tenant!r}")


def platform_admin(connection: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler) -> None:
    """Allow only platform admins.

    Raises:
        GatewayProblem: 403 for anyone else.
    """
    if authorize(principal_of(connection), Permission.PLATFORM_ADMIN) is not Decision.ALLOW:
        raise GatewayProblem(rpc.FORBIDDEN, "this needs the platform-admin role")


def json_body(connection: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler) -> None:
    """Refuse a body declared as anything but JSON (``application/json`` or ``application/*+json``).

    Raises:
        GatewayProblem: 415.
    """
    content_type = connection.headers.get("content-type")
    if content_type is None:
        return
    media_type = content_type.split(";", 1)[0].strip().lower()
    if not _JSON_TYPE.match(media_type):
        raise GatewayProblem(rpc.UNSUPPORTED_MEDIA_TYPE, f"send the body as application/json, not {media_type or '?'}")


_ERROR_AT = re.compile(r"^(?P<message>.*?)(?: - at `\$(?P<path>[^`]*)`)?$", re.DOTALL)
_decoders: dict[type[msgspec.Struct], msgspec.json.Decoder[Any]] = {}


def body_type(handler: BaseRouteHandler) -> type[msgspec.Struct] | None:
    """The msgspec type of a route's ``data`` parameter, or None when it takes no such body."""
    if not isinstance(handler, HTTPRouteHandler):
        return None
    data = handler.parsed_fn_signature.parameters.get("data")
    annotation = data.annotation if data is not None else None
    return annotation if isinstance(annotation, type) and issubclass(annotation, msgspec.Struct) else None


def body_error(exc: msgspec.DecodeError) -> dict[str, str]:
    """A msgspec decoding error as an ``errors`` item: ``message``, ``key`` (``data``: the whole body), ``source``."""
    found = _ERROR_AT.match(str(exc))
    message, path = (found["message"], found["path"]) if found else (str(exc), None)
    key = (path or "").removeprefix(".") or "data"
    return {"message": message, "key": key, "source": "body"}


async def strict_body(connection: ASGIConnection[Any, Any, Any, Any], handler: BaseRouteHandler) -> None:
    """Decode the body strictly into the route's ``data`` type (see the module docstring).

    Raises:
        GatewayProblem: 400 with ``errors`` when the body is not valid JSON or not exactly of that type.
    """
    target = body_type(handler)
    if target is None or not isinstance(connection, Request):
        return
    decoder = _decoders.get(target)
    if decoder is None:
        decoder = _decoders[target] = msgspec.json.Decoder(target, strict=True)
    raw = await connection.body()
    try:
        decoder.decode(raw)
    except msgspec.DecodeError as exc:  # ValidationError included
        empty = {"message": "a JSON body is required", "key": "data", "source": "body"}
        error = body_error(exc) if raw.strip() else empty
        raise GatewayProblem(
            rpc.INVALID, f"Validation failed for {connection.method} {connection.url.path}", errors=[error]
        ) from None
