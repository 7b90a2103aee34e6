"""A leaner HTTP/1.1 protocol for uvicorn: its httptools protocol with the per-request cycle
replaced, plugged in through uvicorn's `http` setting (`proxy.cli.main`, `--http lean`).

uvicorn keeps the server: sockets, signals, workers, `limit_concurrency`, the graceful
shutdown that asks idle connections to close and waits for busy ones (it calls `shutdown()`
on every connection and waits on `server_state.tasks`). The parser is httptools, as before,
and so is everything per connection that this class inherits (malformed heads answered 400
in the OpenAI shape by `OpenAIErrorHttpProtocol`, upgrades, flow control of writes).

What a request costs less here than in uvicorn's `RequestResponseCycle` (counted with
`bench.serverprocess`, which is where each of these showed):

- no asyncio.Event per request: `receive()` hands over a body that has already arrived
  without waiting, and waits on a future only when there is nothing to hand over yet;
- `send()` is not a coroutine: it writes at once and hands back a finished future (a
  coroutine only when the transport asked us to stop writing);
- the response head leaves in the same write as the first body bytes, one system call
  instead of two for a small answer; a head whose body does not follow in the same step of
  the event loop is written at the end of that step (`_flush_head`), so a stream's head is
  never held back behind a slow upstream;
- one check of all the response's header lines at once, not two regular expressions per
  header (the values include what the upstream sent, so they are checked: response_head.py);
- the keep-alive timer is armed once per connection and re-armed when it fires early,
  instead of a timer created and cancelled for every request;
- the request task leaves `server_state.tasks` when it finishes, not by a done-callback the
  event loop would schedule;
- a client that leaves is told to the app by a callback it registers through a scope
  extension (`proxy.server.asgi.DISCONNECT_EXTENSION`), fired from `connection_lost`, so the app
  need not hold a `receive()` waiting for `http.disconnect` beside every request (it still
  may: `receive()` answers it as before); the path needs `httptools.parse_url` only when it has a query,
  an escape or is not origin-form.

It relies on uvicorn internals (the protocol's constructor and attributes, `ServerState`),
so pyproject.toml pins the uvicorn versions it was tested with, and
tests/server/test_uvicorn_contract.py fails loudly if they change.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

import httptools
from mypy_extensions import mypyc_attr
from uvicorn.protocols.http.flow_control import HIGH_WATER_LIMIT, service_unavailable

from proxy.server.asgi import DISCONNECT_EXTENSION, ASGIApp, Message
from proxy.server.draining import OpenAIErrorHttpProtocol
from proxy.server.response_head import response_head

_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
_LAST_CHUNK = b"0\r\n\r\n"


@mypyc_attr(native_class=False)  # its base is not compiled: setup.py says why
class LeanHttpProtocol(OpenAIErrorHttpProtocol):
    """uvicorn's httptools protocol with a leaner request cycle (see the module doc)."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.cycle: RequestCycle | None = None  # type: ignore[assignment]  # uvicorn types its own cycle
        self._asgi = {"version": self.asgi_version, "spec_version": "2.3"}
        self._raw_root = self.root_path.encode("ascii")
        self._context = self.config.reset_contextvars
        # What `send()` hands back when it has written at once: awaiting a finished future
        # costs less than running a coroutine.
        self.sent: asyncio.Future[None] = self.loop.create_future()
        self.sent.set_result(None)
        self._idle_since: float | None = None  # the connection waits for its next request
        self._keep_alive_timer: asyncio.TimerHandle | None = None
        self._pipelined: deque[tuple[RequestCycle, ASGIApp]] = deque()  # waiting for their turn

    def connection_lost(self, exc: Exception | None) -> None:
        self.connections.discard(self)
        cycle = self.cycle
        left: Callable[[], object] | None = None
        if cycle is not None:
            if not cycle.response_complete:
                cycle.disconnected = True
                cycle.body_open = False
                left, cycle.on_left = cycle.on_left, None
            cycle.wake()
        if self.flow is not None:
            self.flow.resume_writing()
        if exc is None:
            self.transport.close()
        if self._keep_alive_timer is not None:
            self._keep_alive_timer.cancel()
            self._keep_alive_timer = None
        self.parser = None  # type: ignore[assignment]
        if left is not None:  # last: the connection is settled whatever the app's callback does
            left()

    def data_received(self, data: bytes) -> None:
        self._idle_since = None
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            msg = "Invalid HTTP request received."
            self.logger.warning(msg)
            self.send_400_response(msg)
        except httptools.HttpParserUpgrade:
            if self._should_upgrade():
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()

    # -- httptools callbacks ---------------------------------------------------------------------

    def on_message_begin(self) -> None:
        self.url = b""
        self.expect_100_continue = False
        self.headers = []

    # on_url and on_header do what uvicorn's do; compiled here, because httptools calls
    # on_header once per header line and uvicorn's are interpreted (about 1.5K instructions a
    # call against a few hundred, bench.serverprocess).
    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        name = name.lower()
        if name == b"expect" and value.lower() == b"100-continue":
            self.expect_100_continue = True
        self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        parser = self.parser
        http_version = parser.get_http_version()
        path, raw_path, query = self._target()
        scope: dict[str, Any] = {
            "type": "http",
            "asgi": self._asgi,
            "http_version": http_version,
            "server": self.server,
            "client": self.client,
            "scheme": self.scheme,
            "method": parser.get_method().decode("ascii"),
            "root_path": self.root_path,
            "path": path,
            "raw_path": raw_path,
            "query_string": query,
            "headers": self.headers,
            "state": self.app_state.copy(),
        }
        self.scope = scope  # type: ignore[assignment]  # uvicorn's upgrade reads it
        if parser.should_upgrade() and self._should_upgrade():
            return
        app = self.app
        limit = self.limit_concurrency
        if limit is not None and (len(self.connections) >= limit or len(self.tasks) >= limit):
            app = service_unavailable
            self.logger.warning("Exceeded concurrency limit.")
        keep_alive = http_version != "1.0" and parser.should_keep_alive()
        cycle = RequestCycle(self, scope, keep_alive, self.expect_100_continue)
        scope["extensions"] = {DISCONNECT_EXTENSION: cycle.on_disconnect}
        previous = self.cycle
        self.cycle = cycle
        if previous is None or previous.response_complete:
            self._start(cycle, app)
        else:  # pipelined: it waits for the response before it
            self.flow.pause_reading()
            self._pipelined.appendleft((cycle, app))

    def _target(self) -> tuple[str, bytes, bytes]:
        """The request target as path, raw path and query string."""
        url = self.url
        if url[:1] == b"/" and url.find(b"?") < 0 and url.find(b"%") < 0 and url.find(b"#") < 0:
            raw_path, query = url, b""
            path = url.decode("ascii")
        else:
            # Any: httptools' stubs type the parts as bytes, but a part the URL lacks is None,
            # and compiled code (setup.py) checks a value against its declared type.
            parsed: Any = httptools.parse_url(url)
            raw_path, query = parsed.path, parsed.query or b""
            path = raw_path.decode("ascii")
            if "%" in path:
                path = _unquote(path)
        if self.root_path:
            return self.root_path + path, self._raw_root + raw_path, query
        return path, raw_path, query

    def on_body(self, body: bytes) -> None:
        cycle = self.cycle
        if cycle is None or cycle.scope is not self.scope or cycle.response_complete:
            return  # an upgrade's (uvicorn hands those over whole), or too late
        cycle.body += body
        if len(cycle.body) > HIGH_WATER_LIMIT:
            self.flow.pause_reading()
        cycle.wake()

    def on_message_complete(self) -> None:
        cycle = self.cycle
        if cycle is None or cycle.scope is not self.scope or cycle.response_complete:
            return
        cycle.more_body = False
        cycle.wake()

    # -- the request's task, and what follows its response -------------------------------------

    def _start(self, cycle: RequestCycle, app: ASGIApp) -> None:
        if self._context:  # uvicorn's opt-in: a fresh context per request
            task = self.loop.create_task(cycle.run(app), context=contextvars.Context())
        else:
            task = self.loop.create_task(cycle.run(app))
        cycle.task = task
        self.tasks.add(task)

    def on_response_complete(self) -> None:
        self.server_state.total_requests += 1
        if self.transport.is_closing():
            return
        flow = self.flow
        if flow.read_paused:
            flow.resume_reading()
        if self._pipelined:
            cycle, app = self._pipelined.pop()
            self._start(cycle, app)
            return
        self._idle_since = self.loop.time()
        if self._keep_alive_timer is None:
            self._keep_alive_timer = self.loop.call_later(
                self.timeout_keep_alive, self._keep_alive_expired
            )

    def _keep_alive_expired(self) -> None:
        """Close a connection idle for `timeout_keep_alive`; one that was busy meanwhile gets
        the timer again for the rest of its idle time, or when its next response ends."""
        self._keep_alive_timer = None
        idle_since = self._idle_since
        if idle_since is None or self.transport.is_closing():
            return
        left = idle_since + self.timeout_keep_alive - self.loop.time()
        if left > 0:
            self._keep_alive_timer = self.loop.call_later(left, self._keep_alive_expired)
        else:
            self.transport.close()

    def _unset_keepalive_if_required(self) -> None:
        self._idle_since = None  # uvicorn's name: what its methods call when data arrives


