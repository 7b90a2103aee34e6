"""Small raw-ASGI helpers shared by the shell (no framework on the hot path)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import orjson

from proxy.errors import ProxyError, RequestTooLarge

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class ClientDisconnected(Exception):
    """The client went away before we finished reading its request."""


def header(scope: Scope, name: bytes) -> bytes | None:
    for key, value in scope["headers"]:
        if key.lower() == name:
            return bytes(value)
    return None


async def read_body(receive: Receive, limit: int) -> bytes:
    """The whole request body, refusing more than `limit` bytes (SPEC §6: 413)."""
    parts: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnected
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise RequestTooLarge(f"request body exceeds the limit of {limit} bytes")
        parts.append(chunk)
        if not message.get("more_body", False):
            return b"".join(parts)


async def send_json(
    send: Send, status: int, payload: object, headers: list[tuple[bytes, bytes]] | None = None
) -> None:
    body = orjson.dumps(payload)
    await send_bytes(send, status, body, [(b"content-type", b"application/json"), *(headers or [])])


async def send_bytes(
    send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]]
) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [*headers, (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def send_error(send: Send, error: ProxyError, request_id: str) -> None:
    await send_json(send, error.status, error.body(), [(b"x-request-id", request_id.encode())])


def with_request_id(
    headers: list[tuple[bytes, bytes]], request_id: str
) -> list[tuple[bytes, bytes]]:
    """Return our request id unless the upstream named its own (kept unchanged, SPEC §6)."""
    if any(name.lower() == b"x-request-id" for name, _ in headers):
        return headers
    return [*headers, (b"x-request-id", request_id.encode())]
