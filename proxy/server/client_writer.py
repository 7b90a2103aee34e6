"""How an answer reaches the client: as an event stream or as one JSON body.

The shell's round loop is written once; what differs between a stream and a whole message is
only how bytes, failures and a replay loop are written, which lives here.
- `EventStreamWriter`: the head leaves with the first bytes, never before (SPEC §5: until
  then a replay loop is still a plain HTTP error); a failure after that is the surface's
  in-stream error (`render`, the exchange's `stream_error`). A surface whose clients retry
  every HTTP 4xx (`loop_in_stream`, SPEC §8) gets the in-stream form for a loop at once.
- `MessageWriter`: one body with its head; a failure before it is raised for the app to
  answer with its status (SPEC §6).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from proxy.core.errors import ProxyError, ReplayLoopDetected
from proxy.server.asgi import Send

Headers = list[tuple[bytes, bytes]]


class EventStreamWriter:
    __slots__ = ("_headers", "_loop_in_stream", "_render", "ended", "send", "started")

    status = 200
    streaming = True

    def __init__(
        self,
        send: Send,
        headers: Headers,
        *,
        render: Callable[[ProxyError], bytes],
        loop_in_stream: bool = False,
    ):
        self.send = send
        self._headers = headers
        self._render = render
        self._loop_in_stream = loop_in_stream
        self.started = False
        self.ended = False

    def write(self, body: bytes, *, last: bool = False) -> Awaitable[None]:
        """Send `body` (the head first, the first time). Once the head is out this hands back
        `send`'s awaitable rather than being a coroutine: a frame less per write."""
        if not self.started:
            return self._start(body, last)
        self.ended = last
        return self.send({"type": "http.response.body", "body": body, "more_body": not last})

    async def _start(self, body: bytes, last: bool) -> None:
        self.started = True
        await self.send({"type": "http.response.start", "status": 200, "headers": self._headers})
        self.ended = last
        await self.send({"type": "http.response.body", "body": body, "more_body": not last})

    async def fail(self, error: ProxyError) -> None:
        """SPEC §6: a stream that cannot go on ends with the surface's error event."""
        await self.write(self._render(error))

    async def stop_loop(self, error: ReplayLoopDetected) -> None:
        """SPEC §5, §8: a plain HTTP error (raised to the app) while nothing was sent, else the
        in-stream error; agents that retry a stream's error event (qwen-code) do not retry a
        422. Where a surface's clients retry every 4xx instead, always the in-stream error."""
        if not self.started and not self._loop_in_stream:
            raise error
        await self.write(self._render(error))

    async def close(self) -> None:
        if not self.ended:
            await self.write(b"", last=True)


class MessageWriter:
    __slots__ = ("_headers", "ended", "send", "status")

    streaming = False

    def __init__(self, send: Send, status: int, headers: Headers):
        self.send = send
        self.status = status
        self._headers = [(b"content-type", b"application/json"), *headers]
        self.ended = False

    async def write(self, body: bytes, *, last: bool = False) -> None:
        assert last, "a message is written whole"
        self.ended = True
        await self.send(
            {
                "type": "http.response.start",
                "status": self.status,
                "headers": [*self._headers, (b"content-length", str(len(body)).encode())],
            }
        )
        await self.send({"type": "http.response.body", "body": body})

    async def fail(self, error: ProxyError) -> None:
        raise error

    async def stop_loop(self, error: ReplayLoopDetected) -> None:
        raise error

    async def close(self) -> None:
        return None


ClientWriter = EventStreamWriter | MessageWriter
