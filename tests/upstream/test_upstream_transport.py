"""The upstream client (`make_upstream_client`) against a real server on loopback.

Every failure must come out of `map_upstream_errors` as the proxy's own error (SPEC §6),
whatever transport sits behind httpx; and a streamed body must be handed on as it arrives.
Each test runs both ways `open_upstream` can send: the prebuilt head with no httpx objects
(`UpstreamClient.open_raw`), and httpx's Request/Response over the same transport.
The server is a scripted asyncio server, one behaviour per test. No timing thresholds: the
timeouts below only bound how long a broken test can hang.
"""

from __future__ import annotations

import asyncio
import socket
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import httpx
import pytest
import uvloop

from proxy.config.load import Route
from proxy.core.errors import UpstreamStreamError, UpstreamTimeout, UpstreamUnreachable
from proxy.upstream import transport as transport_module
from proxy.upstream.call import UpstreamResponse, iter_body, open_upstream
from proxy.upstream.client import (
    UpstreamClient,
    make_upstream_client,
    map_upstream_errors,
    timeouts,
)
from proxy.upstream.transport import HttptoolsTransport, request_head

READ_TIMEOUT = 0.3  # seconds of upstream silence the client tolerates in these tests
GUARD = 5.0  # no test may wait longer than this for anything
SSE_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
)
EVENT = b"data: {}\n\n"

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
Scenario = Callable[[httpx.AsyncClient], Awaitable[None]]


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%b\r\n" % (len(data), data)


async def read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    return head + await reader.readexactly(length)


@asynccontextmanager
async def upstream(handler: Handler) -> AsyncIterator[str]:
    """A loopback server running `handler` per connection; yields its base URL."""
    tasks: set[asyncio.Task[None]] = set()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        tasks.add(task)
        try:
            await handler(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        server.close()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await server.wait_closed()


def route(url: str) -> Route:
    return Route(name="test", upstream=url, connect_timeout=GUARD, read_timeout=READ_TIMEOUT)


async def open_stream(
    client: httpx.AsyncClient, url: str, method: str = "POST", path: str = "/chat/completions"
) -> UpstreamResponse:
    """What the exchange shell does: send, mapping failures before the head."""
    content = b"{}" if method == "POST" else None
    with map_upstream_errors(streaming_body=False):
        return await open_upstream(client, method, url + path, [], content, timeouts(route(url)))


async def read_all(response: UpstreamResponse) -> list[bytes]:
    try:
        return [chunk async for chunk in iter_body(response, decoded=True)]
    finally:
        await response.aclose()


class Behind(httpx.AsyncBaseTransport):
    """The proxy's transport behind one of another class: `UpstreamClient.open_raw` applies to
    HttptoolsTransport only, so the client sends through httpx's Request and Response objects
    (over the same transport)."""

    def __init__(self, inner: HttptoolsTransport) -> None:
        self.inner = inner

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


def _client(way: str) -> httpx.AsyncClient:
    if way == "raw":
        return make_upstream_client()
    transport = Behind(HttptoolsTransport(max_keepalive_connections=256, keepalive_expiry=30))
    return UpstreamClient(
        transport=transport, timeout=None, follow_redirects=False, trust_env=False
    )


def _through_httpx(client: httpx.AsyncClient) -> bool:
    return isinstance(client._transport, Behind)


@pytest.fixture(
    params=[
        (loop, way, bodies)
        for loop in ("asyncio", "uvloop")
        for way in ("raw", "httpx")
        for bodies in ("dechunker", "httptools")
    ],
    ids=lambda param: "-".join(param),
)
def run(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Callable[[Scenario], None]:
    """Runs a scenario with a fresh client, on both event loops (the proxy runs on uvloop),
    sending both ways `open_upstream` can, with chunked bodies decoded by the compiled
    decoder and, as where it could not be compiled, by httptools."""
    loop, way, bodies = request.param
    factory = uvloop.new_event_loop if loop == "uvloop" else None
    if bodies == "httptools":
        monkeypatch.setattr(transport_module, "_Dechunker", None)
    else:
        assert transport_module._Dechunker is not None, "the install did not compile it"

    def runner(scenario: Scenario) -> None:
        async def main() -> None:
            client = _client(way)
            try:
                await asyncio.wait_for(scenario(client), GUARD * 2)
            finally:
                await client.aclose()

        with asyncio.Runner(loop_factory=factory) as loop:
            loop.run(main())

    return runner


def refused_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])  # nothing listens once the socket is closed