class RequestCycle:
    """One request and its response: what the app's `receive` and `send` act on."""

    __slots__ = (
        "_delivered_end",
        "_flow",
        "_flush",
        "_head",
        "_head_only",
        "_running",
        "_sent",
        "body",
        "body_open",
        "chunked",
        "disconnected",
        "keep_alive",
        "length_left",
        "more_body",
        "on_left",
        "protocol",
        "response_complete",
        "response_started",
        "scope",
        "task",
        "transport",
        "waiter",
        "waiting_for_100_continue",
    )

    def __init__(
        self, protocol: LeanHttpProtocol, scope: Any, keep_alive: bool, expect_continue: bool
    ) -> None:
        self.protocol = protocol
        self.transport = protocol.transport
        # The connection's, read once here rather than through the protocol (whose
        # attributes are a dict's, uvicorn's class being interpreted) at every message.
        self._flow = protocol.flow
        self._sent = protocol.sent
        self.scope = scope
        self.keep_alive = keep_alive
        self.waiting_for_100_continue = expect_continue
        self.task: asyncio.Task[None] | None = None
        self.disconnected = False
        self.body = b""
        self.more_body = True
        self._delivered_end = False
        self.waiter: asyncio.Future[None] | None = None
        self.response_started = False
        self.response_complete = False
        self.body_open = False  # started, not complete, not disconnected: body messages go on
        self.chunked: bool | None = None
        self.length_left = 0
        self._head: bytes | None = None  # written with the first body bytes
        self._flush: asyncio.Handle | None = None
        self._head_only = False  # a HEAD request: no body bytes go out
        self._running = True
        self.on_left: Callable[[], object] | None = None  # the app's, for a client that leaves

    def on_disconnect(self, callback: Callable[[], object]) -> None:
        """The scope extension (`proxy.server.asgi.DISCONNECT_EXTENSION`): `callback` runs once when
        the client leaves before the response is complete; at once if it already has. A
        callback registered later replaces it."""
        if self.disconnected:
            callback()
        else:
            self.on_left = callback

    def wake(self) -> None:
        """A `receive()` waiting has something to hand over (or the request is over)."""
        waiter = self.waiter
        if waiter is not None:
            self.waiter = None
            if not waiter.done():
                waiter.set_result(None)

    async def run(self, app: Any) -> None:
        protocol = self.protocol
        try:
            result = await app(self.scope, self.receive, self.send)
        except BaseException as exc:
            protocol.logger.error("Exception in ASGI application\n", exc_info=exc)
            if not self.response_started:
                await self._send_500()
            else:
                self._close()
        else:
            if result is not None:
                msg = "ASGI callable should return None, but returned '%s'."
                protocol.logger.error(msg, result)
                self._close()
            elif not self.response_started and not self.disconnected:
                protocol.logger.error("ASGI callable returned without starting response.")
                await self._send_500()
            elif not self.response_complete and not self.disconnected:
                protocol.logger.error("ASGI callable returned without completing response.")
                self._close()
        finally:
            self._running = False
            protocol.tasks.discard(self.task)  # type: ignore[arg-type]
            # Cycles through this exchange: the task's coroutine holds it, and so does the
            # scope (its disconnect extension). Without them, what is left of the request is
            # freed as soon as its last reference goes, not by the cycle collector (about 16K
            # instructions a request, bench.serverprocess). A late body callback finds no
            # scope of its own here and does nothing, as for a response already complete.
            self.task = None
            self.scope = None

    async def _send_500(self) -> None:
        headers = [
            (b"content-type", b"text/plain; charset=utf-8"),
            (b"content-length", b"21"),
            (b"connection", b"close"),
        ]
        await self.send({"type": "http.response.start", "status": 500, "headers": headers})
        await self.send({"type": "http.response.body", "body": b"Internal Server Error"})

    def _close(self) -> None:
        """Drop the connection mid-response; a head still held goes out first, as it would
        have with uvicorn's own cycle."""
        self._flush_head()
        self.transport.close()

    # -- receive --------------------------------------------------------------------------------

    async def receive(self) -> Message:
        if self.waiting_for_100_continue and not self.transport.is_closing():
            self.transport.write(_CONTINUE)
            self.waiting_for_100_continue = False
        # Nothing to hand over (no body bytes, no end of body not yet handed over) while the
        # request is open: wait for it.
        if not (self.disconnected or self.response_complete or self.body) and (
            self.more_body or self._delivered_end
        ):
            flow = self._flow
            if flow.read_paused:
                flow.resume_reading()
            waiter = self.waiter
            if waiter is None:
                waiter = self.waiter = self.protocol.loop.create_future()
            await waiter
        if self.disconnected or self.response_complete:
            return {"type": "http.disconnect"}
        body = self.body
        self.body = b""
        if not self.more_body:
            self._delivered_end = True
        return {"type": "http.request", "body": body, "more_body": self.more_body}

    # -- send -----------------------------------------------------------------------------------

    def send(self, message: Message) -> Awaitable[None]:
        """Write the message now and hand back a finished future; wait for the transport
        first (a coroutine then) when it asked us to stop writing."""
        if self._flow.write_paused and not self.disconnected:
            return self._send_when_writable(message)
        if self.body_open and message["type"] == "http.response.body":  # most messages
            self._write_body(message.get("body", b""), message.get("more_body", False))
        else:
            self._send(message)
        return self._sent

    async def _send_when_writable(self, message: Message) -> None:
        await self._flow.drain()
        self._send(message)

    def _send(self, message: Message) -> None:
        if self.disconnected:
            return
        kind = message["type"]
        if not self.response_started:
            if kind != "http.response.start":
                raise RuntimeError(
                    f"Expected ASGI message 'http.response.start', but got '{kind}'."
                )
            self._start_response(message)
        elif not self.response_complete:
            if kind != "http.response.body":
                raise RuntimeError(f"Expected ASGI message 'http.response.body', but got '{kind}'.")
            self._write_body(message.get("body", b""), message.get("more_body", False))
        else:
            raise RuntimeError(
                f"Unexpected ASGI message '{kind}' sent, after response already completed."
            )

    def _start_response(self, message: Message) -> None:
        self.response_started = True
        self.waiting_for_100_continue = False
        status = message["status"]
        protocol = self.protocol
        if protocol.access_log:
            _log_access(protocol, self.scope, status)
        head_only = self.scope["method"] == "HEAD"
        self._head, self.chunked, self.length_left, self.keep_alive = response_head(
            status,
            message.get("headers", ()),
            self.keep_alive,
            head_only,
            protocol.server_state.default_headers,
        )
        self._head_only = head_only
        self._flush = protocol.loop.call_soon(self._flush_head)
        self.body_open = True

    def _flush_head(self) -> None:
        """The body did not follow in the same step of the loop: the head goes alone."""
        self._flush = None  # the handle holds this exchange (a cycle, see run())
        head = self._head
        if head is not None:
            self._head = None
            if not self.disconnected:
                self.transport.write(head)

    def _write_body(self, body: bytes, more_body: bool) -> None:
        head = self._head
        if head is not None:  # the head goes out with these bytes
            self._head = None
            self._flush.cancel()  # type: ignore[union-attr]
            self._flush = None  # the handle holds this exchange (a cycle, see run())
            out = [head]
        else:
            out = []
        if self._head_only:
            self.length_left = 0
        elif self.chunked:
            if body:
                out += (b"%x\r\n" % len(body), body, b"\r\n")
            if not more_body:
                out.append(_LAST_CHUNK)
        else:
            if len(body) > self.length_left:
                raise RuntimeError("Response content longer than Content-Length")
            self.length_left -= len(body)
            out.append(body)
        if out:
            self.transport.write(out[0] if len(out) == 1 else b"".join(out))
        if not more_body:
            if self.length_left != 0:
                raise RuntimeError("Response content shorter than Content-Length")
            self._complete()

    def _complete(self) -> None:
        self.response_complete = True
        self.body_open = False
        self.on_left = None  # only a client leaving before this calls it; it holds the app (run())
        self.wake()  # a waiting receive() now answers http.disconnect
        if not self.keep_alive:
            self.transport.close()
        if self._running:
            self.protocol.on_response_complete()


def _unquote(path: str) -> str:
    from urllib.parse import unquote

    return unquote(path)


def _log_access(protocol: LeanHttpProtocol, scope: Any, status: int) -> None:
    from uvicorn.protocols.utils import get_client_addr, get_path_with_query_string

    protocol.access_logger.info(
        '%s - "%s %s HTTP/%s" %d',
        get_client_addr(scope),
        scope["method"],
        get_path_with_query_string(scope),
        scope["http_version"],
        status,
    )


__all__ = ["LeanHttpProtocol", "RequestCycle"]
