"""How the CLI prints what the gateway returns: aligned tables, ``key: value`` records, raw JSON."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal, InvalidOperation
from typing import Any

Getter = Callable[[Mapping[str, Any]], Any]
Column = tuple[str, str | Getter]
"""A column: its header and either a field name or a function of the item."""


def print_json(data: Any) -> None:
    """Print ``data`` as indented JSON (non-ASCII kept as is)."""
    print(json.dumps(data, indent=2, ensure_ascii=False))


def cell(value: Any) -> str:
    """One value as table text: ``-`` for None/empty, ``yes``/``no``, lists comma-joined, ``k=v`` maps."""
    if value is None or value == "" or value == [] or value == {}:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list | tuple):
        return ", ".join(cell(v) for v in value)
    if isinstance(value, dict):
        return ", ".join(f"{k}={cell(v)}" for k, v in value.items())
    return " ".join(str(value).split())


def _get(item: Mapping[str, Any], column: str | Getter) -> str:
    return cell(item.get(column) if isinstance(column, str) else column(item))


def format_table(headers: Sequence[str] | None, rows: Sequence[Sequence[str]]) -> str:
    """Left-aligned columns separated by two spaces, headers (if any) first; no trailing blanks."""
    table = [list(headers), *rows] if headers is not None else list(rows)
    if not table:
        return ""
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in table)


def print_table(items: Sequence[Mapping[str, Any]], columns: Sequence[Column]) -> None:
    """Print items as an aligned table (or ``(none)`` when there are none)."""
    if not items:
        print("(none)")
        return
    headers = [h for h, _ in columns]
    print(format_table(headers, [[_get(item, c) for _, c in columns] for item in items]))


def print_record(item: Mapping[str, Any], columns: Sequence[Column]) -> None:
    """Print one item as aligned ``label  value`` lines."""
    width = max(len(h) for h, _ in columns)
    for header, column in columns:
        print(f"{header.lower().ljust(width)}  {_get(item, column)}")


def show(data: Any, columns: Sequence[Column], *, as_json: bool) -> None:
    """Print one object: raw JSON with ``as_json``, else a record."""
    if as_json:
        print_json(data)
    elif isinstance(data, Mapping):
        print_record(data, columns)
    elif data is not None:
        print(cell(data))


def show_list(page: Mapping[str, Any], columns: Sequence[Column], *, as_json: bool) -> None:
    """Print a list result ``{"items": [...], "next": ...}``: raw JSON, or a table of the items."""
    if as_json:
        print_json(page)
    else:
        print_table(page["items"], columns)


def roles(bindings: Any, *, with_tenant: bool = False) -> str:
    """Role bindings as ``role`` / ``role:project`` (``role@tenant[:project]`` with ``with_tenant``)."""
    out = []
    for b in bindings or []:
        if not isinstance(b, Mapping):
            out.append(str(b))
            continue
        text = str(b.get("role"))
        if with_tenant:
            text += f"@{b.get('tenant')}"
        if b.get("project"):
            text += f":{b['project']}"
        out.append(text)
    return ", ".join(out)


def gpus_from_milli(milli: Any) -> str:
    """milli-GPU as GPUs (``8000`` → ``8``, ``500`` → ``0.5``); empty for None."""
    if milli is None:
        return ""
    try:
        value = Decimal(str(milli)) / 1000
    except InvalidOperation:
        return str(milli)
    text = format(value.normalize(), "f")
    return text


def gpu_quotas(gpus: Any) -> str:
    """A quota's GPU entries in the ``--gpu`` syntax: ``MODEL=NOMINAL[:BORROW[:LEND]]``, in GPUs."""
    out = []
    for g in gpus or []:
        parts = [
            gpus_from_milli(g.get("nominal_milli")),
            gpus_from_milli(g.get("borrowing_limit_milli")),
            gpus_from_milli(g.get("lending_limit_milli")),
        ]
        while parts[-1] == "":
            parts.pop()
        out.append(f"{g.get('gpu_model')}={':'.join(parts)}")
    return ", ".join(out)
