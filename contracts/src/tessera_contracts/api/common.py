"""Field types with limits, shared by every API body, and the page envelope of list results."""

from __future__ import annotations

from typing import Annotated, Generic, TypeVar

import msgspec

SLUG_PATTERN = r"^[a-z0-9][a-z0-9-]{0,62}$"
Slug = Annotated[
    str,
    msgspec.Meta(
        min_length=1,
        max_length=63,
        pattern=SLUG_PATTERN,
        description="Lower-case letters, digits and '-', starting with a letter or digit; at most 63.",
        examples=["acme"],
    ),
]
# Not allowed anywhere in free text: C0 and C1 controls, line/paragraph separators, and the
# bidirectional overrides and isolates (U+202A-U+202E, U+2066-U+2069) that can make a name display
# as another ("Trojan Source", CVE-2021-42574). No leading or trailing whitespace.
BANNED_CHARACTERS = "\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069"
DisplayName = Annotated[
    str,
    msgspec.Meta(
        min_length=1,
        max_length=200,
        pattern=rf"^[^\s{BANNED_CHARACTERS}](?:[^{BANNED_CHARACTERS}]*[^\s{BANNED_CHARACTERS}])?$",
        description="Free text (any script, emoji included), 1-200 characters, no control or bidi-override"
        " characters, no leading or trailing spaces.",
    ),
]
UserName = Annotated[
    str,
    msgspec.Meta(
        min_length=1,
        max_length=128,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._@+-]{0,127}$",
        description="A handle or e-mail address.",
        examples=["ada@example.com"],
    ),
]
GpuModel = Annotated[
    str, msgspec.Meta(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$", examples=["H100-80GB"])
]
Milli = Annotated[int, msgspec.Meta(ge=0, le=1_000_000_000, description="milli-GPU: 1000 = one device")]
Region = Annotated[str, msgspec.Meta(min_length=1, max_length=64, pattern=r"^[a-z0-9][a-z0-9-]{0,63}$")]
LabelKey = Annotated[str, msgspec.Meta(min_length=1, max_length=63, pattern=r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,62}$")]
LabelValue = Annotated[str, msgspec.Meta(max_length=63, pattern=r"^[A-Za-z0-9._-]*$")]
Cursor = Annotated[str, msgspec.Meta(max_length=512)]
Limit = Annotated[int, msgspec.Meta(ge=1, le=500)]

T = TypeVar("T")


class PageRequest(msgspec.Struct, frozen=True, kw_only=True):
    """Cursor pagination: up to ``limit`` items after the opaque ``after`` cursor."""

    limit: Limit = 50
    after: Cursor | None = None


class Page(msgspec.Struct, Generic[T], frozen=True, kw_only=True):
    """One page of a list. ``next`` is the cursor of the following page, None on the last one."""

    items: list[T]
    next: str | None = None
