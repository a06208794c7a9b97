"""Coarse guards, run after authentication and before body validation.

They only save the services a round trip and keep the answers uniform; the owning service
re-checks every fine permission itself with the same :func:`~tessera_contracts.rbac.authorize`.

- :func:`tenant_visible` (every route under ``/v1/tenants/{tenant}``): a principal with no role
  in the tenant gets 404, so other tenants' existence does not leak;
- :func:`platform_admin` (creating tenants, clusters, node pools, priority classes; setting a
  tenant's quota): 403 for anyone else;
- :func:`json_body` (routes with a body): 415 unless the body is declared JSON (or undeclared).
"""

from __future__ import annotations

import re
from typing import Any

from litestar.connection import ASGIConnection
from litestar.handlers import BaseRouteHandler

from tessera_contracts import rpc
from tessera_contracts.api.common import SLUG_PATTERN
from tessera_contracts.rbac import Decision, Permission, Principal, authorize
from tessera_gateway.problems import UNSUPPORTED_MEDIA_TYPE, GatewayProblem

_SLUG = re.compile(SLUG_PATTERN)
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
    if not isinstance(tenant, str) or not _SLUG.match(tenant):
        raise GatewayProblem(
            rpc.INVALID,
            "tenant must be a slug",
            errors=[{"key": "tenant", "source": "path", "message": f"does not match {SLUG_PATTERN}"}],
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
        raise GatewayProblem(UNSUPPORTED_MEDIA_TYPE, f"send the body as application/json, not {media_type or '?'}")
