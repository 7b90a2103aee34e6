"""CORS for browser clients: a pure ASGI wrapper around the app (never a buffering middleware).

Only when `cors_origins` is configured (YAML `cors_origins` or `TOOLCALL_PROXY_CORS_ORIGINS`).
Requests without an `Origin` header (every SDK outside a browser) pass straight through.

- A preflight (`OPTIONS` with `Access-Control-Request-Method`) is answered here and never
  forwarded: 204 with the allow headers for an allowed origin, 403 without them otherwise.
  Preflights carry no credentials, so they are answered before the proxy-key check.
- Any other request from an allowed origin gets `Access-Control-Allow-Origin` (and the
  response headers a browser client may read) on its response head; streams are untouched.
- The allow-list is the only authority: `access-control-*` headers an upstream sent are
  removed from responses to browser requests, so a permissive upstream cannot widen it.

Browser clients authenticate with a bearer key (or `x-toolcall-proxy-key`), not cookies, so
`Access-Control-Allow-Credentials` is never sent. `*` in the list allows every origin.
"""

from __future__ import annotations

from collections.abc import Iterable

import orjson

from proxy.server.asgi import ASGIApp, Message, Receive, Scope, Send, header

ALLOW_METHODS = b"GET, POST, PUT, PATCH, DELETE, OPTIONS"
# Sent when a preflight names no headers; otherwise the requested ones are echoed.
DEFAULT_ALLOW_HEADERS = b"authorization, content-type, x-request-id, x-toolcall-proxy-key"
EXPOSE_HEADERS = (
    b"x-request-id, retry-after, x-ratelimit-limit-requests, x-ratelimit-limit-tokens, "
    b"x-ratelimit-remaining-requests, x-ratelimit-remaining-tokens, "
    b"x-ratelimit-reset-requests, x-ratelimit-reset-tokens"
)
MAX_AGE = b"600"
_TOKEN_CHARS = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_, ")


class CORSMiddleware:
    """Answers preflights and marks responses for the configured origins (module doc)."""

    def __init__(self, app: ASGIApp, origins: Iterable[str]) -> None:
        self.app = app
        normalized = {origin.strip().rstrip("/").lower() for origin in origins}
        self.any_origin = "*" in normalized
        self.origins = frozenset(o.encode("latin-1") for o in normalized - {"*"})

    def allows(self, origin: bytes) -> bool:
        return self.any_origin or origin.rstrip(b"/").lower() in self.origins

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        origin = header(scope, b"origin")
        if origin is None:
            await self.app(scope, receive, send)
            return
        allowed = self.allows(origin)
        requested_method = header(scope, b"access-control-request-method")
        if scope["method"] == "OPTIONS" and requested_method is not None:
            await self._preflight(scope, send, origin, allowed)
            return
        added = self._simple_headers(origin) if allowed else [(b"vary", b"Origin")]

        async def send_with_cors(message: Message) -> None:
            if message["type"] == "http.response.start":
                kept = [
                    (name, value)
                    for name, value in message.get("headers", ())
                    if not name.lower().startswith(b"access-control-")
                ]
                message = {**message, "headers": [*kept, *added]}
            await send(message)

        await self.app(scope, receive, send_with_cors)

    def _simple_headers(self, origin: bytes) -> list[tuple[bytes, bytes]]:
        if self.any_origin:
            return [
                (b"access-control-allow-origin", b"*"),
                (b"access-control-expose-headers", EXPOSE_HEADERS),
            ]
        return [
            (b"access-control-allow-origin", origin),
            (b"access-control-expose-headers", EXPOSE_HEADERS),
            (b"vary", b"Origin"),
        ]

    async def _preflight(self, scope: Scope, send: Send, origin: bytes, allowed: bool) -> None:
        if not allowed:
            body = orjson.dumps(
                {
                    "error": {
                        "message": "this origin is not allowed by the proxy's cors_origins",
                        "type": "invalid_request_error",
                        "code": "cors_origin_not_allowed",
                        "param": None,
                    }
                }
            )
            headers = [(b"content-type", b"application/json"), (b"vary", b"Origin")]
            await _respond(send, 403, headers, body)
            return
        requested = header(scope, b"access-control-request-headers")
        allow_headers = (
            requested.lower()
            if requested and set(requested) <= _TOKEN_CHARS
            else DEFAULT_ALLOW_HEADERS
        )
        headers = [
            *self._simple_headers(origin)[:1],
            (b"access-control-allow-methods", ALLOW_METHODS),
            (b"access-control-allow-headers", allow_headers),
            (b"access-control-max-age", MAX_AGE),
            (b"vary", b"Origin, Access-Control-Request-Method, Access-Control-Request-Headers"),
        ]
        await _respond(send, 204, headers, b"")


async def _respond(
    send: Send, status: int, headers: list[tuple[bytes, bytes]], body: bytes
) -> None:
    if status != 204:  # a 204 has no body and must not declare a length
        headers = [*headers, (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


__all__ = ["CORSMiddleware"]
