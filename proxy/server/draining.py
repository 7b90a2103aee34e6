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
import weakref
from collections.abc import Iterator
from types import FrameType
from typing import Any, Protocol, runtime_checkable

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from proxy.config.options import default
from proxy.core.errors import ClientRequestError, HeadersTooLarge, ProxyError
from proxy.ops.observability import LOGGER
from proxy.server.asgi import MAX_REQUEST_HEADER_BYTES, WEBSOCKET_REFUSED, send_error
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
    found = _inner(app, Drainable)
    return found if isinstance(found, Drainable) else None


def _inner(app: object, kind: type) -> object:
    """The first of `app` and the apps it wraps (in `.app`) that is a `kind`, or None."""
    for _ in range(16):
        if isinstance(app, kind):
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


@runtime_checkable
class ConnectionBounds(Protocol):
    """The app's bounds on a slow client (the `head_timeout` and `body_timeout` settings)."""

    @property
    def head_timeout(self) -> float: ...

    @property
    def body_timeout(self) -> float: ...


# The request head (request line and header fields) as received, and a chunked body's trailer
# fields: past this many bytes without the parser finishing the head (or, inside a body,
# without body bytes) the answer is 431 and the connection closes. The app's own check
# (asgi.check_header_limits: 100 fields, 64 KiB of names and values) is the precise one; this
# bound is checked as the bytes arrive, so a client cannot make the server buffer a head of
# any size first (httptools joins a field's pieces with `+=`: a 128 MB header took 16.7 s).
MAX_REQUEST_HEAD_BYTES = 2 * MAX_REQUEST_HEADER_BYTES

_IDLE, _HEAD, _BODY = 0, 1, 2  # where the parser is in a request, for the bounds


class OpenAIErrorHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, with the bounds and answers SPEC §6 asks of the server.

    - A request it cannot parse (bare CR or LF, NUL, obsolete line folding, a bad chunked
      body) never reaches the app: httptools raises in `data_received`, and uvicorn writes
      `400 Invalid HTTP request received.` as text/plain through `send_400_response`. Here
      that answer is in the OpenAI error shape.
    - A WebSocket upgrade (the proxy serves none) is answered 400 in the same shape and the
      connection closed, on any path, before a WebSocket protocol or the app sees it;
      uvicorn would hand it to an app that does not accept it and answer 500.
    - Trailer fields of a chunked body are never request headers: uvicorn appends every
      field the parser reports to the list the request's scope holds, trailers included,
      after the app has checked the head, so they would be forwarded upstream.
    - The head is bounded as it arrives (MAX_REQUEST_HEAD_BYTES, 431), and so are trailer
      fields and anything else that arrives inside a body without being body bytes.
    - Time: a head must be complete `head_timeout` after its first read; inside a body, a
      silence of `body_timeout` ends the request (408, or a closed connection once the
      response started). A connection idle before its first request closes after uvicorn's
      `timeout_keep_alive`, as one between requests does.

    The timers are armed only when a read leaves a head or a body unfinished, so a request
    whose head and body arrive in one read costs no timer.
    """

    _phase = _IDLE
    _unparsed = 0  # bytes received since the parser last made progress
    _body_moved = False  # body bytes arrived since the body timer was armed
    _timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        # uvicorn arms its keep-alive timer only after a response: a connection that never
        # sends a byte would stay open for good.
        self.timeout_keep_alive_task = self.loop.call_later(
            self.timeout_keep_alive, self.timeout_keep_alive_handler
        )

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        self._unparsed += len(data)
        super().data_received(data)
        if self._unparsed > MAX_REQUEST_HEAD_BYTES and not self.transport.is_closing():
            self._answer_and_close(HEAD_TOO_LARGE)
        elif self._phase and self._timer is None and not self.transport.is_closing():
            self._start_timer()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._phase = _HEAD
        self._unparsed = 0

    def on_headers_complete(self) -> None:
        super().on_headers_complete()
        # From here on the parser reports only a chunked body's trailer fields: they go to a
        # copy, not to the list the request's scope holds (the head's fields stay, for
        # uvicorn's upgrade checks).
        self.headers = list(self.headers)
        self._phase = _BODY
        self._unparsed = 0
        self._stop_timer()

    def on_body(self, body: bytes) -> None:
        super().on_body(body)
        self._unparsed = 0
        self._body_moved = True

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._phase = _IDLE
        self._unparsed = 0
        self._stop_timer()

    def handle_websocket_upgrade(self) -> None:
        self._answer_and_close(WEBSOCKET_REFUSED)

    def send_400_response(self, msg: str) -> None:
        self._answer_and_close(MALFORMED_REQUEST)

    def _start_timer(self) -> None:
        head_timeout, body_timeout = _bounds(self.config)
        self._body_moved = False
        delay = head_timeout if self._phase == _HEAD else body_timeout
        self._timer = self.loop.call_later(delay, self._timer_expired)

    def _stop_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _timer_expired(self) -> None:
        self._timer = None
        if self.transport.is_closing() or not self._phase:
            return
        if self._phase == _BODY and self._body_moved:
            self._start_timer()  # the body is still coming: a new window of silence
            return
        self._answer_and_close(HEAD_TIMEOUT if self._phase == _HEAD else BODY_TIMEOUT)

    def _answer_and_close(self, error: ProxyError) -> None:
        """`error` as the last response on this connection (SPEC §6 shape), then close; only
        the close when a response is under way (a second one cannot go into its middle)."""
        self._stop_timer()
        cycle = self.cycle
        if cycle is not None and cycle.response_started and not cycle.response_complete:
            self.transport.close()
            return
        if cycle is not None and not cycle.response_complete:
            # The request the app is serving ends here: its receive() says disconnect, and
            # its answer, if any, goes nowhere (as after a client that left).
            cycle.disconnected = True
            cycle.message_event.set()
        body = error.json_bytes()
        head = [b"HTTP/1.1 %d %s\r\n" % (error.status, _REASONS[error.status])]
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
HEAD_TOO_LARGE = HeadersTooLarge(
    f"The request head or a chunked body's trailer fields exceed {MAX_REQUEST_HEAD_BYTES} bytes."
)
HEAD_TIMEOUT = ClientRequestError(
    "The request head did not arrive within the head timeout.",
    code="request_timeout",
    status=408,
)
BODY_TIMEOUT = ClientRequestError(
    "The request body stopped arriving for longer than the body timeout.",
    code="request_timeout",
    status=408,
)
_REASONS = {400: b"Bad Request", 408: b"Request Timeout", 431: b"Request Header Fields Too Large"}

_BOUNDS: weakref.WeakKeyDictionary[Any, tuple[float, float]] = weakref.WeakKeyDictionary()


def _bounds(config: Any) -> tuple[float, float]:
    """The head and body timeouts of the app this uvicorn config serves (read once)."""
    bounds = _BOUNDS.get(config)
    if bounds is None:
        app = _inner(config.loaded_app, ConnectionBounds)
        if isinstance(app, ConnectionBounds):
            bounds = (app.head_timeout, app.body_timeout)
        else:
            bounds = (default("head_timeout"), default("body_timeout"))
        _BOUNDS[config] = bounds
    return bounds


def _cut(app: Drainable) -> None:
    count = app.cut_open_requests()
    LOGGER.log(
        logging.WARNING if count else logging.INFO,
        "drain timeout expired",
        extra={"fields": {"event": "drain_expired", "cut_requests": count}},
    )


__all__ = [
    "BACKSTOP_SECONDS",
    "MAX_REQUEST_HEAD_BYTES",
    "ConnectionBounds",
    "Drainable",
    "DrainingServer",
    "OpenAIErrorHttpProtocol",
    "ResponseProgress",
    "ShuttingDown",
    "end_for_shutdown",
    "find_drainable",
    "graceful_timeout",
]
