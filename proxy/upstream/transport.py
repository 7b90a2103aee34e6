"""The upstream HTTP/1.1 transport behind httpx: an asyncio protocol per connection, httptools
parsing, a keep-alive pool. Chosen by measurement over httpx's default transport and
httpx-aiohttp's (numbers in `proxy.upstream.client.make_upstream_client`).

Rules it follows:
- httpx stays the API: this is an `httpx.AsyncBaseTransport` and raises httpx's exception
  types only (`ConnectError`, `ConnectTimeout`, `ReadTimeout`, `ReadError`,
  `RemoteProtocolError`, `LocalProtocolError`, `UnsupportedProtocol`; `InvalidStatus`, a
  response head with no status a client can be given, is a `RemoteProtocolError`), so
  `proxy.upstream.client.map_upstream_errors` and respx-based tests do not care which transport runs.
- A body is handed on as it arrives, never held for more: each read of the response body
  yields what has arrived and not been read yet (whole HTTP chunks, up to
  MAX_BODY_READ_BYTES), and waits only when nothing has.
- The read timeout is the longest silence allowed: waiting for the head, and between reads
  (`read_wait.ReadWait`).
- A connection is reused only after a complete response that allows keep-alive; anything else
  (cancellation, an error, a body left unread) closes it.
- A request that failed on a reused keep-alive connection before any response byte arrived is
  sent once more on a new connection: the upstream closed the idle connection as we used it,
  and has not seen the request.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Callable
from typing import TypeVar, cast

import httptools
import httpx

# mypyc (setup.py compiles this module) builds a non-native class by looking its base up in
# the module that defines it, and declares only the modules this one imports: without these
# imports of where httpx defines the bases used below, its C does not compile (mypyc 2.4).
import httpx._transports.base
import httpx._types
from mypy_extensions import mypyc_attr

from proxy.upstream.read_wait import ReadWait

try:  # compiled by the install (setup.py); without it httptools decodes bodies too
    from proxy.upstream._chunked import Dechunker

    _Dechunker: type[Dechunker] | None = Dechunker
except ImportError:  # pragma: no cover - exercised by tests that unset _Dechunker
    _Dechunker = None

# A consumer that stops reading (a slow client) must not make us buffer without bound: past
# this many unread body bytes the socket stops being read, and TCP pushes back on the upstream.
MAX_UNREAD_BODY_BYTES = 256 * 1024
# One body read hands on at most this much (whole HTTP chunks, so at least one): a burst of
# events (a fast upstream, or a backlog after a stall) then reaches the client as a few writes,
# the first after the core has worked through 16 KiB, not all of it. Measured against no limit
# on a 200-event burst (50 KB, bench "200-chunk stream"), 7 A/B pairs on a busy 2-core box:
# first byte 0.3 to 2.1 ms sooner (mean 1.4 ms, of +3.2 to +5.3 ms added), last byte -0.7 to
# +1.5 ms later (mean +0.45 ms: each extra write wakes a client competing for the same CPUs).
MAX_BODY_READ_BYTES = 16 * 1024
# Request bodies up to this size go out in the same write as the head (one segment, one
# syscall); larger ones are written separately rather than copied.
COALESCE_BODY_BYTES = 64 * 1024

_DEFAULT_PORTS = {"http": 80, "https": 443}
_Answer = TypeVar("_Answer")
_Origin = tuple[str, str, int]  # scheme, host, port


class InvalidStatus(httpx.RemoteProtocolError):
    """A response head whose status is no final HTTP status the proxy can relay: outside
    200-599 (httptools reads any three digits), or 101 Switching Protocols."""

    def __init__(self, status: int) -> None:
        super().__init__(
            f"the upstream answered with status {status:03d}, which is not a final HTTP "
            "status the proxy can relay (200 to 599)"
        )
        self.status = status


def _timeout(request: httpx.Request, name: str) -> float | None:
    value = request.extensions.get("timeout", {}).get(name)
    return None if value is None else float(value)


# A native class, though its base is asyncio's (which mypyc always sees: the standard
# library's stubs come with it). Marked native_class=False like the httpx subclasses below, it
# made mypyc 2.4 write C that does not compile (the base's module, asyncio.protocols, is not
# imported here).
class _Connection(asyncio.Protocol):
    """One upstream connection and the response currently being read from it."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, key: _Origin, registry: set[_Connection]
    ) -> None:
        self.loop = loop
        self.key = key
        self._registry = registry  # the transport's open connections, for aclose()
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.reused = False
        self.idle_since = 0.0
        # Body pieces as they arrive. httptools looks its callbacks up once, when the parser is
        # made, so `on_body` is the list's own append: one call per HTTP chunk, no Python frame.
        self.chunks: list[bytes] = []
        self.on_body = self.chunks.append
        self._parser = httptools.HttpResponseParser(self)
        # What the transport and the body stream await: until something arrives, the response
        # ends or fails; ReadTimeout after the read timeout (read_wait.py).
        self.read_wait = ReadWait(loop)
        self._paused = False
        self._reset()

    def _reset(self) -> None:
        self.active = False
        self.head_only = False
        self.got_bytes = False
        self.head_done = False
        self.complete = False
        self.keep_alive = False
        self.error: httpx.TransportError | None = None
        self.status = 0
        self.headers: list[tuple[bytes, bytes]] = []
        self.chunks.clear()
        self.unread = 0  # bytes received since the body was last read (framing included)
        self._delimited = False  # Content-Length or chunked: EOF before the end is an error
        self._chunked = False
        self._dechunker: Dechunker | None = None  # decoding this response's chunked body
        self._interim = False

    # -- asyncio.Protocol ------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        if not self.active or self.complete:
            # Bytes nobody asked for: the connection is no longer in a known state.
            self._fail(httpx.RemoteProtocolError("the upstream sent data without a request"))
            return
        self.got_bytes = True
        self.unread += len(data)
        try:
            if self._dechunker is not None:
                self._feed_chunked(data)
            elif not self.head_done and _Dechunker is not None:
                self._feed_head(data)
            else:
                self._parser.feed_data(data)
        except (httptools.HttpParserError, ValueError) as exc:
            self._fail(httpx.RemoteProtocolError(f"invalid HTTP response: {exc}"))
            return
        except httpx.RemoteProtocolError as exc:  # raised by a callback (on_message_begin)
            self._fail(exc)
            return
        if self.unread > MAX_UNREAD_BODY_BYTES and not self._paused and self.transport:
            self._paused = True
            self.transport.pause_reading()
        self.read_wait.wake()

    def _feed_head(self, data: bytes) -> None:
        """Heads to httptools, one at a time (a 1xx head may precede the response's), so that
        a chunked body after the head can go to the compiled decoder instead."""
        while not self.head_done:
            end = data.find(b"\r\n\r\n")  # the first blank line ends a head
            if end < 0:
                # Not here whole (or split across reads): httptools reads the rest of this
                # response, body included, as it does where the decoder is not compiled.
                self._parser.feed_data(data)
                return
            self._parser.feed_data(data[: end + 4])
            data = data[end + 4 :]
        if self._dechunker is not None:
            self._feed_chunked(data)
        elif data:
            self._parser.feed_data(data)

    def _feed_chunked(self, data: bytes) -> None:
        dechunker = self._dechunker
        assert dechunker is not None
        self.chunks += dechunker.feed(data)
        if dechunker.done:
            # httptools never saw this body: its parser waits for chunks, so the next
            # response on this connection gets a new one.
            self.complete = True
            self.keep_alive = dechunker.excess == 0 and self._parser.should_keep_alive()
            self._dechunker = None
            self._parser = httptools.HttpResponseParser(self)

    def eof_received(self) -> bool | None:
        return None  # close the transport; connection_lost decides what the EOF means

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._registry.discard(self)
        self.read_wait.stop()
        if self.active and not self.complete and self.error is None:
            if not self.head_done:
                self.error = (
                    httpx.ReadError(str(exc))
                    if exc is not None
                    else httpx.RemoteProtocolError(
                        "Server disconnected without sending a response."
                    )
                )
            elif exc is None and not self._delimited:
                self.complete = True  # a body delimited by the end of the connection
            else:
                self.error = (
                    httpx.ReadError(str(exc))
                    if exc is not None
                    else httpx.RemoteProtocolError(
                        "peer closed connection without sending complete message body"
                    )
                )
        self.read_wait.wake()

    # -- httptools callbacks -----------------------------------------------------------------

    def on_message_begin(self) -> None:
        if self.complete:
            # Another answer after the one asked for, in the same read: the connection is
            # in no known state (the answer already read stays whole; data_received fails
            # the connection, so it is not reused).
            raise httpx.RemoteProtocolError("the upstream sent data after its response")
        self.headers = []

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        status = self._parser.get_status_code()
        if 100 <= status < 200 and status != 101:
            self._interim = True  # 100 Continue and friends: the real head follows
            return
        if not 200 <= status <= 599:
            # httptools reads any three digits (999, 000), and a 101 hands the connection to
            # another protocol: no client can be given either (SPEC §6). Raising stops the
            # parse; data_received keeps this error rather than the parser's.
            self.error = InvalidStatus(status)
            raise self.error
        self.status = status
        self.head_done = True
        for name, value in self.headers:
            lowered = name.lower()
            if lowered == b"content-length":
                self._delimited = True
            elif lowered == b"transfer-encoding" and value.lower().find(b"chunked") >= 0:
                self._delimited = self._chunked = True
        if self.head_only:
            # httptools cannot be told the response answers a HEAD: finish here and never
            # reuse the connection, whose parser now expects a body that will not come.
            self.complete = True
            self.keep_alive = False
        elif self._chunked and _Dechunker is not None and status not in (204, 304):
            self._dechunker = _Dechunker(MAX_BODY_READ_BYTES)

    def on_message_complete(self) -> None:
        if self._interim:
            self._interim = False
            return
        if not self.complete:
            self.complete = True
            self.keep_alive = self._parser.should_keep_alive()

    # -- used by the transport and the body stream ------------------------------------------

    def _fail(self, error: httpx.TransportError) -> None:
        if self.error is None and not self.complete:
            self.error = error
        self.abort()
        self.read_wait.wake()

    def start(self, head: bytes, body: bytes, *, head_only: bool) -> None:
        assert self.transport is not None
        self._reset()
        self.active = True
        self.head_only = head_only
        if self._paused:  # the last response ended with its body unread: read again
            self._paused = False
            self.transport.resume_reading()
        try:
            if self.closed or self.transport.is_closing():
                raise ConnectionError("the connection closed before the request")
            if len(body) <= COALESCE_BODY_BYTES:
                self.transport.write(head + body)
            else:
                self.transport.write(head)
                self.transport.write(body)
        except (ConnectionError, RuntimeError) as exc:  # uvloop: RuntimeError when closed
            self.error = httpx.WriteError(str(exc))

    def take(self) -> bytes:
        """What arrived and was not read yet, whole HTTP chunks up to MAX_BODY_READ_BYTES."""
        chunks = self.chunks
        if len(chunks) == 1:
            data = chunks[0]
            chunks.clear()
        else:
            size = taken = 0
            for piece in chunks:
                size += len(piece)
                taken += 1
                if size >= MAX_BODY_READ_BYTES:
                    break
            data = b"".join(chunks[:taken])
            del chunks[:taken]
        self.unread = max(0, self.unread - len(data)) if chunks else 0
        if self._paused and self.unread <= MAX_UNREAD_BODY_BYTES and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()
        return data

    def abort(self) -> None:
        self.closed = True
        self.read_wait.stop()
        if self.transport is not None:
            self.transport.abort()


