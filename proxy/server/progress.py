"""How far a response got: nothing, its head, or its end (what a shutdown needs to know to end
it honestly, `proxy.server.draining.end_for_shutdown`). Its own module so that setup.py can compile it:
every message of every response passes through it."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any

from proxy.server.asgi import Message, Send


class ResponseProgress:
    """Wraps `send` to remember how far the response got: nothing, its head, or its end."""

    __slots__ = ("_headers", "_send", "finished", "status")

    def __init__(self, send: Send) -> None:
        self._send = send
        self.status: int | None = None
        self._headers: Any = ()
        self.finished = False

    def __call__(self, message: Message) -> Awaitable[None]:
        """Note the message, and hand back the wrapped `send`'s awaitable: not a coroutine of
        its own, which would add a frame to every message sent."""
        if message["type"] == "http.response.start":
            self.status = int(message["status"])
            self._headers = message.get("headers", ())
        elif not message.get("more_body", False):
            self.finished = True
        return self._send(message)

    @property
    def event_stream(self) -> bool:
        """Is the response an event stream? Asked only when a shutdown cuts it, so the head's
        headers are looked at then, not on every response."""
        return any(
            name.lower() == b"content-type" and value.startswith(b"text/event-stream")
            for name, value in self._headers
        )
