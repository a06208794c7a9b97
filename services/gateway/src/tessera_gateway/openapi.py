"""The OpenAPI 3.1 document at ``/schema`` (JSON at ``/schema/openapi.json``).

Declares the bearer security scheme (applied to every ``/v1`` route) and the problem+json error
responses that routes list with :func:`problem_responses`.
"""

from __future__ import annotations

from http import HTTPStatus

from litestar.openapi import OpenAPIConfig, ResponseSpec
from litestar.openapi.plugins import ScalarRenderPlugin
from litestar.openapi.spec import Components, SecurityRequirement, SecurityScheme, Tag

from tessera_contracts.rpc import Problem
from tessera_gateway.problems import PROBLEM_MEDIA_TYPE

BEARER = "bearer"
SECURITY: list[SecurityRequirement] = [{BEARER: []}]
VERSION = "1.0.0"

READ_ERRORS = (400, 401, 404, 429, 500, 503, 504)
WRITE_ERRORS = (*READ_ERRORS, 403, 409, 413, 415, 422)


def problem_responses(*statuses: int) -> dict[int, ResponseSpec]:
    """Documented problem+json responses for ``statuses``."""
    return {
        status: ResponseSpec(
            data_container=Problem,
            media_type=PROBLEM_MEDIA_TYPE,
            description=f"{HTTPStatus(status).phrase} (RFC 9457 problem)",
            generate_examples=False,
        )
        for status in sorted(set(statuses))
    }


def config() -> OpenAPIConfig:
    """Litestar's OpenAPI configuration for the gateway."""
    return OpenAPIConfig(
        title="Tessera API",
        version=VERSION,
        description=(
            "The REST API of Tessera, a control plane for shared GPU clusters. Authenticate with "
            "`Authorization: Bearer <key>`. Errors are RFC 9457 problems (`application/problem+json`) with a stable "
            "`type` and `code`. Lists are cursor-paginated (`limit`, `after` → `next`). Writes accept "
            "`Idempotency-Key`. Every response carries `X-Request-Id`."
        ),
        path="/schema",
        render_plugins=[ScalarRenderPlugin()],
        components=Components(
            security_schemes={
                BEARER: SecurityScheme(
                    type="http", scheme="bearer", description="An API key issued by Tessera (shown once)."
                )
            }
        ),
        tags=[Tag(name="tenancy", description="Tenants, projects, users, roles, API keys, quotas, clusters.")],
        use_handler_docstrings=True,
    )
