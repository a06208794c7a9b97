"""``tessera jobs submit|list|get|cancel|explain``: jobs of a tenant's projects.

``submit`` takes the command after ``--``::

    tessera jobs submit -t acme --project vision --priority-class high --gpus 2 -- python train.py --lr 0.1

Resources per worker: ``--gpus N`` whole GPUs (default 1; 0 for a CPU-only job), or one share
of a GPU: ``--milli M`` (1-999 milli-GPU), ``--gpu-memory MiB`` or ``--mig PROFILE`` (e.g.
``1g.10gb``). ``--workers N`` makes a gang of N workers, placed all at once or not at all.
"""

from __future__ import annotations

import argparse
import os
from typing import Any, get_args

from tessera_cli import output
from tessera_cli.client import (
    Api,
    UsageError,
    add_list_options,
    add_read_options,
    add_tenant_option,
    handles_errors,
    path,
    positive_int,
)
from tessera_cli.clusters_cmd import parse_labels
from tessera_contracts.api.scheduler import JobState

STATES: tuple[str, ...] = get_args(JobState)


def resources(job: Any) -> str:
    """A job's request in short: ``2x 1 GPU``, ``500m``, ``10240MiB``, ``mig 1g.10gb``, ``cpu``."""
    if job.get("mig_profile"):
        what = f"mig {job['mig_profile']}"
    elif job.get("gpu_memory_mib"):
        what = f"{job['gpu_memory_mib']}MiB"
    elif not job.get("gpus"):
        what = "cpu"
    elif job.get("milli") is not None and job["milli"] < 1000:
        what = f"{job['milli']}m"
    else:
        what = f"{job.get('gpus')} GPU"
    workers = job.get("workers") or 1
    return f"{workers}x {what}" if workers > 1 else what


def _nodes(job: Any) -> str:
    return ", ".join(sorted({p.get("node", "?") for p in job.get("placements") or []}))


COLUMNS: list[output.Column] = [
    ("ID", "id"),
    ("NAME", "name"),
    ("PROJECT", "project"),
    ("QUEUE", "queue"),
    ("STATE", "state"),
    ("RESOURCES", resources),
    ("PRIORITY", lambda j: f"{j.get('priority_class')} ({j.get('priority')})"),
    ("REASON", "reason"),
    ("NODES", _nodes),
    ("SUBMITTED", "submitted_at"),
]
DETAIL: list[output.Column] = [
    *COLUMNS[:7],
    ("PREEMPTIBLE", "preemptible"),
    ("GPU MODEL", "gpu_model"),
    ("BORROWED (MILLI)", "borrowed_milli"),
    ("NODES", _nodes),
    ("REASON", "reason"),
    ("MESSAGE", "message"),
    ("PREEMPTIONS", "preemptions"),
    ("OUTCOME", "outcome"),
    ("SUBMITTED BY", "submitted_by"),
    ("SUBMITTED", "submitted_at"),
    ("ADMITTED", "admitted_at"),
    ("PLACED", "placed_at"),
    ("ENDED", "ended_at"),
]
HISTORY: list[output.Column] = [("AT", "at"), ("EVENT", "type"), ("WHAT", "summary")]