class _Wait:
    """ResponseBody._ready's answer when nothing has arrived yet."""


_WAIT = _Wait()


class ResponseBody:
    """A response's body as it arrives: iterated (`async for`), or read whole. A native class
    (setup.py compiles this module): httpx.Response takes it as `httpx_stream()`."""

    def __init__(
        self,
        pool: ConnectionPool,
        conn: _Connection,
        request: httpx.Request | None,
        read_timeout: float | None,
    ):
        self._pool = pool
        self._conn = conn
        self._request = request
        self._read_timeout = read_timeout
        self._released = False

    def __aiter__(self) -> AsyncIterator[bytes]:
        return _BodyChunks(self)

    async def read(self) -> bytes:
        """The whole body, as `__aiter__` would hand it on, joined: for a body read before it
        is used (a whole message), without an async generator's creation, hooks and close."""
        parts: list[bytes] = []
        try:
            while (data := self._ready()) is not None:
                if isinstance(data, _Wait):
                    await self._conn.read_wait.wait(self._read_timeout, "response body bytes")
                else:
                    parts.append(data)
        except httpx.RequestError as exc:
            self._name(exc)
            raise
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def _ready(self) -> bytes | _Wait | None:
        """What arrived and was not read yet; _WAIT when nothing has; None at the end. A plain
        function, not a coroutine: the two readers above await the wait themselves."""
        conn = self._conn
        if conn.chunks:
            return conn.take()
        if conn.error is not None:
            raise conn.error
        return None if conn.complete else _WAIT

    @property
    def settled(self) -> bool:
        """The response is complete and every byte of it was read."""
        conn = self._conn
        return conn.complete and not conn.chunks and conn.error is None

    def _name(self, exc: httpx.RequestError) -> None:
        """Failures name the request when there is one (as httpx's own transport's do)."""
        if self._request is not None:
            exc.request = self._request

    async def aclose(self) -> None:
        self.release()

    def release(self) -> None:
        """`aclose` without a coroutine: the connection goes back to the pool (if it can serve
        another request) or is closed."""
        if not self._released:
            self._released = True
            self._pool.release(self._conn)

    def httpx_stream(self) -> httpx.AsyncByteStream:
        """This body as httpx.Response takes a stream (it checks the class)."""
        return _HttpxStream(self)


