"""Trace-driven, virtual-time simulator of the scheduler core (``tessera simulate``).

Modules: ``trace.py`` loads the Alibaba GPU v2023 trace; ``jobs.py`` turns pods into jobs and
QoS classes into tenants and priorities; ``fill.py`` is the fill run (placement layer alone,
the FGD paper's unallocated-GPU measure); ``engine.py`` replays the trace's arrivals and
departures through ``SchedulerCore`` (the scheduler service's decision core) in virtual time;
``metrics.py`` computes the figures; ``run.py`` ties them per policy (``simulate``, ``compare``).
"""