Run = Callable[[Scenario], None]


def test_connection_refused_is_upstream_unreachable(run: Run) -> None:
    async def scenario(client: httpx.AsyncClient) -> None:
        with pytest.raises(UpstreamUnreachable):
            await open_stream(client, f"http://127.0.0.1:{refused_port()}/v1")

    run(scenario)


def test_no_head_within_read_timeout_is_upstream_timeout(run: Run) -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        await asyncio.sleep(GUARD)

    async def scenario(client: httpx.AsyncClient) -> None:
        async with upstream(silent) as url:
            with pytest.raises(UpstreamTimeout):
                await open_stream(client, url)

    run(scenario)


def test_stall_mid_stream_is_upstream_stream_error(run: Run) -> None:
    async def stall(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(SSE_HEAD + chunk(EVENT))
        await writer.drain()
        await asyncio.sleep(GUARD)

    async def scenario(client: httpx.AsyncClient) -> None:
        async with upstream(stall) as url:
            response = await open_stream(client, url)
            with pytest.raises(UpstreamStreamError, match="stalled"):
                await read_all(response)

    run(scenario)


def test_reset_mid_body_is_upstream_stream_error(run: Run) -> None:
    async def reset(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(SSE_HEAD + chunk(EVENT))
        await writer.drain()
        await asyncio.sleep(0.05)
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.transport.abort()  # with SO_LINGER 0 the close sends RST

    async def scenario(client: httpx.AsyncClient) -> None:
        async with upstream(reset) as url:
            response = await open_stream(client, url)
            with pytest.raises(UpstreamStreamError, match="broke mid-response"):
                await read_all(response)

    run(scenario)


@pytest.mark.parametrize(
    "rest",
    [
        pytest.param(None, id="closed before the last chunk"),
        pytest.param(b"zz\r\nnot a chunk\r\n", id="a malformed chunk"),
    ],
)
def test_a_body_that_breaks_is_upstream_stream_error(run: Run, rest: bytes | None) -> None:
    async def truncate(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(SSE_HEAD + chunk(EVENT) + (rest or b""))  # and no terminating chunk
        await writer.drain()
        if rest is not None:
            await reader.read()  # held open until the client closes

    async def scenario(client: httpx.AsyncClient) -> None:
        async with upstream(truncate) as url:
            response = await open_stream(client, url)
            with pytest.raises(UpstreamStreamError):
                await read_all(response)

    run(scenario)


def test_close_before_the_head_is_upstream_unreachable(run: Run) -> None:
    async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)

    async def scenario(client: httpx.AsyncClient) -> None:
        async with upstream(hang_up) as url:
            with pytest.raises(UpstreamUnreachable):
                await open_stream(client, url)

    run(scenario)


def test_a_chunk_arrives_before_the_upstream_finishes(run: Run) -> None:
    async def scenario(client: httpx.AsyncClient) -> None:
        first_read = asyncio.Event()

        async def held(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await read_request(reader)
            writer.write(SSE_HEAD + chunk(EVENT))
            await writer.drain()
            await first_read.wait()  # the rest only once the client holds the first event
            writer.write(chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
            await writer.drain()

        async with upstream(held) as url:
            response = await open_stream(client, url)
            received = []
            try:
                async for piece in iter_body(response, decoded=True):
                    received.append(piece)
                    first_read.set()
            finally:
                await response.aclose()
        assert received[0] == EVENT
        assert b"".join(received) == EVENT + b"data: [DONE]\n\n"

    run(scenario)


def test_a_body_read_slower_than_it_arrives_comes_through_whole(run: Run) -> None:
    pieces = [bytes([65 + n % 26]) * 2048 for n in range(1000)]  # 2 MB, well past the
    # transport's unread-bytes limit, so reading the socket pauses and resumes

    async def flood(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(SSE_HEAD + b"".join(chunk(piece) for piece in pieces) + b"0\r\n\r\n")
        await writer.drain()

    async def scenario(client: httpx.AsyncClient) -> None:
        async with upstream(flood) as url:
            response = await open_stream(client, url)
            received = bytearray()
            try:
                async for piece in iter_body(response, decoded=True):
                    received += piece
                    await asyncio.sleep(0.001)
            finally:
                await response.aclose()
        assert bytes(received) == b"".join(pieces)

    run(scenario)


def test_body_ended_by_closing_the_connection_is_complete(run: Run) -> None:
    async def close_delimited(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n" + EVENT)
        await writer.drain()
        # the handler returns: the connection closes, which ends this body

    async def scenario(client: httpx.AsyncClient) -> None:
        async with upstream(close_delimited) as url:
            assert b"".join(await read_all(await open_stream(client, url))) == EVENT

    run(scenario)


def test_head_request_gets_the_head_and_the_next_request_an_answer(run: Run) -> None:
    async def head_then_get(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            request = await read_request(reader)
            if request.startswith(b"HEAD"):
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 12\r\n\r\n")  # no body
            else:
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}")
            await writer.drain()

    async def scenario(client: httpx.AsyncClient) -> None:
        async with upstream(head_then_get) as url:
            head = await open_stream(client, url, "HEAD", "/models")
            assert head.status_code == 200
            assert head.header(b"content-length") == b"12"
            assert await read_all(head) == []
            get = await open_stream(client, url, "GET", "/models")
            assert b"".join(await read_all(get)) == b"{}"

    run(scenario)


def test_keep_alive_connection_is_reused(run: Run) -> None:
    connections = 0

    async def keep_alive(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        for _ in range(3):
            await read_request(reader)
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}")
            await writer.drain()

    async def scenario(client: httpx.AsyncClient) -> None:
        async with upstream(keep_alive) as url:
            for _ in range(3):
                assert b"".join(await read_all(await open_stream(client, url))) == b"{}"

    run(scenario)
    assert connections == 1


def test_idle_connection_closed_by_the_upstream_is_replaced(run: Run) -> None:
    served = 0

    async def one_each(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal served
        await read_request(reader)
        served += 1
        # Keep-alive implied, and the connection closes after the response all the same.
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}")
        await writer.drain()

    async def scenario(client: httpx.AsyncClient) -> None:
        async with upstream(one_each) as url:
            for _ in range(3):
                assert b"".join(await read_all(await open_stream(client, url))) == b"{}"

    run(scenario)
    assert served == 3


def test_request_on_a_connection_the_upstream_just_closed_is_sent_again(run: Run) -> None:
    connections = 0

    async def drop_second(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}")
        await writer.drain()
        if connections == 1:
            await read_request(reader)  # as if its idle timeout struck as the request came

    async def scenario(client: httpx.AsyncClient) -> None:
        async with upstream(drop_second) as url:
            for _ in range(2):
                assert b"".join(await read_all(await open_stream(client, url))) == b"{}"

    run(scenario)
    assert connections == 2


def test_upstream_cookies_are_not_kept(run: Run) -> None:
    seen: list[bytes] = []

    async def set_cookie(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for _ in range(2):
            seen.append(await read_request(reader))
            writer.write(
                b"HTTP/1.1 200 OK\r\nset-cookie: session=alice; Path=/\r\n"
                b"content-length: 2\r\n\r\n{}"
            )
            await writer.drain()

    async def scenario(client: httpx.AsyncClient) -> None:
        async with upstream(set_cookie) as url:
            for _ in range(2):
                response = await open_stream(client, url)
                assert (response.header(b"set-cookie") or b"").startswith(b"session=alice")
                await read_all(response)

    run(scenario)
    assert len(seen) == 2
    assert b"alice" not in seen[1]


def test_both_ways_send_the_same_bytes() -> None:
    """The prebuilt head is byte for byte the request httpx's objects would have sent."""
    seen: list[bytes] = []

    async def record(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            seen.append(await read_request(reader))
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}")
            await writer.drain()

    async def main() -> None:
        headers = [(b"content-type", b"application/json"), (b"x-request-id", b"req_1")]
        async with upstream(record) as url:
            for way in ("raw", "httpx"):
                client = _client(way)
                try:
                    for method, content in (("POST", b'{"a":1}'), ("GET", None)):
                        response = await open_upstream(
                            client,
                            method,
                            url + "/models?x=1",
                            headers,
                            content,
                            timeouts(route(url)),
                        )
                        await read_all(response)
                finally:
                    await client.aclose()

    asyncio.run(main())
    assert len(seen) == 4
    assert seen[:2] == seen[2:]
    assert seen[0].startswith(b"POST /v1/models?x=1 HTTP/1.1\r\nHost: 127.0.0.1:")


def test_request_head_is_one_line_per_header_and_refuses_line_breaks() -> None:
    headers = [(b"Host", b"up:1"), (b"content-type", b"application/json")]
    assert request_head("POST", b"/v1/x?a=1", headers) == (
        b"POST /v1/x?a=1 HTTP/1.1\r\nHost: up:1\r\ncontent-type: application/json\r\n\r\n"
    )
    assert request_head("GET", b"/", []) == b"GET / HTTP/1.1\r\n\r\n"
    for smuggled in (
        [(b"x-a", b"1\r\nx-b: 2")],
        [(b"x-a", b"1\nx-b: 2")],
        [(b"x-a\r", b"1")],
        [(b"x-a", b"1"), (b"x-b", b"2\r")],
    ):
        with pytest.raises(httpx.LocalProtocolError):
            request_head("POST", b"/", smuggled)
    with pytest.raises(httpx.LocalProtocolError):
        request_head("GET", b"/\r\nx-b: 2", [])


# -- chunked bodies: the compiled decoder's hand-over points (each also runs with httptools) --


def test_chunked_answers_on_a_kept_alive_connection_each_read_whole(run: Run) -> None:
    """After a chunked body the connection serves the next request (a new head parser)."""
    connections = 0

    async def chunked(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        for n in range(3):
            await read_request(reader)
            writer.write(SSE_HEAD + chunk(b"data: %d\n\n" % n) + b"0\r\n\r\n")
            await writer.drain()

    async def scenario(client: httpx.AsyncClient) -> None:
        async with upstream(chunked) as url:
            for n in range(3):
                body = b"".join(await read_all(await open_stream(client, url)))
                assert body == b"data: %d\n\n" % n

    run(scenario)
    assert connections == 1


@pytest.mark.parametrize("decoder", ["dechunker", "httptools"])
@pytest.mark.parametrize("cut", [1, 20, len(SSE_HEAD) - 3, len(SSE_HEAD) - 1, len(SSE_HEAD) + 2])
def test_a_head_and_body_split_anywhere_read_the_same(
    cut: int, decoder: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The head's blank line may straddle two reads, or a read may end inside a size line:
    the connection fed the two reads directly, as the event loop would."""
    if decoder == "httptools":
        monkeypatch.setattr(transport_module, "_Dechunker", None)
    wire = SSE_HEAD + chunk(EVENT) + chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n"
    loop = asyncio.new_event_loop()
    try:
        conn = transport_module._Connection(loop, ("http", "127.0.0.1", 80), set())
        for _ in range(2):  # and a second answer on the same connection reads the same
            conn._reset()
            conn.active = True
            conn.data_received(wire[:cut])
            conn.data_received(wire[cut:])
            assert conn.error is None
            assert (conn.status, conn.complete, conn.keep_alive) == (200, True, True)
            assert b"".join(conn.chunks) == EVENT + b"data: [DONE]\n\n"
    finally:
        loop.close()


def test_an_interim_head_before_a_chunked_answer_is_skipped(run: Run) -> None:
    async def interim(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\n" + SSE_HEAD + chunk(EVENT) + b"0\r\n\r\n")
        await writer.drain()

    async def scenario(client: httpx.AsyncClient) -> None:
        async with upstream(interim) as url:
            response = await open_stream(client, url)
            assert response.status_code == 200
            assert b"".join(await read_all(response)) == EVENT

    run(scenario)


def test_bytes_after_a_chunked_body_end_close_the_connection(run: Run) -> None:
    """The body is whole, but a connection that sent more than its answer is not reused."""
    connections = 0

    async def chatty(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        await read_request(reader)
        writer.write(SSE_HEAD + chunk(EVENT) + b"0\r\n\r\nHTTP/1.1 200 OK\r\n\r\n")
        await writer.drain()
        await reader.read()  # until the client closes

    async def scenario(client: httpx.AsyncClient) -> None:
        async with upstream(chatty) as url:
            for _ in range(2):
                assert b"".join(await read_all(await open_stream(client, url))) == EVENT

    run(scenario)
    assert connections == 2


def test_a_shorter_read_timeout_after_a_longer_one_still_holds(run: Run) -> None:
    """The read timeout is a deadline per wait: a kept-alive connection whose last wait
    allowed a minute must still time out the next request's shorter wait at its own time."""

    async def answer_then_silence(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}")
        await writer.drain()
        await read_request(reader)
        await asyncio.sleep(GUARD * 3)

    async def scenario(client: httpx.AsyncClient) -> None:
        async with upstream(answer_then_silence) as url:
            patient = httpx.Timeout(GUARD, read=60.0)
            first = await open_upstream(client, "POST", url + "/x", [], b"{}", patient)
            assert b"".join(await read_all(first)) == b"{}"
            with pytest.raises(UpstreamTimeout):
                await open_stream(client, url)  # READ_TIMEOUT, long before the minute

    run(scenario)


def test_a_whole_body_read_at_once_is_the_chunks_joined(run: Run) -> None:
    pieces = [b'{"a":', b'"b"', b"}"]

    async def chunked(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
            b"transfer-encoding: chunked\r\n\r\n"
        )
        for piece in pieces:
            writer.write(chunk(piece))
            await writer.drain()
            await asyncio.sleep(0.01)
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    async def scenario(client: httpx.AsyncClient) -> None:
        async with upstream(chunked) as url:
            response = await open_stream(client, url)
            try:
                assert await response.read() == b"".join(pieces)
            finally:
                await response.aclose()

    run(scenario)


def test_a_whole_body_that_stalls_is_upstream_stream_error(run: Run) -> None:
    async def stall(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\n{}")
        await writer.drain()
        await asyncio.sleep(GUARD)

    async def scenario(client: httpx.AsyncClient) -> None:
        async with upstream(stall) as url:
            response = await open_stream(client, url)
            try:
                with (
                    pytest.raises(UpstreamStreamError, match="stalled"),
                    map_upstream_errors(streaming_body=True),
                ):
                    await response.read()
            finally:
                await response.aclose()

    run(scenario)


def test_a_body_is_settled_only_once_its_end_arrived_and_all_of_it_was_read(run: Run) -> None:
    """The exchange shell skips its bounded drain when reading on cannot wait: only then."""

    async def scenario(client: httpx.AsyncClient) -> None:
        release_end = asyncio.Event()

        async def held(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await read_request(reader)
            writer.write(SSE_HEAD + chunk(EVENT))
            await writer.drain()
            await release_end.wait()
            writer.write(chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
            await writer.drain()

        async with upstream(held) as url:
            response = await open_stream(client, url)
            try:
                pieces = response.chunks(decoded=True).__aiter__()
                assert await pieces.__anext__() == EVENT
                assert not response.body_settled()  # the end has not come
                release_end.set()
                assert await pieces.__anext__() == b"data: [DONE]\n\n"
                # Read whole; the proxy's own calls can tell, httpx's objects do not.
                raw_calls = not _through_httpx(client)
                assert response.body_settled() is raw_calls
                with pytest.raises(StopAsyncIteration):
                    await pieces.__anext__()
            finally:
                await response.aclose()

    run(scenario)
