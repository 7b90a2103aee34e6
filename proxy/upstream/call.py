"""One upstream call as the shell makes it: open it, read the answer's head, stream its body.

`open_upstream` is the one way the app and the exchange shell send a request upstream. Over
the proxy's own client (`UpstreamClient` on `HttptoolsTransport`, what `serve` runs) the
request goes out as a prebuilt head and the answer comes back as received, with no httpx
Request or Response object; over any other httpx client (tests' mock transports, the
benchmark's transport comparison) it goes through httpx's API. Either way the shell sees an
`UpstreamResponse`, and every failure comes out of `map_upstream_errors` (SPEC §6).
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Awaitable

import httpx

from proxy.core.errors import UpstreamStreamError
from proxy.server.asgi import Send
from proxy.upstream.client import UpstreamClient, map_upstream_errors
from proxy.upstream.decoding import codings, refused
from proxy.upstream.decoding import decoded as decoded_body
from proxy.upstream.transport import InvalidStatus, ResponseBody

Headers = list[tuple[bytes, bytes]]


class UpstreamResponse:
    """An upstream answer: status, headers as received (raw names and values) and the body."""

    __slots__ = ("_encoding", "_response", "_stream", "_type", "headers", "status_code")

    def __init__(
        self,
        status_code: int,
        headers: Headers,
        stream: ResponseBody | None = None,
        response: httpx.Response | None = None,
    ) -> None:
        self.status_code = status_code
        self.headers = headers
        self._stream = stream  # the transport's body stream (no httpx.Response)
        self._response = response  # or httpx's response, from any other client
        self._type: bytes | None = None  # content-type and content-encoding, once looked up
        self._encoding: bytes | None = None

    @classmethod
    def of(cls, response: httpx.Response) -> UpstreamResponse:
        return cls(response.status_code, response.headers.raw, response=response)

    def header(self, name: bytes) -> bytes | None:
        """A header's value (`name` lowercase), several joined by ", " as httpx's `get` does."""
        found = None
        for key, value in self.headers:  # a loop, not a list: this runs twice per response
            if key.lower() == name:
                found = value if found is None else found + b", " + value
        return found

    def content_type(self) -> str:
        if self._type is None:
            self._look_up()
        return (self._type or b"").decode("latin-1")

    def content_encoding(self) -> bytes | None:
        if self._type is None:
            self._look_up()
        return self._encoding

    def _look_up(self) -> None:
        """Both headers every answer is asked for, in one pass (as `header` joins them)."""
        kind = encoding = None
        for key, value in self.headers:
            key = key.lower()
            if key == b"content-type":
                kind = value if kind is None else kind + b", " + value
            elif key == b"content-encoding":
                encoding = value if encoding is None else encoding + b", " + value
        self._type = kind or b""
        self._encoding = encoding

    def read(self) -> Awaitable[bytes]:
        """The whole body, decoded, failures unmapped, to await: from the proxy's transport in
        one call (no async generator to make, hook and close, as `chunks` iterated would be),
        the transport's own coroutine (a frame less)."""
        stream = self._stream
        if type(stream) is ResponseBody and self._identity():
            return stream.read()
        return self._joined()

    async def _joined(self) -> bytes:
        return b"".join([chunk async for chunk in self.chunks(decoded=True)])

    def body_settled(self) -> bool:
        """Has the whole body arrived and been read, so that reading on cannot wait? (The
        proxy's transport, an undecoded body; elsewhere it is not known: False.)"""
        stream = self._stream
        return type(stream) is ResponseBody and stream.settled and self._identity()

    def _identity(self) -> bool:
        encoding = self.content_encoding()
        return encoding is None or encoding == b"identity"

    def chunks(self, *, decoded: bool) -> AsyncIterable[bytes]:
        """The body's source, failures unmapped (`iter_body` maps them). `decoded` undoes a
        content-encoding (`_decoding`); an identity body's source is the same either way."""
        if decoded and not self._identity():
            return self._decoding()
        response = self._response
        if response is None:
            assert self._stream is not None
            return self._stream
        # The bytes as they came: read the transport's stream itself. httpx's aiter_raw would
        # wrap it in two more async generators and a chunker that does nothing here (no
        # chunk_size): on a 200-chunk stream that was about a tenth of the proxy's CPU.
        stream = response.stream
        if response.is_closed or not isinstance(stream, httpx.AsyncByteStream):
            return response.aiter_raw()  # let httpx raise what it raises
        response.is_stream_consumed = True
        return stream

    def _decoding(self) -> AsyncIterable[bytes]:
        """The body decoded a bounded piece at a time (proxy.upstream.decoding, SPEC §6). A
        coding it has no decoder for fails at the first read: handing on the bytes as they
        came, as httpx does, the proxy would send them on as if decoded."""
        applied = codings(self.content_encoding() or b"")
        why = refused(applied)
        if why is not None:
            return _Failing(httpx.DecodingError(why))
        raw = self.chunks(decoded=False)
        return decoded_body(raw, applied) if applied else raw

    async def aclose(self) -> None:
        """Release the connection (pooled when the body was read to its end)."""
        if self._response is not None:
            await self._response.aclose()
        elif self._stream is not None:
            await self._stream.aclose()

    def released(self) -> bool:
        """`aclose` done at once where that needs no await (the proxy's transport); False:
        await `aclose()`. For the hot path, where a coroutine per close cost more."""
        stream = self._stream
        if self._response is None and type(stream) is ResponseBody:
            stream.release()
            return True
        return False