@mypyc_attr(native_class=False)  # its base is not compiled: setup.py says why
class _HttpxStream(httpx.AsyncByteStream):
    """A ResponseBody as an httpx byte stream: for httpx's API (handle_async_request, and a
    body httpx decodes), not the proxy's own calls."""

    def __init__(self, body: ResponseBody) -> None:
        self.body = body

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self.body.__aiter__()

    async def aclose(self) -> None:
        self.body.release()


class _BodyChunks:
    """A response body's reads, as `async for` takes them: what has arrived and was not read
    yet, at each step, waiting only when nothing has. A class, not an async generator, which
    mypyc does not compile (setup.py compiles this module)."""

    __slots__ = ("_body", "_conn")

    def __init__(self, body: ResponseBody) -> None:
        self._body = body
        self._conn = body._conn

    def __aiter__(self) -> _BodyChunks:
        return self

    async def __anext__(self) -> bytes:
        conn = self._conn  # ResponseBody._ready() inlined: a stream's hot path
        try:
            while True:
                if conn.chunks:
                    return conn.take()
                if conn.error is not None:
                    raise conn.error
                if conn.complete:
                    raise StopAsyncIteration
                await conn.read_wait.wait(self._body._read_timeout, "response body bytes")
        except httpx.RequestError as exc:
            self._body._name(exc)
            raise


