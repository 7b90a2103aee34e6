"""Graceful shutdown: readiness turns false at SIGTERM, open streams get a drain window.

uvicorn handles SIGTERM itself: its `Server.handle_exit` sets `should_exit`, the main loop
notices within 0.1 s, `Server.shutdown` closes the listening sockets, asks idle keep-alive
connections to close, waits up to `timeout_graceful_shutdown` for busy ones, cancels what is
left, and only then sends `lifespan.shutdown`. The app would learn about the shutdown last.

`DrainingServer` tells it first:

- `handle_exit` (the signal handler) flips the app's draining flag, so `/readyz` answers 503
  from that moment on; it only sets a flag, which is safe inside a signal handler.
- `shutdown` (running on the event loop, before uvicorn stops accepting) arms a timer for the
  app's drain timeout. Streams that finish before it end normally. When it fires, the app ends
  every request still open with the `shutting_down` error (SPEC §6 shape: an SSE `error` event
  when the stream has started, a 503 otherwise), so clients see why their stream stopped.
- uvicorn's own cancellation is the backstop, `BACKSTOP_SECONDS` after the drain timeout.
- A stop asked for by SIGINT or SIGTERM and carried out is a success: the process exits 0.
  uvicorn would raise the signal again once it has stopped, so that Ctrl-C ended in a
  KeyboardInterrupt traceback and `make run` reported `*** [run] Interrupt`.

The app does not depend on this server: `ProxyApp` also treats a cancellation of a request
task that is not a client disconnect as the server stopping, so with uvicorn's stock server
(`--workers N` runs one in each worker process) streams still end with the same error event,
at `timeout_graceful_shutdown`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import Iterator
from types import FrameType
from typing import Any, Protocol, runtime_checkable

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from proxy.core.errors import ClientRequestError, ProxyError
from proxy.ops.observability import LOGGER
from proxy.server.asgi import send_error
from proxy.server.progress import ResponseProgress

# uvicorn cancels what is still running this long after the app's own drain timeout.
BACKSTOP_SECONDS = 5.0


class ShuttingDown(ProxyError):
    """The proxy is stopping and the drain timeout expired before this request finished."""

    status = 503
    error_type = "proxy_error"
    code = "shutting_down"

    def __init__(self) -> None:
        super().__init__(
            "The proxy is shutting down and the drain timeout expired before this response "
            "finished; retry the request."
        )


@runtime_checkable
class Drainable(Protocol):
    """What the server needs from the app to drain it."""

    @property
    def drain_timeout(self) -> float: ...

    @property
    def open_requests(self) -> int: ...

    def start_draining(self) -> None: ...

    def cut_open_requests(self) -> int: ...


async def end_for_shutdown(progress: ResponseProgress, request_id: str) -> int:
    """End a request the drain timeout cut short; returns the status the client got.

    Before the response head: a 503 with the error body. Inside an event stream: the error
    event and the end of the body (no `[DONE]`). Inside any other started body nothing
    honest can be appended: the response is left unfinished, so the server drops the
    connection and the client sees a truncated body rather than a corrupted one.
    """
    error = ShuttingDown()
    if progress.finished:
        return progress.status or error.status
    if progress.status is None:
        await send_error(progress, error, request_id)
        return error.status
    if progress.event_stream:
        await progress({"type": "http.response.body", "body": error.sse_bytes(), "more_body": True})
        await progress({"type": "http.response.body", "body": b""})
    return progress.status


def find_drainable(app: object) -> Drainable | None:
    """The drainable app inside uvicorn's (and our) wrappers, which keep the inner app in `.app`."""
    for _ in range(16):
        if isinstance(app, Drainable):
            return app
        app = getattr(app, "app", None)
        if app is None:
            return None
    return None


def graceful_timeout(drain_timeout: float) -> int:
    """uvicorn's `timeout_graceful_shutdown` for a drain timeout: the backstop comes after it."""
    return math.ceil(drain_timeout + BACKSTOP_SECONDS)


class DrainingServer(uvicorn.Server):
    """A uvicorn server that tells the app the moment shutdown begins (see the module doc)."""

    def _drainable(self) -> Drainable | None:
        if not self.config.loaded:
            return None
        return find_drainable(self.config.loaded_app)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        super().handle_exit(sig, frame)
        app = self._drainable()
        if app is not None:
            app.start_draining()

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        with super().capture_signals():
            yield
            # Served to the end of an orderly stop: nothing left to re-raise (see the module doc).
            self._captured_signals.clear()

    async def shutdown(self, sockets: Any = None) -> None:
        app = self._drainable()
        timer: asyncio.TimerHandle | None = None
        if app is not None:
            app.start_draining()
            LOGGER.info(
                "shutting down: not ready, draining open requests",
                extra={
                    "fields": {
                        "event": "drain_started",
                        "open_requests": app.open_requests,
                        "drain_timeout_s": app.drain_timeout,
                    }
                },
            )
            timer = asyncio.get_running_loop().call_later(app.drain_timeout, _cut, app)
        try:
            await super().shutdown(sockets)
        finally:
            if timer is not None:
                timer.cancel()


class OpenAIErrorHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, answering a request it cannot parse in the OpenAI error
    shape (SPEC §6) instead of its plain-text 400.

    A malformed request line or head (bare CR or LF, NUL, obsolete line folding, a bad
    chunked body) never reaches the app: httptools raises in `data_received`, and uvicorn
    writes `400 Invalid HTTP request received.` as text/plain and closes. That answer is the
    one hook uvicorn gives (`send_400_response`), so this class (passed as uvicorn's `http`
    setting) overrides it and nothing else.
    """

    def send_400_response(self, msg: str) -> None:
        cycle = self.cycle
        if cycle is not None and cycle.response_started and not cycle.response_complete:
            self.transport.close()  # a second response cannot go into the middle of one
            return
        body = MALFORMED_REQUEST.json_bytes()
        head = [b"HTTP/1.1 400 Bad Request\r\n"]
        for name, value in self.server_state.default_headers:
            head += [name, b": ", value, b"\r\n"]
        head += [
            b"content-type: application/json\r\n",
            b"content-length: %d\r\n" % len(body),
            b"connection: close\r\n\r\n",
        ]
        self.transport.write(b"".join(head) + body)
        self.transport.close()


MALFORMED_REQUEST = ClientRequestError(
    "Invalid HTTP request: the request line, headers or chunked body could not be parsed.",
    code="invalid_http_request",
)


def _cut(app: Drainable) -> None:
    count = app.cut_open_requests()
    LOGGER.log(
        logging.WARNING if count else logging.INFO,
        "drain timeout expired",
        extra={"fields": {"event": "drain_expired", "cut_requests": count}},
    )


__all__ = [
    "BACKSTOP_SECONDS",
    "Drainable",
    "DrainingServer",
    "OpenAIErrorHttpProtocol",
    "ResponseProgress",
    "ShuttingDown",
    "end_for_shutdown",
    "find_drainable",
    "graceful_timeout",
]
