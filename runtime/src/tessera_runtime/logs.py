"""Structured logs: one JSON object a line on stderr (structlog), with the service name bound.

structlog is imported on first use, not with this module: it pulls in rich when rich is
installed (litestar brings it), about 0.3 s that a short CLI command should not pay.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any


def configure(service_name: str, level: str | None = None) -> Any:
    """Set up JSON logging for this process and return a logger bound to ``service=service_name``.

    ``level`` defaults to ``TESSERA_LOG_LEVEL`` or ``INFO``. Set ``TESSERA_LOG_FORMAT=console``
    for human-readable lines while developing.
    """
    import structlog

    level_name = (level or os.environ.get("TESSERA_LOG_LEVEL", "INFO")).upper()
    renderer: Any = (
        structlog.dev.ConsoleRenderer()
        if os.environ.get("TESSERA_LOG_FORMAT") == "console"
        else structlog.processors.JSONRenderer()
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level_name)),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
    return structlog.get_logger().bind(service=service_name)


_pending: tuple[str, str | None] | None = None


def configure_on_first_use(service_name: str, level: str | None = None) -> None:
    """Like :func:`configure`, but only when something first logs (short CLI commands never do)."""
    global _pending
    _pending = (service_name, level)


def get(name: str) -> Any:
    """A logger for one component of the runtime (bound as ``component=name``)."""
    global _pending
    import structlog

    if _pending is not None:
        pending, _pending = _pending, None
        configure(*pending)
    return structlog.get_logger().bind(component=name)
