"""``tessera quotas get|list|set``: GPU quotas of a tenant or one of its projects.

``--gpu MODEL=NOMINAL[:BORROW[:LEND]]`` gives one GPU model's nominal quota, borrowing limit and
lending limit, in GPUs (``8``, ``0.5``) or in milli-GPU with an ``m`` suffix (``500m``); an empty
part is "no limit" (``H100=8::2``). ``--weight N`` is the tenant's weight in fair share between
tenants (1-1000; a tenant's quota only). ``set`` changes only what it is given and keeps the rest
of the current quota (``--replace`` sets exactly what is given).
"""

from __future__ import annotations

import argparse
import re
from decimal import Decimal, InvalidOperation
from typing import Any

from tessera_cli import output
from tessera_cli.client import (
    Api,
    ApiError,
    UsageError,
    add_list_options,
    add_read_options,
    add_tenant_option,
    handles_errors,
    path,
)

COLUMNS: list[output.Column] = [
    ("TENANT", "tenant"),
    ("PROJECT", "project"),
    ("COHORT", "cohort"),
    ("GPUS", lambda q: output.gpu_quotas(q.get("gpus"))),
    ("BUDGET (GPU-H/MONTH)", "monthly_gpu_hour_budget"),
    ("MAX JOBS", "max_concurrent_jobs"),
    ("WEIGHT", "fair_share_weight"),
    ("UPDATED", "updated_at"),
]
GPU_SYNTAX = "MODEL=NOMINAL[:BORROW[:LEND]], e.g. H100-80GB=8:4:2 (GPUs, or milli-GPU as 500m)"
_GPU_MODEL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_MAX_MILLI = 1_000_000_000
_MAX_WEIGHT = 1000
_BODY_FIELDS = ("cohort", "gpus", "monthly_gpu_hour_budget", "max_concurrent_jobs", "fair_share_weight")


def register(sub: Any) -> None:
    """Add ``quotas``."""
    p = sub.add_parser("quotas", help="GPU quotas of tenants and projects")
    qsub = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    get = qsub.add_parser("get", help="the quota of a tenant, or of one of its projects")
    add_tenant_option(get)
    get.add_argument("-p", "--project", help="the project (default: the tenant's own quota)")
    add_read_options(get)
    get.set_defaults(handler=handles_errors(run_get))

    ls = qsub.add_parser("list", help="the tenant's quota and every project's")
    add_tenant_option(ls)
    add_list_options(ls)
    ls.set_defaults(handler=handles_errors(run_list))

    put = qsub.add_parser(
        "set",
        help="set a quota (tenant: platform admins; project: tenant admins)",
        description="Change a quota. Only the options given change, unless --replace.",
    )
    add_tenant_option(put)
    put.add_argument("-p", "--project", help="the project (default: the tenant's own quota)")
    put.add_argument("--cohort", help="the cohort the tenant lends to and borrows from")
    put.add_argument("--gpu", action="append", default=[], metavar="SPEC", help=f"repeatable: {GPU_SYNTAX}")
    put.add_argument("--budget", metavar="GPU_HOURS", help="monthly GPU-hour budget")
    put.add_argument("--max-jobs", metavar="N", help="maximum concurrent jobs")
    put.add_argument(
        "--weight",
        metavar="N",
        help=f"the tenant's weight in fair share between tenants, 1-{_MAX_WEIGHT} (tenant quota only; default 1)",
    )
    put.add_argument("--replace", action="store_true", help="replace the whole quota with what is given")
    add_read_options(put)
    put.set_defaults(handler=handles_errors(run_set))


def _quota_path(args: argparse.Namespace) -> str:
    if args.project:
        return path("tenants", args.tenant, "projects", args.project, "quota")
    return path("tenants", args.tenant, "quota")


def parse_amount(text: str, spec: str) -> int | None:
    """One ``--gpu`` amount as milli-GPU: ``8`` → 8000, ``0.5`` → 500, ``500m`` → 500, empty → None.

    Raises:
        UsageError: not a non-negative amount, or finer than one milli-GPU.
    """
    text = text.strip()
    if not text:
        return None
    scale = Decimal(1) if text.endswith("m") else Decimal(1000)
    try:
        value = Decimal(text.removesuffix("m")) * scale
    except InvalidOperation:
        raise UsageError(f"--gpu {spec!r}: {text!r} is not a number; expected {GPU_SYNTAX}") from None
    if not value.is_finite() or value < 0 or value != value.to_integral_value() or value > _MAX_MILLI:
        raise UsageError(f"--gpu {spec!r}: {text!r} must be 0 or more, in whole milli-GPU")
    return int(value)