def register(sub: Any) -> None:
    """Add ``jobs``."""
    p = sub.add_parser("jobs", help="submit and follow jobs")
    jsub = p.add_subparsers(dest="action", required=True, metavar="ACTION")

    submit = jsub.add_parser(
        "submit",
        help="submit a job: tessera jobs submit -t T --project P --priority-class C [options] -- COMMAND...",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_tenant_option(submit)
    submit.add_argument("-p", "--project", required=True, help="the project")
    submit.add_argument("--priority-class", required=True, help="an existing priority class (tessera priority-classes)")
    submit.add_argument("--name", help="a name for people (default: the command's program name)")
    submit.add_argument("--queue", default="default", help="the project's queue (default: default)")
    submit.add_argument("--gpus", type=int, default=1, metavar="N", help="whole GPUs per worker (default 1; 0: none)")
    share = submit.add_mutually_exclusive_group()
    share.add_argument("--milli", type=int, metavar="M", help="a share of one GPU, 1-999 milli-GPU")
    share.add_argument("--gpu-memory", type=int, metavar="MIB", help="a share of one GPU, as device memory in MiB")
    share.add_argument("--mig", metavar="PROFILE", help="one MIG slice, e.g. 1g.10gb")
    submit.add_argument("--model", action="append", default=[], metavar="GPU_MODEL", help="allowed model, repeatable")
    submit.add_argument("--workers", type=positive_int, default=1, metavar="N", help="gang size (default 1)")
    submit.add_argument("--cpu", type=int, default=0, metavar="MILLI", help="host CPU per worker, milli-cores")
    submit.add_argument("--memory", type=int, default=0, metavar="MIB", help="host memory per worker, MiB")
    submit.add_argument("--cluster", help="run only on this cluster")
    submit.add_argument("--region", help="run only in this region")
    submit.add_argument("--label", action="append", default=[], metavar="KEY=VALUE", help="node label, repeatable")
    submit.add_argument("--env", action="append", default=[], metavar="NAME=VALUE", help="environment, repeatable")
    submit.add_argument("--max-runtime", type=positive_int, metavar="SECONDS", help="stop the job after this long")
    submit.add_argument("--no-preempt", action="store_true", help="never preempt this job (overrides the class)")
    submit.add_argument("command", nargs="*", metavar="COMMAND", help="after --: the program and its arguments")
    add_read_options(submit)
    submit.set_defaults(handler=handles_errors(run_submit))

    ls = jsub.add_parser("list", help="the tenant's jobs, newest first")
    add_tenant_option(ls)
    ls.add_argument("-p", "--project", help="only this project's")
    ls.add_argument("--queue", help="only this queue's")
    ls.add_argument("--state", choices=STATES, help="only jobs in this state")
    add_list_options(ls)
    ls.set_defaults(handler=handles_errors(run_list))

    for action, helptext, run in (
        ("get", "one job", run_get),
        ("cancel", "cancel a job (its allocation ends now)", run_cancel),
        ("explain", "why a job waits, and its history", run_explain),
    ):
        cmd = jsub.add_parser(action, help=helptext)
        add_tenant_option(cmd)
        cmd.add_argument("job", help="the job id, j_...")
        if action == "cancel":
            cmd.add_argument("--reason", default="", help="why (kept in the job's history)")
        add_read_options(cmd)
        cmd.set_defaults(handler=handles_errors(run))


def parse_env(specs: list[str]) -> dict[str, str]:
    """``NAME=VALUE`` options as a map.

    Raises:
        UsageError: a spec without ``=`` or with an empty name, or a name given twice.
    """
    env: dict[str, str] = {}
    for spec in specs:
        name, sep, value = spec.partition("=")
        if not sep or not name:
            raise UsageError(f"--env {spec!r}: expected NAME=VALUE")
        if name in env:
            raise UsageError(f"--env {spec!r}: {name} is given twice")
        env[name] = value
    return env


def submit_body(args: argparse.Namespace) -> dict[str, Any]:
    """The ``SubmitJob`` body for the options (the gateway validates the values; this checks the shape).

    Raises:
        UsageError: no command, or options that contradict each other.
    """
    if not args.command:
        raise UsageError("give the command to run after --, e.g. -- python train.py")
    if args.gpus < 0:
        raise UsageError(f"--gpus {args.gpus}: expected 0 or more")
    worker: dict[str, Any] = {"gpus": args.gpus, "cpu_milli": args.cpu, "memory_mib": args.memory}
    shared = args.milli is not None or args.gpu_memory is not None or args.mig is not None
    if shared and args.gpus != 1:
        raise UsageError("--milli, --gpu-memory and --mig ask for a share of one GPU: leave --gpus at 1")
    if args.milli is not None:
        worker["milli"] = args.milli
    if args.gpu_memory is not None:
        worker["gpu_memory_mib"] = args.gpu_memory
    if args.mig is not None:
        worker["mig_profile"] = args.mig
    if args.model:
        worker["gpu_models"] = list(args.model)
    selector: dict[str, Any] = {"labels": parse_labels(args.label)}
    if args.cluster:
        selector["cluster"] = args.cluster
    if args.region:
        selector["region"] = args.region
    body: dict[str, Any] = {
        "name": args.name or os.path.basename(args.command[0]) or "job",
        "queue": args.queue,
        "priority_class": args.priority_class,
        "workers": args.workers,
        "worker": worker,
        "selector": selector,
        "command": list(args.command),
        "env": parse_env(args.env),
    }
    if args.max_runtime is not None:
        body["max_runtime_s"] = args.max_runtime
    if args.no_preempt:
        body["preemptible"] = False
    return body


def run_submit(args: argparse.Namespace) -> int:
    """``POST /v1/tenants/{tenant}/projects/{project}/jobs``."""
    body = submit_body(args)
    with Api.from_config() as api:
        job = api.post(path("tenants", args.tenant, "projects", args.project, "jobs"), body)
    output.show(job, DETAIL, as_json=args.json)
    return 0


def run_list(args: argparse.Namespace) -> int:
    """``GET /v1/tenants/{tenant}/jobs`` with the filters, every page."""
    filters = {k: v for k, v in {"project": args.project, "queue": args.queue, "state": args.state}.items() if v}
    with Api.from_config() as api:
        page = api.list_all(path("tenants", args.tenant, "jobs"), limit=args.limit, after=args.after, filters=filters)
    output.show_list(page, COLUMNS, as_json=args.json)
    return 0


def run_get(args: argparse.Namespace) -> int:
    """``GET /v1/tenants/{tenant}/jobs/{job}``."""
    with Api.from_config() as api:
        output.show(api.get(path("tenants", args.tenant, "jobs", args.job)), DETAIL, as_json=args.json)
    return 0


def run_cancel(args: argparse.Namespace) -> int:
    """``POST /v1/tenants/{tenant}/jobs/{job}/cancel``."""
    body = {"reason": args.reason} if args.reason else {}
    with Api.from_config() as api:
        job = api.post(path("tenants", args.tenant, "jobs", args.job, "cancel"), body)
    output.show(job, DETAIL, as_json=args.json)
    return 0


def run_explain(args: argparse.Namespace) -> int:
    """``GET /v1/tenants/{tenant}/jobs/{job}/explain``: the summary, the job, its history."""
    with Api.from_config() as api:
        found = api.get(path("tenants", args.tenant, "jobs", args.job, "explain"))
    if args.json or not isinstance(found, dict):
        output.show(found, DETAIL, as_json=True)
        return 0
    print(found.get("summary", ""))
    print()
    output.print_record(found.get("job") or {}, [*COLUMNS[:6], ("NODES", _nodes)])
    print()
    output.print_table(found.get("history") or [], HISTORY)
    return 0
