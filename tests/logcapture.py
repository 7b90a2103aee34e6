"""The proxy's log records as a test sees them, captured on its own logger (its records need
not propagate to the root, so pytest's caplog does not see them)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

from proxy.ops.observability import LOGGER


@contextmanager
def proxy_records() -> Iterator[list[logging.LogRecord]]:
    """Every record the proxy logs at info or above while the block runs."""
    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.INFO)
    handler.emit = records.append  # type: ignore[method-assign,assignment]
    level = LOGGER.level
    LOGGER.addHandler(handler)
    LOGGER.setLevel(logging.INFO)
    try:
        yield records
    finally:
        LOGGER.removeHandler(handler)
        LOGGER.setLevel(level)
