"""The inspector's routes (SPEC §12): its page, the page's script and style, the live feed of
exchanges as server-sent events and one exchange's detail.

- `GET /_inspect`: the page (static, holds no data; served to anyone, as the page must be
  able to ask for a proxy key). Its script and style are served beside it, so the page needs
  no build step and no outside network; its Content-Security-Policy allows nothing else.
- `GET /_inspect/events`: the exchanges in the ring (oldest first), then each new one as it
  ends, as `event: exchange` with the row's JSON; a comment every `KEEPALIVE_SECONDS`.
- `GET /_inspect/exchanges/<seq>`: one exchange's detail (404 once it left the ring).

The two data routes follow the proxy-key rule of the API (SPEC §6): where keys are set, one
is required (`Authorization: Bearer` or `x-toolcall-proxy-key`), else 401 and the page asks.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from importlib.resources import files

import orjson

from proxy.core.errors import ClientRequestError, ProxyError
from proxy.ops.inspector import Inspector
from proxy.server.asgi import Receive, Scope, Send, send_bytes, send_error

INSPECT_PATH = "/_inspect"
# How often the feed wakes to see whether its page left or the proxy is stopping, and how
# many of those wakes pass between two keep-alive comments.
WAKE_SECONDS = 1.0
KEEPALIVE_WAKES = 15

_SECURITY_HEADERS = [
    (
        b"content-security-policy",
        b"default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
        b"img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    ),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
    (b"cache-control", b"no-store"),
]
_ASSETS = {
    "": ("inspect.html", b"text/html; charset=utf-8"),
    "/": ("inspect.html", b"text/html; charset=utf-8"),
    "/inspect.js": ("inspect.js", b"text/javascript; charset=utf-8"),
    "/inspect.css": ("inspect.css", b"text/css; charset=utf-8"),
}


def _asset(name: str) -> bytes:
    return files("proxy.server").joinpath("static", name).read_bytes()


class InspectPage:
    """The routes under /_inspect, over one app's Inspector."""

    def __init__(
        self,
        inspector: Inspector,
        authorize: Callable[[Scope], None],
        stopping: Callable[[], bool],
    ) -> None:
        self.inspector = inspector
        self._authorize = authorize  # raises AuthenticationError (the app's proxy-key rule)
        self._stopping = stopping
        self._assets = {path: (_asset(name), kind) for path, (name, kind) in _ASSETS.items()}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        rest = scope["path"][len(INSPECT_PATH) :]
        try:
            if scope["method"] not in ("GET", "HEAD"):
                raise ClientRequestError(
                    "the inspector is read with GET", code="method_not_allowed", status=405
                )
            asset = self._assets.get(rest)
            if asset is not None:
                body, kind = asset
                await send_bytes(send, 200, body, [(b"content-type", kind), *_SECURITY_HEADERS])
                return
            self._authorize(scope)
            if rest == "/events":
                await self._events(receive, send)
                return
            if rest.startswith("/exchanges/") and rest[11:].isdigit():
                await self._detail(send, int(rest[11:]))
                return
            raise ClientRequestError(f"no page {scope['path']}", code="not_found", status=404)
        except ProxyError as exc:
            await send_error(send, exc, "inspect")

    async def _detail(self, send: Send, seq: int) -> None:
        detail = self.inspector.detail(seq)
        if detail is None:
            raise ClientRequestError(
                f"exchange {seq} is no longer in the inspector's ring", code="not_found", status=404
            )
        headers = [(b"content-type", b"application/json"), *_SECURITY_HEADERS]
        await send_bytes(send, 200, detail, headers)

    async def _events(self, receive: Receive, send: Send) -> None:
        feed, rows = self.inspector.subscribe()
        gone = asyncio.ensure_future(_disconnect(receive))
        try:
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [(b"content-type", b"text/event-stream"), *_SECURITY_HEADERS],
                }
            )
            hello = {
                "content": self.inspector.content,
                "size": self.inspector.size,
                "exchange_bytes": self.inspector.exchange_bytes,
            }
            first = b"event: hello\ndata: " + orjson.dumps(hello) + b"\n\n" + _events_of(rows)
            await send({"type": "http.response.body", "body": first, "more_body": True})
            wakes = 0
            while not gone.done() and not self._stopping():
                rows = await feed.next(WAKE_SECONDS)
                wakes = 0 if rows else wakes + 1
                if rows or wakes >= KEEPALIVE_WAKES:
                    wakes = 0
                    chunk = _events_of(rows) if rows else b": keep-alive\n\n"
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
            if not gone.done():
                await send({"type": "http.response.body", "body": b""})
        finally:
            self.inspector.unsubscribe(feed)
            gone.cancel()


def _events_of(rows: list[bytes]) -> bytes:
    return b"".join(b"event: exchange\ndata: " + row + b"\n\n" for row in rows)


async def _disconnect(receive: Receive) -> None:
    """Returns when the client has gone (a GET's body is read and dropped on the way)."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
