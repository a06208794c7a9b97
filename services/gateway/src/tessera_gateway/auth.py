"""Authentication: ``Authorization: Bearer <key>`` becomes a :class:`~tessera_contracts.rbac.Principal`.

The tenancy service alone knows keys: the gateway sends the presented secret to
``rpc.tenancy.verify_key`` on every request (no cache, so a revocation takes effect at once) and
gets the principal back. Missing, malformed, unknown, revoked or expired keys are all the same
401 with ``WWW-Authenticate: Bearer``; the secret is never logged nor put in a response. When
the tenancy service is down or slow the answer is its 503/504, not a 401.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec
from litestar.connection import ASGIConnection
from litestar.middleware import AbstractAuthenticationMiddleware, AuthenticationResult

from tessera_contracts import rpc
from tessera_contracts.api.tenancy import VerifyKey
from tessera_contracts.rbac import Principal
from tessera_gateway.context import Gateway
from tessera_gateway.observability import request_id
from tessera_gateway.problems import GatewayProblem
from tessera_runtime.rpc import RpcError, call

# RFC 6750 b64token, bounded by VerifyKey.secret's limit.
_TOKEN = re.compile(r"^[A-Za-z0-9\-._~+/]{1,256}=*$")
_CHALLENGE = 'Bearer realm="tessera"'
_principal_decoder = msgspec.json.Decoder(Principal)


def _unauthenticated(detail: str, *, invalid_token: bool) -> GatewayProblem:
    challenge = f'{_CHALLENGE}, error="invalid_token"' if invalid_token else _CHALLENGE
    return GatewayProblem(rpc.UNAUTHENTICATED, detail, headers={"WWW-Authenticate": challenge})


def bearer_secret(authorization: str | None) -> str:
    """The key in an ``Authorization`` header value.

    Raises:
        GatewayProblem: 401 when the header is missing, not ``Bearer``, or the token is malformed.
    """
    if not authorization:
        raise _unauthenticated("send an API key as 'Authorization: Bearer <key>'", invalid_token=False)
    scheme, _, token = authorization.strip().partition(" ")
    if scheme.lower() != "bearer":
        raise _unauthenticated("only the Bearer scheme is supported", invalid_token=False)
    token = token.strip()
    if not _TOKEN.match(token):
        raise _unauthenticated("the API key is malformed", invalid_token=True)
    return token


async def verify(gateway: Gateway, secret: str, correlation_id: str) -> Principal:
    """Ask the tenancy service who holds ``secret``.

    Raises:
        GatewayProblem: 401 when the service refuses the key (unknown, revoked, expired).
        RpcError: the service is unavailable (503) or did not answer in time (504), or answered
            with a server error.
    """
    try:
        raw = await call(
            gateway.nc,
            "tenancy",
            "verify_key",
            VerifyKey(secret=secret),
            correlation_id=correlation_id,
            timeout_s=gateway.settings.rpc_timeout_s,
        )
    except RpcError as exc:
        if exc.problem.status >= 500 or exc.problem.status == 429:
            raise
        raise _unauthenticated("the API key is not valid, revoked or expired", invalid_token=True) from None
    return _principal_decoder.decode(raw)


class BearerAuth(AbstractAuthenticationMiddleware):
    """Litestar middleware for ``/v1``: sets ``request.user`` (a Principal) and ``request.auth`` (its key id)."""

    async def authenticate_request(self, connection: ASGIConnection[Any, Any, Any, Any]) -> AuthenticationResult:
        """Authenticate one request (raises :class:`GatewayProblem` 401, or the 503/504 of :func:`verify`)."""
        secret = bearer_secret(connection.headers.get("authorization"))
        principal = await verify(Gateway.of(connection.app.state), secret, request_id(connection.scope))
        return AuthenticationResult(user=principal, auth=principal.key_id)
