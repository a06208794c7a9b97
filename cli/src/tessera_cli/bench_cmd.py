"""``tessera bench``: benchmarks; each prints one JSON object (``--json``) or a short table."""

from __future__ import annotations

import argparse
import json
from typing import Any

from tessera_cli.client import UsageError


def register(sub: Any) -> None:
    """Add the ``bench`` command."""
    p = sub.add_parser("bench", help="benchmarks (JSON out)")
    bsub = p.add_subparsers(dest="benchmark", required=True, metavar="BENCHMARK")
    e = bsub.add_parser("eventlog", help="append, projection and replay throughput of the event log")
    e.add_argument("--events", type=positive_int, default=200_000, help="events to append (default 200000)")
    e.add_argument("--aggregates", type=positive_int, default=1000, help="aggregates they spread over (default 1000)")
    e.add_argument("--payload-bytes", type=positive_int, default=256, help="size of each event's data (default 256)")
    e.add_argument(
        "--replay-events", type=positive_int, default=1_000_000, help="log size for the replay (default 1000000)"
    )
    e.add_argument("--sync-events", type=int, default=50_000, help="events for the sync_interval=always run (0: skip)")
    e.add_argument("--nats-url", help="use this NATS instead of a private embedded one")
    e.add_argument("--database-url", help="use this Postgres instead of a private embedded one")
    e.add_argument("--json", action="store_true", help="print one JSON object")
    e.set_defaults(handler=run_eventlog)
    s = bsub.add_parser("scheduler", help="decisions per second of the scheduler core on a synthetic cluster")
    s.add_argument("--nodes", type=positive_int, default=10_000, help="nodes (default 10000)")
    s.add_argument("--gpus-per-node", type=positive_int, default=8, help="devices per node (default 8)")
    s.add_argument(
        "--pending", type=int, default=100_000, help="jobs submitted before the first cycle (default 100000)"
    )
    s.add_argument("--tenants", type=positive_int, default=50, help="tenants, in cohorts of up to ten (default 50)")
    s.add_argument("--placement", default="fgd", help="placement policy: fgd, best-fit, first-fit (default fgd)")
    s.add_argument("--max-cycles", type=positive_int, default=100, help="stop after this many cycles (default 100)")
    s.add_argument("--seed", type=int, default=1, help="seed of the generator (default 1)")
    s.add_argument("--json", action="store_true", help="print one JSON object")
    s.set_defaults(handler=run_scheduler)
    k = bsub.add_parser("kueue", help="Kueue's performance baseline scenario (30 ClusterQueues, 15000 workloads)")
    k.add_argument(
        "--mode",
        choices=("core", "live"),
        default="core",
        help="core: the decision core alone, virtual time (default); live: the scheduler service on NATS and"
        " Postgres, real time",
    )
    k.add_argument("--placement", default="fgd", help="placement policy, core mode (default fgd)")
    k.add_argument(
        "--time-scale", type=float, default=1.0, help="live mode: multiply submit and run times by this (default 1)"
    )
    k.add_argument("--fraction", type=float, default=1.0, help="share of each workload class to run (default 1)")
    k.add_argument("--nats-url", help="live mode: use this NATS instead of a private embedded one")
    k.add_argument("--database-url", help="live mode: use this Postgres instead of a private embedded one")
    k.add_argument("--seed", type=int, default=1, help="seed of the generator (default 1)")
    k.add_argument("--json", action="store_true", help="print one JSON object")
    k.set_defaults(handler=run_kueue)


def positive_int(text: str) -> int:
    """Argparse ``type``: an integer of 1 or more."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive integer, not {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, not {text}")
    return value


def run_eventlog(args: argparse.Namespace) -> int:
    """Run the event-log benchmark and print its figures."""
    from tessera_bench import eventlog

    if bool(args.nats_url) != bool(args.database_url):
        raise ValueError("give both --nats-url and --database-url, or neither")
    result = eventlog.run(
        events=args.events,
        aggregates=args.aggregates,
        payload_bytes=args.payload_bytes,
        replay_events=max(args.replay_events, args.events),
        sync_events=args.sync_events,
        nats_url=args.nats_url,
        database_url=args.database_url,
    )
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key:<36} {value}")
    return 0


def _print(result: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key:<36} {value}")


def run_scheduler(args: argparse.Namespace) -> int:
    """Run the scheduler-core benchmark and print its figures."""
    from tessera_bench import scheduler

    if args.pending < 0:
        raise ValueError(f"--pending must be >= 0, not {args.pending}")
    result = scheduler.run_scheduler(
        nodes=args.nodes,
        gpus_per_node=args.gpus_per_node,
        pending=args.pending,
        tenants=args.tenants,
        seed=args.seed,
        placement=args.placement,
        max_cycles=args.max_cycles,
    )
    _print(result, args.json)
    return 0


def run_kueue(args: argparse.Namespace) -> int:
    """Run Kueue's baseline scenario through the scheduler core or the live service and print its figures."""
    if not 0 < args.fraction <= 1:
        raise UsageError(f"--fraction must be in (0, 1], not {args.fraction}")
    if args.mode == "core" and args.time_scale != 1.0:
        raise UsageError("--time-scale applies to --mode live only")
    if args.mode == "live":
        from tessera_bench import kueue_live

        if bool(args.nats_url) != bool(args.database_url):
            raise UsageError("give both --nats-url and --database-url, or neither")
        if not args.time_scale > 0:
            raise UsageError(f"--time-scale must be > 0, not {args.time_scale}")
        result = kueue_live.run_live(
            time_scale=args.time_scale,
            fraction=args.fraction,
            seed=args.seed,
            nats_url=args.nats_url,
            database_url=args.database_url,
        )
    else:
        from tessera_bench import kueue

        result = kueue.run_core(seed=args.seed, placement=args.placement, fraction=args.fraction)
    _print(result, args.json)
    return 0
