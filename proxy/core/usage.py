"""Usage summed over the rounds of one client response (SPEC §5: a follow-up's tokens count)."""

from __future__ import annotations

from typing import Any

import orjson

from proxy.core.jsontext import dumps


def add_usage(total: dict[str, Any] | None, usage: object) -> dict[str, Any] | None:
    """Sum numeric usage fields (nested details too) over rounds."""
    if not isinstance(usage, dict):
        return total
    if total is None:
        return orjson.loads(dumps(usage))  # type: ignore[no-any-return]
    for key, value in usage.items():
        if isinstance(value, int | float) and not isinstance(value, bool):
            previous = total.get(key)
            total[key] = (previous if isinstance(previous, int | float) else 0) + value
        elif isinstance(value, dict):
            total[key] = add_usage(
                total.get(key) if isinstance(total.get(key), dict) else None, value
            )
    return total
