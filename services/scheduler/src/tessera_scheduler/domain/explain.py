"""Words for why a job waits and what would let it run.

Two kinds of text:

- **Verdicts** (``JobQueued`` reason and message) are *stable*: they name the job's shape, the
  rule that holds it and what would change it, but no number that moves by itself (free devices,
  usage, time). ``JobQueued`` is emitted only when a job's verdict changes, so a stable message
  is what keeps 100,000 waiting jobs from flooding the log every cycle.
- **Explanations** (:func:`explain_pending` and friends, behind ``SchedulerCore.explain``) are
  live: they add the numbers of the moment (quota usage, budget, free capacity, queue position).

Amounts are printed as GPUs with three decimals (milli-GPU / 1000), memory in MiB, CPU in cores.
"""

from __future__ import annotations

from collections.abc import Sequence

from tessera_scheduler.domain.jobs import JobRecord, Verdict
from tessera_scheduler.domain.quota import QuotaCheck, gpus
from tessera_scheduler.placement import GPU_MILLI, Request


def worker_text(requests: Sequence[Request]) -> str:
    """``2 workers of 8 x 1.000 A100 GPU, 16.0 CPU, 65536 MiB`` (what one worker needs, times the gang)."""
    if not requests:
        return "no worker"
    r = requests[0]
    n = len(requests)
    who = "1 worker" if n == 1 else f"{n} workers"
    models = "/".join(sorted(r.allowed_models)) or "any model"
    if r.gpus == 0:
        gpu = "no GPU"
    elif r.mig_profile is not None:
        gpu = f"one {r.mig_profile} MIG slice ({models})"
    elif r.milli < GPU_MILLI:
        mem = f" with {r.memory_mib} MiB" if r.memory_mib is not None else ""
        gpu = f"{gpus(r.milli)} of a GPU{mem} ({models})"
    else:
        mem = f" of at least {r.memory_mib} MiB" if r.memory_mib is not None else ""
        gpu = f"{r.gpus} whole GPU{'s' if r.gpus > 1 else ''}{mem} ({models})"
    host = f", {r.cpu_milli / 1000:.1f} CPU, {r.host_memory_mib} MiB host memory"
    where = []
    if r.selector.cluster is not None:
        where.append(f"cluster {r.selector.cluster}")
    if r.selector.region is not None:
        where.append(f"region {r.selector.region}")
    if r.selector.labels:
        where.append("labels " + ",".join(f"{k}={v}" for k, v in sorted(r.selector.labels)))
    place = f" on nodes with {', '.join(where)}" if where else ""
    return f"{who} of {gpu}{host}{place}"


def unschedulable(job: JobRecord, detail: str, *, nodes: int = 1) -> Verdict:
    """The job can never run as things are: no usable node could hold it even empty, or its spec is invalid.

    ``nodes`` is how many usable nodes the platform has; with none, the text says so plainly.
    """
    if nodes == 0:
        return (
            "Unschedulable",
            f"no node is registered (or every node is lost), so nothing can run yet; the job ({detail}) runs once "
            f"node agents register nodes that can hold it",
        )
    return (
        "Unschedulable",
        f"no node in the platform could hold this job even if it were empty ({detail}); it runs only if a node "
        f"that can hold it registers, or if the job is resubmitted with a smaller or less constrained spec",
    )


def no_quota(job: JobRecord, models: Sequence[str]) -> Verdict:
    """The tenant has no quota for any GPU model the job could run on."""
    listed = ", ".join(models) or "any model"
    return (
        "NoQuota",
        f"tenant {job.tenant} has no GPU quota for {listed}, the models that could hold this job; a platform admin "
        f"can give it one with `tessera quotas set -t {job.tenant} --gpu MODEL=N`",
    )


def quota_wait(job: JobRecord, check: QuotaCheck, model: str | None, milli: int) -> Verdict:
    """Held by quota (``QuotaExceeded``, ``MaxJobsExceeded`` or ``NoQuota``), in stable words."""
    reason = check.reason or "QuotaExceeded"
    if reason == "MaxJobsExceeded":
        return (
            reason,
            f"tenant {job.tenant} or its project {job.project} runs its maximum number of concurrent jobs; the job "
            f"runs when one of them ends, or when the maximum is raised (`tessera quotas set -t {job.tenant} "
            f"--max-jobs N`)",
        )
    if reason == "NoQuota":
        return no_quota(job, [model] if model else [])
    return (
        "QuotaExceeded",
        f"the job needs {gpus(milli)} {model} GPUs, more than tenant {job.tenant} (project {job.project}) may take "
        f"now within its quota and what its cohort lends; it runs when jobs of the tenant or the cohort end, when "
        f"capacity borrowed from the tenant is reclaimed for it (while the tenant is within its nominal quota), or "
        f"when the quota is raised (`tessera quotas set -t {job.tenant} --gpu {model}=N`)",
    )


