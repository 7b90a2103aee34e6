"""Anthropic's wire shapes: server-sent events and error bodies (SPEC §8).

Every event the proxy writes carries an `event:` line naming its `type`: the anthropic SDKs
dispatch on that line, not on the data (an event without it is skipped by the Python SDK).
"""

from __future__ import annotations

from typing import Any

import orjson

from proxy.core.errors import ProxyError, RequestTooLarge
from proxy.core.jsontext import dumps


def encode(data: dict[str, Any]) -> bytes:
    """One event: `event: <type>` and its data."""
    kind = data.get("type")
    name = kind.encode() if isinstance(kind, str) else b"message"
    return b"event: " + name + b"\ndata: " + dumps(data) + b"\n\n"


def encode_raw(kind: str, data: bytes) -> bytes:
    """An event whose data goes on as the upstream wrote it."""
    return b"event: " + kind.encode() + b"\ndata: " + data_lines(data) + b"\n\n"


def data_lines(data: bytes) -> bytes:
    """An event's data after its first `data: `: an upstream event of several data lines
    (the decoder joined them with newlines) goes on as that many lines again, since a
    newline inside one line would end it and leave the rest unreadable."""
    if data.find(b"\n") >= 0:  # find(): `bytes in bytes` formats a TypeError first
        return data.replace(b"\n", b"\ndata: ")
    return data


def at_index(obj: dict[str, Any], index: int) -> bool:
    """Is the event's `index` this one? An integer only: `true` equals 1 in Python, and a
    client must not be sent `"index": true` as if it were the block's index."""
    value = obj.get("index")
    return type(value) is int and value == index


def error_type(error: ProxyError) -> str:
    """Anthropic's own error type where it has one for the situation."""
    if isinstance(error, RequestTooLarge):
        return "request_too_large"
    return error.error_type


def error_body(error: ProxyError) -> dict[str, Any]:
    """`{"type": "error", "error": {"type": ..., "message": ...}}`, Anthropic's error shape."""
    return {"type": "error", "error": {"type": error_type(error), "message": error.message}}


def error_response(error: ProxyError) -> tuple[int, bytes]:
    """An error answered before the response's first byte: its status and body."""
    return error.status, orjson.dumps(error_body(error))


def error_event(error: ProxyError) -> bytes:
    """The event that ends a stream with this error (no `message_stop` follows)."""
    return encode(error_body(error))