class _Failing:
    """A body source whose first read raises `error` (as a decoder's would)."""

    __slots__ = ("_error",)

    def __init__(self, error: httpx.DecodingError) -> None:
        self._error = error

    def __aiter__(self) -> _Failing:
        return self

    async def __anext__(self) -> bytes:
        raise self._error


def open_upstream(
    client: httpx.AsyncClient,
    method: str,
    url: str,
    headers: Headers,
    content: bytes | None,
    timeout: httpx.Timeout,
) -> Awaitable[UpstreamResponse]:
    """Send the request; its answer, to await, once the head arrived. Failures are httpx's:
    call and await it inside `map_upstream_errors(streaming_body=False)`. Not a coroutine
    itself over the proxy's own client: it hands back the transport's (a frame less, on the
    request's way and at its wait for the answer)."""
    if isinstance(client, UpstreamClient):
        sending = client.open_raw(method, url, headers, content or b"", timeout, UpstreamResponse)
        if sending is not None:
            return sending
    request = client.build_request(method, url, headers=headers, content=content, timeout=timeout)
    return _sent(client, request)


async def _sent(client: httpx.AsyncClient, request: httpx.Request) -> UpstreamResponse:
    response = await client.send(request, stream=True)
    if not 200 <= response.status_code <= 599:  # the proxy's transport refuses these itself
        await response.aclose()
        raise InvalidStatus(response.status_code)
    return UpstreamResponse.of(response)


def iter_body(response: UpstreamResponse, *, decoded: bool) -> AsyncIterator[bytes]:
    """The upstream body as it arrives, with failures mapped; the response is closed at its
    end.

    `decoded` undoes a content-encoding (what the exchanges need); otherwise the bytes are
    passed on as they came, with the upstream's content-encoding header kept.
    """
    return _MappedBody(response, decoded)


class _MappedBody:
    """`iter_body`'s iterator. A class, not an async generator, which mypyc does not compile
    (setup.py compiles this module). Empty reads are skipped, as they carry nothing."""

    __slots__ = ("_decoded", "_response", "_source")

    def __init__(self, response: UpstreamResponse, decoded: bool) -> None:
        self._response = response
        self._decoded = decoded
        # Asked for at the first read, inside the error mapping (httpx raises there for a
        # response already closed).
        self._source: AsyncIterator[bytes] | None = None

    def __aiter__(self) -> _MappedBody:
        return self

    async def __anext__(self) -> bytes:
        with map_upstream_errors(streaming_body=True):
            source = self._source
            if source is None:
                source = self._source = self._response.chunks(decoded=self._decoded).__aiter__()
            while True:
                try:
                    chunk = await source.__anext__()
                except StopAsyncIteration:
                    await self._response.aclose()
                    raise
                if chunk:
                    return chunk


async def relay(
    response: UpstreamResponse, send: Send, headers: Headers
) -> UpstreamStreamError | None:
    """Send the upstream's status, the given headers and its body as it came.

    If the body breaks, the head is out, so no error can follow: ending the body would hand
    the client a truncated body that looks complete. It is left unfinished instead, so the
    server drops the connection, which the client sees. Returns that failure, for the
    caller's accounting, or None.
    """
    await send({"type": "http.response.start", "status": response.status_code, "headers": headers})
    try:
        async for chunk in iter_body(response, decoded=False):
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
    except UpstreamStreamError as exc:
        return exc
    await send({"type": "http.response.body", "body": b""})
    return None
