"""JSON Schema of every event type, for ``tessera contracts dump`` and the AsyncAPI document."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec

from tessera_contracts.deadletter import DeadLetter
from tessera_contracts.envelope import Envelope
from tessera_contracts.registry import registered


def event_schemas() -> dict[str, dict[str, Any]]:
    """``{type name: JSON Schema of its data}`` for every registered event type, by name."""
    return {name: msgspec.json.schema(cls) for name, cls in registered()}


def dump(out_dir: Path) -> list[Path]:
    """Write one ``<type>.schema.json`` per event type, plus the envelope and dead-letter schemas.

    Returns the files written, sorted. Existing files of the same names are replaced.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    docs: dict[str, dict[str, Any]] = {
        "envelope": msgspec.json.schema(Envelope),
        "deadletter": msgspec.json.schema(DeadLetter),
        **event_schemas(),
    }
    written = []
    for name, schema in docs.items():
        path = out_dir / f"{name}.schema.json"
        path.write_text(json.dumps(schema, indent=2, sort_keys=True) + "\n")
        written.append(path)
    return sorted(written)