@mypyc_attr(native_class=False)  # its base is not compiled: setup.py says why
class HttptoolsTransport(httpx.AsyncBaseTransport):
    """HTTP/1.1 over asyncio + httptools, with a keep-alive pool per (scheme, host, port).

    There is no cap on open connections (the proxy opens one per in-flight upstream request,
    as its clients decide); idle ones are kept up to `max_keepalive_connections` per origin
    for `keepalive_expiry` seconds. The work is its `pool`'s, which the proxy's own calls use
    directly (`pool.send_head`): a native class, where a method call on this one goes through
    CPython's attribute lookup, from compiled code too.
    """

    def __init__(
        self,
        *,
        max_keepalive_connections: int = 256,
        keepalive_expiry: float = 30.0,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.pool = ConnectionPool(max_keepalive_connections, keepalive_expiry, ssl_context)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        try:
            url = request.url
            raw = await self.pool.send_head(
                origin(url.scheme, url.host, url.port),
                _request_head(request),
                await request.aread(),
                connect_timeout=_timeout(request, "connect"),
                read_timeout=_timeout(request, "read"),
                answer=RawResponse,
                request=request,
            )
            return httpx.Response(
                raw.status_code,
                headers=raw.headers,
                stream=raw.stream.httpx_stream(),
                extensions={"http_version": b"HTTP/1.1"},
            )
        except httpx.RequestError as exc:
            exc.request = request  # as httpx's own client does
            raise

    async def aclose(self) -> None:
        self.pool.close()


class ConnectionPool:
    """HttptoolsTransport's connections: the idle ones kept per origin, and all that are open
    (closed by `close`)."""

    def __init__(
        self, max_idle: int, expiry: float, ssl_context: ssl.SSLContext | None = None
    ) -> None:
        self._max_idle = max_idle
        self._expiry = expiry
        self._ssl_context = ssl_context
        self._idle: dict[_Origin, list[_Connection]] = {}
        self._all: set[_Connection] = set()

    async def send_head(
        self,
        key: _Origin,
        head: bytes,
        body: bytes,
        *,
        connect_timeout: float | None,
        read_timeout: float | None,
        answer: Callable[[int, list[tuple[bytes, bytes]], ResponseBody], _Answer],
        request: httpx.Request | None = None,
    ) -> _Answer:
        """Send the request as prebuilt bytes (`request_head`); its response once the head
        arrived, without httpx's Request and Response objects: what the proxy's own calls use
        (about a fifth of a small request's instructions went to building those objects and
        reading them back). The response is `answer(status, headers, body)` (RawResponse, or
        the caller's own type: no second object, and no frame of the caller's to make it).
        Raises the same httpx exceptions as `handle_async_request`; the body's failures name
        `request` when one is given."""
        head_only = head.startswith(b"HEAD ")
        for attempt in (1, 2):
            conn = self._checkout(key) or await self._connect(key, connect_timeout)
            try:
                conn.start(head, body, head_only=head_only)
                while not conn.head_done:
                    if conn.error is not None:
                        raise conn.error
                    await conn.read_wait.wait(read_timeout, "response head")
            except httpx.TimeoutException:
                conn.abort()
                raise
            except httpx.TransportError:
                conn.abort()
                if attempt == 1 and conn.reused and not conn.got_bytes:
                    continue  # the upstream closed the idle connection as we sent on it
                raise
            except BaseException:
                conn.abort()
                raise
            body_stream = ResponseBody(self, conn, request, read_timeout)
            return answer(conn.status, conn.headers, body_stream)
        raise AssertionError("unreachable")  # pragma: no cover

    def _checkout(self, key: _Origin) -> _Connection | None:
        idle = self._idle.get(key)
        if not idle:
            return None
        now = idle[-1].loop.time()
        while idle:
            conn = idle.pop()
            alive = not conn.closed and not (conn.transport is None or conn.transport.is_closing())
            if alive and now - conn.idle_since < self._expiry:
                conn.reused = True
                return conn
            conn.abort()
        return None

    async def _connect(self, key: _Origin, timeout: float | None) -> _Connection:
        scheme, host, port = key
        loop = asyncio.get_running_loop()
        tls = self._tls() if scheme == "https" else None
        try:
            async with asyncio.timeout(timeout):
                _, conn = await loop.create_connection(
                    lambda: _Connection(loop, key, self._all),
                    host,
                    port,
                    ssl=tls,
                    server_hostname=host if tls is not None else None,
                )
        except TimeoutError:
            raise httpx.ConnectTimeout(f"could not connect to {host}:{port} in time") from None
        except OSError as exc:  # refused, unreachable, DNS, TLS handshake (ssl.SSLError)
            raise httpx.ConnectError(str(exc) or type(exc).__name__) from None
        self._all.add(conn)
        return conn

    def _tls(self) -> ssl.SSLContext:
        if self._ssl_context is None:
            self._ssl_context = httpx.create_ssl_context(trust_env=False)
        return self._ssl_context

    def release(self, conn: _Connection) -> None:
        """A response was closed: pool its connection if it can serve another request."""
        reusable = conn.complete and conn.keep_alive and conn.error is None and not conn.closed
        if reusable and conn.transport is not None and not conn.transport.is_closing():
            conn.active = False
            idle = self._idle.get(conn.key)
            if idle is None:
                idle = self._idle[conn.key] = []
            if len(idle) < self._max_idle:
                conn.idle_since = conn.loop.time()
                idle.append(conn)
                return
        conn.abort()

    def close(self) -> None:
        for conn in list(self._all):
            conn.abort()
        self._all.clear()
        self._idle.clear()


def origin(scheme: str, host: str, port: int | None) -> _Origin:
    """The pool's key for a URL's parts; UnsupportedProtocol for anything but http(s)."""
    if scheme not in _DEFAULT_PORTS:
        raise httpx.UnsupportedProtocol(f"unsupported URL scheme {scheme!r}")
    return (scheme, host, port or _DEFAULT_PORTS[scheme])


def request_head(method: str, target: bytes, headers: list[tuple[bytes, bytes]]) -> bytes:
    """An HTTP/1.1 request head; LocalProtocolError if a name or value holds a line break."""
    fields = b"\r\n".join(map(b": ".join, headers))
    # One line per header: a CR or LF inside a name or value would smuggle another header.
    breaks = len(headers) - 1 if headers else 0
    if (
        fields.count(b"\n") != breaks
        or fields.count(b"\r") != breaks
        # find(), not `in`: CPython 3.11's `bytes in bytes` formats a TypeError first
        or target.find(b"\n") >= 0
        or target.find(b"\r") >= 0
    ):
        raise httpx.LocalProtocolError("a request header contains a line break")
    if not headers:
        return b"%b %b HTTP/1.1\r\n\r\n" % (method.encode("ascii"), target)
    return b"%b %b HTTP/1.1\r\n%b\r\n\r\n" % (method.encode("ascii"), target, fields)


def _request_head(request: httpx.Request) -> bytes:
    return request_head(request.method, request.url.raw_path, request.headers.raw)


class RawResponse:
    """A response head as received (raw header names and values) and its body stream."""

    __slots__ = ("headers", "status_code", "stream")

    def __init__(
        self, status_code: int, headers: list[tuple[bytes, bytes]], stream: ResponseBody
    ) -> None:
        self.status_code = status_code
        self.headers = headers
        self.stream = stream
