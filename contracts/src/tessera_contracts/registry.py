"""Event types: the base class of every event payload and the registry that maps type names to it.

An event type name follows CloudEvents' reverse-DNS habit and carries its version as the last
token: ``tessera.<domain>.<aggregate>.<verb-in-past-tense>.v<N>``, for example
``tessera.scheduler.job.placed.v1``. A breaking change is a new version (a new class), never an
edit of an existing one; readers ignore fields they do not know (msgspec's default), so adding an
optional field is not breaking.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import ClassVar, TypeVar

import msgspec

TYPE_NAME = re.compile(r"^tessera(\.[a-z][a-z0-9_]*){3,}\.v[1-9][0-9]*$")


class Event(msgspec.Struct, kw_only=True, frozen=True, forbid_unknown_fields=False):
    """Base of every event payload (the CloudEvent ``data``).

    Subclasses are declared with :func:`event_type`, which sets ``TYPE`` and registers them.
    """

    TYPE: ClassVar[str] = ""


class UnknownEventType(LookupError):
    """Raised when a type name is not registered (an event from a newer writer, or a typo)."""


class DuplicateEventType(ValueError):
    """Raised when two classes claim the same type name."""


_REGISTRY: dict[str, type[Event]] = {}

E = TypeVar("E", bound=type[Event])


def event_type(name: str) -> Callable[[E], E]:
    """Class decorator: give an :class:`Event` subclass its versioned type name and register it.

    Raises:
        ValueError: the name does not match ``tessera.<domain>.<...>.v<N>``.
        DuplicateEventType: another class already has this name.
    """
    if not TYPE_NAME.match(name):
        raise ValueError(f"event type {name!r} must look like tessera.<domain>.<aggregate>.<verb>.v1")

    def register(cls: E) -> E:
        if name in _REGISTRY and _REGISTRY[name] is not cls:
            raise DuplicateEventType(f"event type {name!r} is already registered")
        cls.TYPE = name
        _REGISTRY[name] = cls
        return cls

    return register


def lookup(name: str) -> type[Event]:
    """Return the class registered for ``name``.

    Raises:
        UnknownEventType: nothing is registered under ``name``.
    """
    try:
        return _REGISTRY[name]
    except KeyError:
        raise UnknownEventType(f"unknown event type {name!r}") from None


def registered() -> Iterator[tuple[str, type[Event]]]:
    """Every registered (type name, class), sorted by name."""
    yield from sorted(_REGISTRY.items())
