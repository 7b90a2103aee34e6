"""Small raw-ASGI helpers shared by the shell (no framework on the hot path)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from proxy.core.errors import (
    ClientRequestError,
    ErrorRenderer,
    HeadersTooLarge,
    ProxyError,
    RequestTooLarge,
    openai_error_response,
)
from proxy.core.jsontext import dumps

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
    # A plain loop, which compiles to a few dozen instructions a header: a generator over the
    # pairs, or sum(map(len, chain.from_iterable(...))) in C, cost 6K a request.
    size = 0
    for name, value in headers:
        size += len(name) + len(value)
    if size > MAX_REQUEST_HEADER_BYTES:
        raise HeadersTooLarge(f"request headers exceed {MAX_REQUEST_HEADER_BYTES} bytes")


def header(scope: Scope, name: bytes) -> bytes | None:
    for key, value in scope["headers"]:
        if key.lower() == name:
            return bytes(value)
    return None


# A refusal (413, 401, 404, ...) sent while the client is still sending its body would reach
# it only if the connection stayed open: a server that closes a socket with unread data makes
# the kernel answer with a reset, and clients that send the whole body before reading (Python's
# urllib and http.client; they also ask for `Connection: close`) then get ECONNRESET or EPIPE
# instead of the answer. So, like nginx's lingering close, the proxy sends the answer, then
# reads and drops the rest of the body before the response ends and the server closes the
# connection; but only this much and this long, so a client cannot hold a connection open or
# make the proxy read forever: four times the default body limit, and the time a client on a
# slow link would take to finish sending a body a little over the limit.
LINGER_MAX_BYTES = 128 * 1024 * 1024
LINGER_SECONDS = 10.0


class RequestBody:
    """The request body, read through `receive`: it remembers whether the body has ended, so
    a refusal can read and drop the rest first (`send_refusal`)."""

    __slots__ = ("_receive", "_scope", "ended", "started")

    def __init__(self, receive: Receive, scope: Scope) -> None:
        self._receive = receive
        self._scope = scope
        self.ended = False
        self.started = False  # receive() was called (the server sent any 100 Continue)

    @property
    def announced(self) -> bool:
        """HTTP/1.1: without Content-Length or Transfer-Encoding there is no body to wait for
        when refusing (it is still read through `receive`, as ASGI delivers it)."""
        if header(self._scope, b"transfer-encoding") is not None:
            return True
        length = header(self._scope, b"content-length")
        return length is not None and length.strip() not in (b"", b"0")

    @property
    def expects_continue(self) -> bool:
        return (header(self._scope, b"expect") or b"").lower() == b"100-continue"

    async def _next(self) -> bytes:
        self.started = True
        message = await self._receive()
        if message["type"] == "http.disconnect":
            self.ended = True  # nothing more will come
            raise ClientDisconnected
        if not message.get("more_body", False):
            self.ended = True
        return bytes(message.get("body", b""))

    async def read(self, limit: int) -> bytes:
        """The whole body, refusing more than `limit` bytes (SPEC §6: 413)."""
        parts: list[bytes] = []
        size = 0
        self.started = True
        while not self.ended:  # _next() inlined: this runs for every request
            message = await self._receive()
            if message["type"] == "http.disconnect":
                self.ended = True
                raise ClientDisconnected
            self.ended = not message.get("more_body", False)
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                raise RequestTooLarge(f"request body exceeds the limit of {limit} bytes")
            parts.append(chunk)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    async def discard(self) -> bool:
        """Read and drop the rest of the body, within the linger limits; True if it ended."""
        dropped = 0
        try:
            async with asyncio.timeout(LINGER_SECONDS):
                while not self.ended and dropped <= LINGER_MAX_BYTES:
                    dropped += len(await self._next())
        except (TimeoutError, ClientDisconnected):
            return False
        return self.ended


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


async def send_error(
    send: Send, error: ProxyError, request_id: str, render: ErrorRenderer = openai_error_response
) -> int:
    """`error` as the whole response, in the shape `render` gives it; returns its status."""
    status, payload = render(error)
    await send_bytes(
        send,
        status,
        payload,
        [(b"content-type", b"application/json"), (b"x-request-id", request_id.encode())],
    )
    return status


async def send_refusal(
    send: Send,
    error: ProxyError,
    request_id: str,
    body: RequestBody,
    render: ErrorRenderer = openai_error_response,
) -> int:
    """`error` as the answer to a request whose body may still be arriving (see LINGER_*), in
    the shape of the request's API surface (`render`); returns the status sent."""
    if body.ended or not body.announced:
        return await send_error(send, error, request_id, render)
    status, payload = render(error)
    headers = [
        (b"content-type", b"application/json"),
        (b"x-request-id", request_id.encode()),
        (b"content-length", str(len(payload)).encode()),
        (b"connection", b"close"),  # the rest of the body is not read past the limits
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    # The answer leaves at once (a client that reads while it sends has it now); only the
    # response's end, after which the server closes the connection, waits for the body.
    await send({"type": "http.response.body", "body": payload, "more_body": True})
    # A client that asked `Expect: 100-continue` and was not told to go on sends nothing more.
    if body.started or not body.expects_continue:
        await body.discard()
    await send({"type": "http.response.body", "body": b""})
    return status


REDACTED = b"[REDACTED]"


class Redactor:
    """SPEC §6: an upstream's error body relayed to the client with every secret given (the
    route's upstream key, the proxy keys) replaced by REDACTED, piece by piece as it streams.

    The last `longest secret - 1` bytes of each piece wait for the next, so a secret split
    across pieces is found too, and a short secret is never taken for the start of a longer
    one; the work stays linear in the body (each byte is searched with at most that many
    held ones)."""

    __slots__ = ("_held", "_keep", "_pattern")

    def __init__(self, secrets: list[bytes]) -> None:
        # Longest first: at each position the longest secret that matches is the one replaced.
        ordered = sorted({s for s in secrets if s}, key=len, reverse=True)
        self._pattern = re.compile(b"|".join(map(re.escape, ordered))) if ordered else None
        self._keep = len(ordered[0]) - 1 if ordered else 0
        self._held = b""

    def __bool__(self) -> bool:
        return self._pattern is not None

    def feed(self, piece: bytes) -> bytes:
        data = self._held + piece
        if self._pattern is None:
            return data
        # A secret that starts before `cut` lies whole inside `data`: it can be decided now.
        cut = len(data) - self._keep
        out: list[bytes] = []
        done = 0
        for match in self._pattern.finditer(data):
            if match.start() >= cut:
                break
            out += [data[done : match.start()], REDACTED]
            done = match.end()
        keep_from = max(done, cut)
        out.append(data[done:keep_from])
        self._held = data[keep_from:]
        return b"".join(out)

    def end(self) -> bytes:
        held, self._held = self._held, b""
        return held if self._pattern is None else self._pattern.sub(REDACTED, held)


def redacting(send: Send, secrets: list[bytes]) -> Send:
    """`send`, with the body of a response that is not 2xx passed through a `Redactor` (its
    Content-Length dropped, as the length may change). A 2xx response goes out untouched."""
    redactor = Redactor(secrets)
    if not redactor:
        return send
    active = False

    async def send_redacted(message: Message) -> None:
        nonlocal active
        kind = message["type"]
        if kind == "http.response.start":
            active = not 200 <= message["status"] < 300
            if active:
                headers = [
                    (k, v) for k, v in message.get("headers", ()) if k.lower() != b"content-length"
                ]
                message = {**message, "headers": headers}
        elif kind == "http.response.body" and active:
            more = message.get("more_body", False)
            body = redactor.feed(bytes(message.get("body", b"")))
            if not more:
                body += redactor.end()
            message = {**message, "body": body}
        await send(message)

    return send_redacted


WEBSOCKET_REFUSED = ClientRequestError(
    "WebSocket is not supported: the proxy serves its API over plain HTTP requests.",
    code="websocket_not_supported",
)


async def refuse_websocket(scope: Scope, receive: Receive, send: Send) -> None:
    """A WebSocket handshake that reached the app (a server other than the one `serve` runs:
    its protocol answers upgrades itself) is refused: 400 in the OpenAI error shape where the
    server can send an HTTP answer (the ASGI denial-response extension), else a close before
    accepting, which the server answers 403. Never the 500 of an app that ignores it."""
    message = await receive()
    if message["type"] != "websocket.connect":
        return
    if "websocket.http.response" not in (scope.get("extensions") or {}):
        await send({"type": "websocket.close", "code": 1008})
        return
    body = WEBSOCKET_REFUSED.json_bytes()
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    await send(
        {
            "type": "websocket.http.response.start",
            "status": WEBSOCKET_REFUSED.status,
            "headers": headers,
        }
    )
    await send({"type": "websocket.http.response.body", "body": body})


def with_request_id(
    headers: list[tuple[bytes, bytes]], request_id: str
) -> list[tuple[bytes, bytes]]:
    """Return our request id unless the upstream named its own (kept unchanged, SPEC §6)."""
    for name, _ in headers:  # a loop, not any() over a generator: this runs per response
        if name.lower() == b"x-request-id":
            return headers
    return [*headers, (b"x-request-id", request_id.encode())]