def parse_gpu(spec: str) -> dict[str, Any]:
    """``MODEL=NOMINAL[:BORROW[:LEND]]`` as a ``GpuQuotaBody``.

    Raises:
        UsageError: the spec does not have that shape.
    """
    model, sep, amounts = spec.partition("=")
    parts = amounts.split(":")
    if not sep or not _GPU_MODEL.match(model) or len(parts) > 3:
        raise UsageError(f"--gpu {spec!r}: expected {GPU_SYNTAX}")
    nominal = parse_amount(parts[0], spec)
    if nominal is None:
        raise UsageError(f"--gpu {spec!r}: the nominal quota is missing; expected {GPU_SYNTAX}")
    parts += [""] * (3 - len(parts))
    return {
        "gpu_model": model,
        "nominal_milli": nominal,
        "borrowing_limit_milli": parse_amount(parts[1], spec),
        "lending_limit_milli": parse_amount(parts[2], spec),
    }


def quota_changes(args: argparse.Namespace) -> dict[str, Any]:
    """The body fields the options set (validated; a bad value is a :class:`UsageError`)."""
    changes: dict[str, Any] = {}
    if args.cohort is not None:
        changes["cohort"] = args.cohort or None
    if args.gpu:
        gpus = [parse_gpu(spec) for spec in args.gpu]
        models = [g["gpu_model"] for g in gpus]
        if len(set(models)) != len(models):
            raise UsageError("--gpu: each GPU model may be given once")
        changes["gpus"] = gpus
    if args.budget is not None:
        try:
            budget = Decimal(args.budget)
        except InvalidOperation:
            budget = Decimal(-1)
        if not budget.is_finite() or budget < 0:
            raise UsageError(f"--budget {args.budget!r}: expected GPU-hours, 0 or more")
        changes["monthly_gpu_hour_budget"] = str(budget)
    if args.max_jobs is not None:
        if not args.max_jobs.isdigit() or int(args.max_jobs) < 1:
            raise UsageError(f"--max-jobs {args.max_jobs!r}: expected a whole number, 1 or more")
        changes["max_concurrent_jobs"] = int(args.max_jobs)
    if args.weight is not None:
        if args.project:
            raise UsageError("--weight is the tenant's weight in fair share; give it without --project")
        if not (args.weight.isascii() and args.weight.isdigit()) or not 1 <= int(args.weight) <= _MAX_WEIGHT:
            raise UsageError(f"--weight {args.weight!r}: expected a whole number from 1 to {_MAX_WEIGHT}")
        changes["fair_share_weight"] = int(args.weight)
    return changes


def merge(current: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    """A ``SetQuota`` body: ``current`` (a quota view) with ``changes`` applied; GPU models merge by name."""
    body: dict[str, Any] = {name: current.get(name) for name in _BODY_FIELDS if current.get(name) is not None}
    gpus: list[dict[str, Any]] = [
        {k: g.get(k) for k in ("gpu_model", "nominal_milli", "borrowing_limit_milli", "lending_limit_milli")}
        for g in current.get("gpus") or []
    ]
    for name, value in changes.items():
        if name == "gpus":
            given = {g["gpu_model"] for g in value}
            gpus = [g for g in gpus if g["gpu_model"] not in given] + value
        else:
            body[name] = value
    body["gpus"] = gpus
    return {name: value for name, value in body.items() if value is not None}


def run_get(args: argparse.Namespace) -> int:
    """``GET`` the tenant's or project's quota."""
    with Api.from_config() as api:
        output.show(api.get(_quota_path(args)), COLUMNS, as_json=args.json)
    return 0


def run_list(args: argparse.Namespace) -> int:
    """``GET /v1/tenants/{tenant}/quotas``, every page."""
    with Api.from_config() as api:
        page = api.list_all(path("tenants", args.tenant, "quotas"), limit=args.limit, after=args.after)
    output.show_list(page, COLUMNS, as_json=args.json)
    return 0


def run_set(args: argparse.Namespace) -> int:
    """``PUT`` the quota: the current one with the given changes (or only them, with ``--replace``)."""
    changes = quota_changes(args)
    if not changes and not args.replace:
        raise UsageError("nothing to set: give --cohort, --gpu, --budget, --max-jobs or --weight")
    with Api.from_config() as api:
        current: dict[str, Any] = {}
        if not args.replace:
            try:
                found = api.get(_quota_path(args))
            except ApiError as exc:
                if exc.status != 404:
                    raise
                found = None
            current = found if isinstance(found, dict) else {}
        result = api.put(_quota_path(args), merge(current, changes))
    output.show(result, COLUMNS, as_json=args.json)
    return 0
