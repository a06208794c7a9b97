"""The scheduler's pure decision core: :class:`SchedulerCore` over the placement layer.

``SchedulerCore.apply(event, at)`` folds the log (tenancy quotas, nodes, jobs, its own
decisions); ``SchedulerCore.decide(now)`` returns one cycle's decisions without changing the
core. The accounting ledgers (:class:`QuotaBook`, :class:`BudgetLedger`, :class:`FairShare`)
and the job record (:class:`JobRecord`) are exported for the service, the simulator and tests.
"""

from tessera_scheduler.domain.budget import BudgetLedger
from tessera_scheduler.domain.core import CoreConfig, SchedulerCore
from tessera_scheduler.domain.fairshare import FairShare
from tessera_scheduler.domain.jobs import JobRecord, JobState, Verdict
from tessera_scheduler.domain.plan import CoreInvariantError
from tessera_scheduler.domain.quota import QuotaBook, QuotaCheck, QuotaError

__all__ = [
    "BudgetLedger",
    "CoreConfig",
    "CoreInvariantError",
    "FairShare",
    "JobRecord",
    "JobState",
    "QuotaBook",
    "QuotaCheck",
    "QuotaError",
    "SchedulerCore",
    "Verdict",
]