def budget_wait(job: JobRecord) -> Verdict:
    """Held by the monthly GPU-hour budget."""
    return (
        "BudgetExhausted",
        f"the monthly GPU-hour budget of tenant {job.tenant} (or of project {job.project}) is spent, or too small "
        f"for the job's maximum runtime; the job runs when the budget renews or is raised (`tessera quotas set "
        f"-t {job.tenant} --budget N`)",
    )


def no_fit(requests: Sequence[Request], *, partial: bool) -> Verdict:
    """Quota allows the job but no node (set of nodes for a gang) has room for it now."""
    if partial:
        return (
            "GangIncomplete",
            f"the job needs {worker_text(requests)}, all at once; some of its workers would fit now but not all of "
            f"them, so none is placed; it runs when running jobs free enough capacity for the whole gang",
        )
    return (
        "NoFit",
        f"quota allows the job, but no node has room for {worker_text(requests)} now; it runs when running jobs "
        f"free that capacity (a job waiting too long gets nodes reserved for it)",
    )


def reserved(owner: JobRecord, *, quota: bool) -> Verdict:
    """Held back so that an older, starving job gets the capacity (or the quota) first.

    A quota hold is within one tenant and names the job it waits for; nodes may be held for
    another tenant's job, which is not named (another tenant's object is not to be seen).
    """
    if quota:
        return (
            "Reserved",
            f"the quota it needs is held for job {owner.job_id} of the same tenant, which has waited longer than "
            f"the starvation limit; this job runs after that one is placed, or when more quota frees up",
        )
    return (
        "Reserved",
        "the nodes it would fit on are held for an older job that has waited longer than the starvation limit; "
        "this job runs after that one is placed, or on other capacity when some frees up",
    )


def preempted(victim: JobRecord, preemptor: JobRecord, reason: str) -> str:
    """The message of a ``JobPreempted`` for priority or reclaim."""
    if reason == "reclaim":
        return (
            f"tenant {victim.tenant} was borrowing {victim.gpu_model} capacity that tenant {preemptor.tenant} "
            f"reclaimed for job {preemptor.job_id}; the job is pending again with its original submit time"
        )
    return (
        f"job {preemptor.job_id} of priority {preemptor.priority} needed the capacity of this job (priority "
        f"{victim.priority}); the job is pending again with its original submit time"
    )


def node_lost(node: str, silent_s: float) -> str:
    """The message of a ``JobPreempted`` for node loss."""
    return f"node {node} stopped heart-beating for {silent_s:.0f} s; the job is pending again with its submit time"


def explain_pending(job: JobRecord, now: float, ahead: int, lines: Sequence[str]) -> str:
    """A pending job: how long it waited, its last verdict, where it stands, and the live numbers.

    ``ahead``: pending jobs of the same tenant ordered before it; ``lines``: live findings (quota,
    budget, capacity), each a sentence.
    """
    waited = max(0.0, now - job.submitted_at)
    head = (
        f"job {job.job_id} ({job.name}) of tenant {job.tenant}, project {job.project}, priority {job.priority}, "
        f"has waited {waited:.0f} s since it was submitted"
    )
    if job.preemptions:
        head += f" (preempted {job.preemptions} time(s))"
    if job.last_queued is not None:
        reason, message = job.last_queued
        head += f". It waits with {reason}: {message}"
    else:
        head += ". It has not been considered by a scheduling cycle yet"
    order = f"{ahead} job(s) of tenant {job.tenant} are ahead of it in its queue order (priority, then submit time)"
    return ". ".join([head, order, *lines]) + "."


def explain_placed(job: JobRecord, now: float) -> str:
    """A running job: where, what it holds, since when."""
    nodes = ", ".join(sorted({a.node for a in job.assignments}))
    since = now - (job.placed_at or now)
    text = (
        f"job {job.job_id} ({job.name}) of tenant {job.tenant} runs on {nodes} with {gpus(job.milli)} "
        f"{job.gpu_model or 'no'} GPUs, placed {since:.0f} s ago"
    )
    if job.borrowed_milli:
        text += f"; its tenant was borrowing {gpus(job.borrowed_milli)} GPUs when it was admitted"
    if job.preemptible:
        text += "; it is preemptible by higher-priority jobs of its tenant, or by reclaim if its tenant borrows"
    return text + "."
