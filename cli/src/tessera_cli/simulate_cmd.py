"""``tessera simulate``: replay a GPU-cluster trace through the scheduler core, offline.

Reads the Alibaba GPU v2023 format (default: the copy in ``data/traces/``) and prints, per
policy, the fill run's unallocated GPU fraction (placement layer alone, as the FGD paper
measures it) and the replay's allocation ratio, queueing delays by QoS class and by tenant, job
counts and preemptions (the replay goes through ``SchedulerCore``, the scheduler service's
decision core; see ``tessera_scheduler.simulator``). ``--compare`` runs several policies on the
same trace side by side; ``--quota`` makes the QoS tenants' quotas bind (shares of one cohort).
Pure computation: no servers are needed.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from tessera_cli.output import format_table

_TRACES = Path("data") / "traces"
POD_FILE = "openb_pod_list_default.csv"
NODE_FILE = "openb_node_list_gpu_node.csv"


def default_trace_dir() -> Path:
    """``data/traces`` of the working directory if it has one, else of the repository this file is in."""
    here = Path.cwd() / _TRACES
    if (here / POD_FILE).is_file():
        return here
    return Path(__file__).resolve().parents[3] / _TRACES


POLICIES = ("fifo", "best-fit", "default")
"""The simulator's policies (``tessera_scheduler.simulator.run.SIMULATOR_POLICIES``), for the help text."""


def register(sub: Any) -> None:
    """Add the ``simulate`` command (the simulator itself is imported only when it runs)."""
    names = ", ".join(POLICIES)
    p = sub.add_parser(
        "simulate",
        help="replay a GPU-cluster trace through the scheduler core (offline)",
        description=f"Fill run and trace replay per policy ({names}).",
    )
    p.add_argument("--trace", type=Path, help=f"pod list CSV (default: data/traces/{POD_FILE})")
    p.add_argument("--nodes", type=Path, help=f"node list CSV (default: data/traces/{NODE_FILE})")
    p.add_argument("--policy", default="default", help=f"one policy: {names} (default: default)")
    p.add_argument(
        "--compare",
        nargs="*",
        metavar="NAME",
        help="run several policies on the same trace (no names: all of them)",
    )
    p.add_argument(
        "--compress",
        type=float,
        default=1.0,
        help="divide the replay's arrival times by this factor (run times unchanged; default 1)",
    )
    p.add_argument(
        "--quota",
        action="store_true",
        help="give each QoS tenant a demand-proportional quota share in one cohort (borrowing, reclaim)",
    )
    p.add_argument("--limit", type=int, help="use only the first N pods of the trace")
    p.add_argument("--include-cpu-only", action="store_true", help="also replay pods that ask for no GPU")
    p.add_argument("--samples", type=int, default=100, help="points of the allocation-ratio series (default 100)")
    p.add_argument("--json", action="store_true", help='print {"policies": {name: figures}} as JSON')
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    p.set_defaults(handler=run_simulate)


def run_simulate(args: argparse.Namespace) -> int:
    """Load the trace, run the policies, print the figures."""
    from tessera_scheduler.simulator.run import SIMULATOR_POLICIES, compare, simulator_policy
    from tessera_scheduler.simulator.trace import load_nodes, load_pods

    names = [args.policy] if args.compare is None else (args.compare or list(SIMULATOR_POLICIES))
    for name in names:
        simulator_policy(name)
    if args.limit is not None and args.limit < 1:
        raise ValueError(f"--limit must be at least 1, not {args.limit}")
    if args.samples < 2:
        raise ValueError(f"--samples must be at least 2, not {args.samples}")
    if not args.compress > 0:
        raise ValueError(f"--compress must be > 0, not {args.compress}")
    folder = default_trace_dir()
    pods = load_pods(args.trace or folder / POD_FILE, include_cpu_only=args.include_cpu_only)
    nodes = load_nodes(args.nodes or folder / NODE_FILE, include_cpu_only=args.include_cpu_only)
    if args.limit is not None:
        pods = pods[: args.limit]
    result = compare(pods, nodes, names, samples=args.samples, compress=args.compress, quotas=args.quota)
    if args.json:
        print(json.dumps(result))
    else:
        print(render(result["policies"]))
    return 0


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def render(policies: dict[str, dict[str, Any]]) -> str:
    """The figures of each policy side by side, one row per figure."""
    names = list(policies)
    rows: list[list[str]] = []

    def row(label: str, get: Any) -> None:
        rows.append([label, *(_fmt(get(policies[name])) for name in names)])

    row("queue", lambda f: f["queue"])
    row("placement", lambda f: f["placement"])
    row("quotas", lambda f: f["quotas"])
    row("unallocated GPU fraction (fill)", lambda f: f["unallocated_gpu_fraction"])
    for mark in next(iter(policies.values()))["fill"]["curve"]:
        row(f"  at {float(mark):.0%} of capacity arrived", lambda f, m=mark: f["fill"]["curve"][m])
    row("GPU allocation ratio, mean", lambda f: f["gpu_allocation_ratio_mean"])
    row("queueing delay p50 (s)", lambda f: f["queue_delay_s"]["p50"])
    row("queueing delay p99 (s)", lambda f: f["queue_delay_s"]["p99"])
    qos_classes = {q for f in policies.values() for q in f["queue_delay_s"]["by_qos"]}
    for qos in ("LS", "Guaranteed", "Burstable", "BE"):
        if qos in qos_classes:
            row(
                f"  {qos} (tenant qos-{qos}) p50 / p99 (s)", lambda f, q=qos: _pair(f["queue_delay_s"]["by_qos"].get(q))
            )
    row("jobs submitted", lambda f: f["jobs_submitted"])
    row("jobs completed", lambda f: f["jobs_completed"])
    row("jobs still queued", lambda f: f["jobs_still_queued"])
    row("jobs rejected (fit nowhere)", lambda f: f["jobs_rejected"])
    row("preemptions", lambda f: f["preemptions"])
    row("wall time fill + replay (s)", lambda f: f"{f['wall_s']['fill']} + {f['wall_s']['replay']}")
    return format_table(["", *names], rows)


def _pair(figures: dict[str, Any] | None) -> str:
    if not figures:
        return "-"
    return f"{_fmt(figures['p50'])} / {_fmt(figures['p99'])}"
