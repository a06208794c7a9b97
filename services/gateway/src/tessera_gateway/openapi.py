"""The OpenAPI 3.1 document at ``/schema`` (JSON at ``/schema/openapi.json``).

Declares the bearer security scheme (applied to every ``/v1`` route) and the problem+json error
responses that routes list with :func:`problem_responses`. :func:`forbid_unknown_fields` then marks
every request body schema whose struct rejects unknown fields with ``additionalProperties: false``
(Litestar's generator leaves it out), so the document says what the server enforces.
"""

from __future__ import annotations

from collections.abc import Iterable
from http import HTTPStatus

import msgspec
from litestar import Litestar
from litestar.openapi import OpenAPIConfig, ResponseSpec
from litestar.openapi.plugins import ScalarRenderPlugin
from litestar.openapi.spec import Components, Schema, SecurityRequirement, SecurityScheme, Tag
from litestar.routes import HTTPRoute

from tessera_contracts.rpc import Problem
from tessera_gateway.guards import body_type
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
        tags=[
            Tag(name="tenancy", description="Tenants, projects, users, roles, API keys, quotas, clusters."),
            Tag(name="scheduler", description="Jobs (submit, list, cancel, explain) and nodes."),
        ],
        use_handler_docstrings=True,
    )


def _strict_structs(types: Iterable[type[msgspec.Struct]]) -> dict[str, list[frozenset[str]]]:
    """Structs with ``forbid_unknown_fields`` in ``types`` or nested in them: name -> their field-name sets."""
    found: dict[str, list[frozenset[str]]] = {}
    seen: set[type] = set()

    def walk(info: msgspec.inspect.Type) -> None:
        if isinstance(info, msgspec.inspect.StructType):
            if info.cls in seen:
                return
            seen.add(info.cls)
            if info.forbid_unknown_fields:
                found.setdefault(info.cls.__name__, []).append(frozenset(f.encode_name for f in info.fields))
            for field in info.fields:
                walk(field.type)
        elif isinstance(info, msgspec.inspect.Metadata):
            walk(info.type)
        elif isinstance(info, msgspec.inspect.UnionType):
            for member in info.types:
                walk(member)
        elif isinstance(info, msgspec.inspect.DictType):
            walk(info.key_type)
            walk(info.value_type)
        elif isinstance(info, msgspec.inspect.TupleType):
            for item in info.item_types:
                walk(item)
        elif isinstance(info, msgspec.inspect.CollectionType):
            walk(info.item_type)

    for info in msgspec.inspect.multi_type_info(list(types)):
        walk(info)
    return found


def forbid_unknown_fields(app: Litestar) -> None:
    """Set ``additionalProperties: false`` on the component of every request body struct that forbids unknown fields.

    Covers the ``data`` type of every route and the structs nested in it. A component matches a
    struct by its title (the class name) and its exact property names. Call it once the routes
    are registered: it builds the document now, and ``/schema`` serves this one.
    """
    bodies = {
        target
        for route in app.routes
        if isinstance(route, HTTPRoute)
        for handler in route.route_handlers
        if (target := body_type(handler)) is not None
    }
    strict = _strict_structs(bodies)
    for schema in (app.openapi_schema.components.schemas or {}).values():
        if not isinstance(schema, Schema) or schema.title not in strict:
            continue
        if frozenset(schema.properties or {}) in strict[schema.title]:
            schema.additional_properties = False
