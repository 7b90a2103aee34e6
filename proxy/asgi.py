"""Small raw-ASGI helpers shared by the shell (no framework on the hot path)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from proxy.errors import HeadersTooLarge, ProxyError, RequestTooLarge
from proxy.jsontext import dumps

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


# uvicorn with httptools accepts request heads of any size (a 1 MiB header is parsed, handed to
# the app and would be forwarded upstream), and every forwarded header costs work per hop (with
# httpx's stock client, whose cookie handling is O(n^2) in them, 10,000 small headers held the
# event loop for 7 s). Real clients send a few dozen headers and a few KiB; these limits leave
# room for long bearer tokens and cookies (nginx's default is 4 x 8 KiB, Apache's 100 fields).
MAX_REQUEST_HEADERS = 100
MAX_REQUEST_HEADER_BYTES = 64 * 1024


class ClientDisconnected(Exception):
    """The client went away before we finished reading its request."""


def check_header_limits(scope: Scope) -> None:
    """Refuse (431) a request head past MAX_REQUEST_HEADERS or MAX_REQUEST_HEADER_BYTES."""
    headers = scope["headers"]
    if len(headers) > MAX_REQUEST_HEADERS:
        raise HeadersTooLarge(f"more than {MAX_REQUEST_HEADERS} request headers")
    if sum(len(name) + len(value) for name, value in headers) > MAX_REQUEST_HEADER_BYTES:
        raise HeadersTooLarge(f"request headers exceed {MAX_REQUEST_HEADER_BYTES} bytes")


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
    body = dumps(payload)  # jsontext: an upstream body nested past 254 levels must not raise
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
