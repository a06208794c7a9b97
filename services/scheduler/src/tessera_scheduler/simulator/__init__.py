"""Trace-driven, virtual-time simulator of the scheduler core (``tessera simulate``)."""
