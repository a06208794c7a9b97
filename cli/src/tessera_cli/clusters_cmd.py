"""``tessera clusters list|get|create|node-pool``: GPU clusters and their node pools (platform admins write)."""

from __future__ import annotations

import argparse
from typing import Any, get_args

from tessera_cli import output
from tessera_cli.client import Api, UsageError, add_list_options, add_read_options, handles_errors, path
from tessera_contracts.events.tenancy import Provider

PROVIDERS: tuple[str, ...] = get_args(Provider)


def _pools(cluster: Any) -> str:
    pools = cluster.get("node_pools") or []
    return ", ".join(f"{p.get('pool')}({p.get('gpu_model') or '-'})" for p in pools if isinstance(p, dict))


COLUMNS: list[output.Column] = [
    ("CLUSTER", "cluster"),
    ("REGION", "region"),
    ("PROVIDER", "provider"),
    ("NODE POOLS", _pools),
    ("CREATED", "created_at"),
]
POOL_COLUMNS: list[output.Column] = [("POOL", "pool"), ("GPU MODEL", "gpu_model"), ("LABELS", "labels")]


def register(sub: Any) -> None:
    """Add ``clusters``."""
    p = sub.add_parser("clusters", help="GPU clusters and node pools")
    csub = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    ls = csub.add_parser("list", help="every cluster")
    add_list_options(ls)
    ls.set_defaults(handler=handles_errors(run_list))

    get = csub.add_parser("get", help="one cluster and its node pools")
    get.add_argument("cluster")
    add_read_options(get)
    get.set_defaults(handler=handles_errors(run_get))

    create = csub.add_parser("create", help="register a cluster")
    create.add_argument("cluster", help="lower-case letters, digits and '-'")
    create.add_argument("--region", required=True, help="e.g. eu-west-1, or a site name")
    create.add_argument("--provider", required=True, choices=PROVIDERS)
    add_read_options(create)
    create.set_defaults(handler=handles_errors(run_create))

    pool = csub.add_parser("node-pool", help="define (or redefine) a node pool of a cluster")
    pool.add_argument("cluster")
    pool.add_argument("pool")
    pool.add_argument("--gpu-model", help="the pool's GPU model, e.g. H100-80GB")
    pool.add_argument("--label", action="append", default=[], metavar="KEY=VALUE", help="repeatable")
    add_read_options(pool)
    pool.set_defaults(handler=handles_errors(run_node_pool))


def parse_labels(specs: list[str]) -> dict[str, str]:
    """``KEY=VALUE`` options as a map.

    Raises:
        UsageError: a spec without ``=`` or with an empty key, or a key given twice.
    """
    labels: dict[str, str] = {}
    for spec in specs:
        key, sep, value = spec.partition("=")
        if not sep or not key:
            raise UsageError(f"--label {spec!r}: expected KEY=VALUE")
        if key in labels:
            raise UsageError(f"--label {spec!r}: {key} is given twice")
        labels[key] = value
    return labels


def run_list(args: argparse.Namespace) -> int:
    """``GET /v1/clusters``, every page."""
    with Api.from_config() as api:
        page = api.list_all(path("clusters"), limit=args.limit, after=args.after)
    output.show_list(page, COLUMNS, as_json=args.json)
    return 0


def run_get(args: argparse.Namespace) -> int:
    """``GET /v1/clusters/{cluster}``; the node pools as a table below."""
    with Api.from_config() as api:
        cluster = api.get(path("clusters", args.cluster))
    output.show(cluster, COLUMNS[:3] + COLUMNS[4:], as_json=args.json)
    if not args.json and isinstance(cluster, dict):
        print()
        output.print_table(cluster.get("node_pools") or [], POOL_COLUMNS)
    return 0


def run_create(args: argparse.Namespace) -> int:
    """``POST /v1/clusters``."""
    body = {"cluster": args.cluster, "region": args.region, "provider": args.provider}
    with Api.from_config() as api:
        output.show(api.post(path("clusters"), body), COLUMNS, as_json=args.json)
    return 0


def run_node_pool(args: argparse.Namespace) -> int:
    """``PUT /v1/clusters/{cluster}/node-pools/{pool}``."""
    body: dict[str, Any] = {"labels": parse_labels(args.label)}
    if args.gpu_model:
        body["gpu_model"] = args.gpu_model
    with Api.from_config() as api:
        result = api.put(path("clusters", args.cluster, "node-pools", args.pool), body)
    columns = COLUMNS if isinstance(result, dict) and "cluster" in result else POOL_COLUMNS
    output.show(result, columns, as_json=args.json)
    return 0
