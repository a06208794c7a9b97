"""Structured logs: one JSON object a line on stderr (structlog), with the service name bound."""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

import structlog


def configure(service_name: str, level: str | None = None) -> structlog.stdlib.BoundLogger:
    """Set up JSON logging for this process and return a logger bound to ``service=service_name``.

    ``level`` defaults to ``TESSERA_LOG_LEVEL`` or ``INFO``. Set ``TESSERA_LOG_FORMAT=console``
    for human-readable lines while developing.
    """
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
    logger: structlog.stdlib.BoundLogger = structlog.get_logger().bind(service=service_name)
    return logger


def get(name: str) -> Any:
    """A logger for one component of the runtime (bound as ``component=name``)."""
    return structlog.get_logger().bind(component=name)
