"""JSON serialization that never fails on a value a JSON parser produced.

orjson parses documents nested up to 1024 levels but refuses to serialize past 254, and refuses
integers beyond 64 bits (which the stdlib parser produces). Everything the proxy re-serializes
came out of a parser (a client's request, an upstream's chunk), so a valid but deeply nested
document must not turn into an exception halfway through a response: `dumps` tries orjson
first (the only path real traffic takes) and otherwise writes the same compact JSON itself,
iteratively, so no depth can exhaust the stack. Pure, no I/O: the core may use it.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

import orjson


class _Text(str):
    """Already-written JSON text waiting on the encoder's stack."""


def dumps(value: Any, *, sort_keys: bool = False) -> bytes:
    """Compact JSON, non-ASCII unescaped; keys sorted recursively when `sort_keys`."""
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS if sort_keys else None)
    except orjson.JSONEncodeError:
        return _dumps_iteratively(value, sort_keys).encode()


def _dumps_iteratively(value: Any, sort_keys: bool) -> str:
    out: list[str] = []
    stack: list[Any] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, _Text):
            out.append(item)
        elif isinstance(item, dict):
            pairs = sorted(item.items()) if sort_keys else list(item.items())
            parts: list[Any] = []
            for n, (key, child) in enumerate(pairs):
                if not isinstance(key, str):
                    raise TypeError(f"JSON object keys must be strings, not {type(key).__name__}")
                parts += [_Text(("," if n else "") + json.dumps(key, ensure_ascii=False) + ":")]
                parts.append(child)
            stack += [_Text("}"), *reversed(parts), _Text("{")]
        elif isinstance(item, list | tuple):
            parts = []
            for n, child in enumerate(item):
                parts += [_Text(","), child] if n else [child]
            stack += [_Text("]"), *reversed(parts), _Text("[")]
        elif isinstance(item, float) and not math.isfinite(item):
            out.append("null")  # what orjson writes for NaN and infinities
        elif item is None or isinstance(item, str | int | float):
            out.append(json.dumps(item, ensure_ascii=False))
        else:
            raise TypeError(f"Type is not JSON serializable: {type(item).__name__}")
    return "".join(out)


# What a JSON string's text may not hold as it is (a quote ends it, a backslash escapes).
_NOT_PLAIN = re.compile(rb'["\\\x00-\x1f]')


def plain_text(raw: bytes) -> str | None:
    """The text of a JSON string's bytes (between its quotes) if JSON writes that text as
    these very bytes: valid UTF-8 without a quote, backslash or control character. None for
    any other bytes, and for no bytes (an empty text is no delta to take on a fast path)."""
    if not raw or _NOT_PLAIN.search(raw) is not None:
        return None
    try:
        return raw.decode()
    except UnicodeDecodeError:
        return None
