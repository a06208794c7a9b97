"""Tessera contracts: the event envelope, event types, subjects, streams and codec shared by every component."""


def load_all() -> None:
    """Import every event module, so that every event type is registered."""
    import tessera_contracts.events  # noqa: F401
