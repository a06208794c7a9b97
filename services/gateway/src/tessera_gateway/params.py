"""Path, query and header parameters shared by the routes, with their limits.

A syntactically wrong parameter is a 400 from validation; a well-formed but unknown id is the
owning service's 404.
"""

from __future__ import annotations

from typing import Annotated

from litestar.params import HeaderParameter, PathParameter, QueryParameter

from tessera_contracts.api.common import SLUG_PATTERN, PageRequest
from tessera_contracts.rbac import PLATFORM_TENANT
from tessera_gateway.idempotency import HEADER, HEADER_PATTERN

TENANT_PATTERN = rf"^({PLATFORM_TENANT}|{SLUG_PATTERN.removeprefix('^').removesuffix('$')})$"
"""A tenant in a path: a slug, or the reserved platform tenant ``_system`` (where platform admins live)."""
USER_ID_PATTERN = r"^u_[0-9a-f]{1,32}$"
KEY_ID_PATTERN = r"^k_[0-9a-f]{1,32}$"
_SLUG_DOC = "lower-case letters, digits and '-', starting with a letter or digit; at most 63"


def _slug(what: str) -> PathParameter:
    return PathParameter(pattern=SLUG_PATTERN, min_length=1, max_length=63, description=f"The {what}: {_SLUG_DOC}.")


TenantSlug = Annotated[
    str,
    PathParameter(
        pattern=TENANT_PATTERN,
        min_length=1,
        max_length=63,
        description=f"The tenant: {_SLUG_DOC}; or `{PLATFORM_TENANT}`, the platform's own tenant.",
    ),
]
ProjectSlug = Annotated[str, _slug("project")]
ClusterSlug = Annotated[str, _slug("cluster")]
PoolSlug = Annotated[str, _slug("node pool")]
PriorityClassSlug = Annotated[str, _slug("priority class")]
UserId = Annotated[str, PathParameter(pattern=USER_ID_PATTERN, max_length=34, description="A user id, u_<hex>.")]
KeyId = Annotated[str, PathParameter(pattern=KEY_ID_PATTERN, max_length=34, description="An API key id, k_<hex>.")]
Limit = Annotated[int, QueryParameter(ge=1, le=500, description="Items per page, 1-500.")]
After = Annotated[
    str | None,
    QueryParameter(max_length=512, description="The `next` cursor of the previous page."),
]

IdempotencyKey = Annotated[
    str | None,
    HeaderParameter(
        name=HEADER,
        required=False,
        min_length=1,
        max_length=255,
        pattern=HEADER_PATTERN,
        description="Any unique string (1-255 printable ASCII): a retry with the same key and body gets the "
        "first answer, with `Idempotency-Replayed: true`, and is not executed again (a replay never shows a "
        'secret: `"secret": null`). Kept 24 hours. After a 504 the key stays claimed (409 with `Retry-After`) '
        "for twice the RPC timeout plus 10 s, as the first attempt may still complete.",
    ),
]


def page_of(limit: int, after: str | None) -> PageRequest:
    """The RPC page request for the ``limit`` and ``after`` query parameters."""
    return PageRequest(limit=limit, after=after)
