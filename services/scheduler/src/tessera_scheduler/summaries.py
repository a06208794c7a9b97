"""One sentence per job event, for ``tessera jobs explain`` (the ``job_history`` rows of the projection).

Pure functions of the event: a rebuilt projection writes the same sentences.
"""

from __future__ import annotations

from tessera_contracts.events import scheduler as ev
from tessera_contracts.registry import Event


def short_type(event_type: str) -> str:
    """``tessera.scheduler.job.placed.v1`` -> ``placed``."""
    parts = event_type.split(".")
    return parts[-2] if len(parts) >= 2 else event_type


def resources(worker: ev.WorkerSpec) -> str:
    """What one worker asks for, in words: ``2 GPU``, ``500 milli-GPU``, ``10240 MiB of a GPU``, ``MIG 1g.10gb``."""
    if worker.mig_profile:
        what = f"MIG {worker.mig_profile}"
    elif worker.gpu_memory_mib:
        what = f"{worker.gpu_memory_mib} MiB of a GPU"
    elif worker.gpus == 0:
        what = "no GPU"
    elif worker.milli is not None and worker.milli < 1000:
        what = f"{worker.milli} milli-GPU"
    else:
        what = f"{worker.gpus} GPU"
    if worker.gpu_models:
        what += f" ({' or '.join(worker.gpu_models)})"
    return what


def summary(event: Event) -> str:
    """A sentence saying what ``event`` did to its job."""
    match event:
        case ev.JobSubmitted():
            gang = f"{event.workers} workers x " if event.workers > 1 else ""
            return (
                f"submitted to queue {event.queue} by {event.submitted_by}: {gang}{resources(event.worker)},"
                f" priority class {event.priority_class} ({event.priority}"
                f"{', preemptible' if event.preemptible else ''})"
            )
        case ev.JobQueued():
            return f"waiting ({event.reason}): {event.message}"
        case ev.JobAdmitted():
            flavour = f"{event.gpu_model} quota" if event.gpu_model else "no GPU quota"
            text = f"admitted: {event.milli} milli-GPU of {flavour}"
            if event.borrowed_milli:
                text += f", {event.borrowed_milli} milli-GPU borrowed from cohort {event.cohort or '-'}"
            return text
        case ev.JobPlaced():
            nodes = sorted({p.node for p in event.placements})
            return f"placed on {', '.join(nodes)}" + (f" ({event.gpu_model})" if event.gpu_model else "")
        case ev.JobStarted():
            return f"started on {event.node}"
        case ev.JobPreempted():
            text = f"preempted ({event.reason})"
            if event.preemptor_job_id:
                text += f" for job {event.preemptor_job_id}"
                if event.preemptor_tenant:
                    text += f" of tenant {event.preemptor_tenant}"
            return text + (f": {event.message}" if event.message else "")
        case ev.JobFinished():
            code = f", exit code {event.exit_code}" if event.exit_code is not None else ""
            return f"finished: {event.outcome}{code}" + (f": {event.message}" if event.message else "")
        case ev.JobCancelled():
            return f"cancelled by {event.by}" + (f": {event.reason}" if event.reason else "")
        case _:
            return type(event).__name__
