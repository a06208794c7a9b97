"""Job execution for the node agent: a worker's environment and its supervised process.

No messaging here: the agent wires :class:`JobProcess` to ``JobPlaced``/``JobStarted``/``JobFinished``.
"""

from tessera_agent.execution.environment import (
    FULL_DEVICE_MILLI,
    RESERVED_KEYS,
    RESERVED_PREFIXES,
    is_fractional,
    is_reserved,
    job_environment,
)
from tessera_agent.execution.process import TAIL_LINES, Exit, JobProcess, LaunchError, OutputCallback

__all__ = [
    "FULL_DEVICE_MILLI",
    "RESERVED_KEYS",
    "RESERVED_PREFIXES",
    "TAIL_LINES",
    "Exit",
    "JobProcess",
    "LaunchError",
    "OutputCallback",
    "is_fractional",
    "is_reserved",
    "job_environment",
]
