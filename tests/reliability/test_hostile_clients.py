"""What a client can make the server do before the app sees a request (SPEC §6), on the protocol
`toolcall-proxy serve` runs (`proxy.server.draining.OpenAIErrorHttpProtocol`), over real
sockets on loopback: a WebSocket upgrade, trailer fields of a chunked body, a head without
end, a head or body that stops arriving, a connection that never sends a request.

Every wait here is a socket read with a deadline, never a sleep."""

from __future__ import annotations

import json
import selectors
import socket
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from proxy.config.load import Route, Settings
from proxy.server.app import create_app
from proxy.server.draining import MAX_REQUEST_HEAD_BYTES, OpenAIErrorHttpProtocol
from tests.e2e.test_cli_serve import environment, process
from tests.reliability.upstreams import ScriptedUpstream, scripted
from tests.reliability.wire import no_traceback, raw_exchange, status_of
from tests.servers import ServerThread, free_port, serving

PROXY_KEY = "pk-trailer-test-0123456789"
DEADLINE_S = 10.0


def openai_error(answer: bytes, status: int, code: str) -> dict[str, Any]:
    """`answer` is one HTTP response: `status`, the OpenAI error shape with `code`, and the
    connection closed after it."""
    assert status_of(answer) == status, answer[:300]
    head, _, body = answer.partition(b"\r\n\r\n")
    assert b"content-type: application/json" in head.lower(), head
    assert b"connection: close" in head.lower(), head
    error = json.loads(body)["error"]
    assert set(error) == {"message", "type", "code", "param"}
    assert error["code"] == code, error
    no_traceback(answer)
    return error  # type: ignore[no-any-return]


def read_until_closed(sock: socket.socket, timeout: float = DEADLINE_S) -> bytes:
    """Everything the server sends until it closes the connection; fails at the deadline."""
    deadline = time.monotonic() + timeout
    received = b""
    while time.monotonic() < deadline:
        sock.settimeout(max(deadline - time.monotonic(), 0.01))
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            break
        except ConnectionResetError:
            return received
        if not chunk:
            return received
        received += chunk
    raise AssertionError(f"the server did not close the connection within {timeout}s")


@pytest.fixture(scope="module")
def upstream() -> Iterator[tuple[ServerThread, ScriptedUpstream]]:
    with scripted() as pair:
        yield pair


def proxy_settings(upstream: ServerThread, **settings: Any) -> Settings:
    return Settings(routes=(Route(name="d", upstream=upstream.url + "/v1"),), **settings)


@pytest.fixture(scope="module")
def proxy(upstream: tuple[ServerThread, ScriptedUpstream]) -> Iterator[ServerThread]:
    settings = proxy_settings(upstream[0], proxy_keys=(PROXY_KEY,))
    with serving(create_app(settings)) as server:
        yield server


# -- finding 4: WebSocket upgrades ----------------------------------------------------------

WEBSOCKET_HANDSHAKE = (
    b"GET %s HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
    b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
)


@pytest.mark.parametrize("path", [b"/healthz", b"/v1/chat/completions", b"/v1/realtime", b"/x"])
def test_a_websocket_upgrade_gets_a_400_in_the_openai_shape(
    proxy: ServerThread, path: bytes
) -> None:
    answer = raw_exchange(proxy.port, WEBSOCKET_HANDSHAKE % path)
    openai_error(answer, 400, "websocket_not_supported")
    assert status_of(raw_exchange(proxy.port, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")) == 200


def test_the_app_refuses_a_websocket_on_uvicorns_stock_protocol(
    upstream: tuple[ServerThread, ScriptedUpstream],
) -> None:
    """`uvicorn proxy.server.app:...` without the proxy's protocol hands the handshake to the
    app: it answers 400 in the OpenAI shape (the ASGI denial response), not uvicorn's 500."""
    server = ServerThread(create_app(proxy_settings(upstream[0])))
    server.server.config.http = "httptools"
    with _started(server):
        answer = raw_exchange(server.port, WEBSOCKET_HANDSHAKE % b"/v1/chat/completions")
    assert status_of(answer) == 400, answer[:300]
    head, _, body = answer.partition(b"\r\n\r\n")
    assert b"content-type: application/json" in head.lower()
    assert json.loads(body)["error"]["code"] == "websocket_not_supported"
    no_traceback(answer)


# -- finding 11: trailer fields of a chunked body -------------------------------------------


def chunked_request(body: bytes, trailers: list[tuple[bytes, bytes]], head: bytes = b"") -> bytes:
    fields = b"".join(name + b": " + value + b"\r\n" for name, value in trailers)
    return (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        + head
        + b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
        + b"%x\r\n" % len(body)
        + body
        + b"\r\n0\r\n"
        + fields
        + b"\r\n"
    )


def test_trailer_fields_are_never_forwarded_nor_request_headers(
    proxy: ServerThread, upstream: tuple[ServerThread, ScriptedUpstream]
) -> None:
    """The client authenticates with `Authorization: Bearer <proxy key>` (stripped before the
    request goes upstream); a trailer `x-toolcall-proxy-key` made the app think the key came
    in that header and forward the Authorization, i.e. the proxy key, upstream. 150 more
    trailer fields would also have passed the 100-field limit, after the check."""
    seen = upstream[1].seen
    seen.clear()
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()
    trailers = [
        (b"x-toolcall-proxy-key", PROXY_KEY.encode()),
        (b"authorization", b"Bearer " + PROXY_KEY.encode()),
        (b"x-trailer-smuggled", b"yes"),
        *[(b"x-filler-%d" % i, b"v") for i in range(150)],
    ]
    head = b"Authorization: Bearer " + PROXY_KEY.encode() + b"\r\n"
    answer = raw_exchange(proxy.port, chunked_request(body, trailers, head))
    assert status_of(answer) == 200, answer[:300]
    assert len(seen) == 1
    headers = seen[0].headers
    assert PROXY_KEY not in json.dumps(headers), headers
    assert not any(name.startswith(("x-trailer", "x-filler")) for name in headers), headers
    assert "x-toolcall-proxy-key" not in headers and "authorization" not in headers, headers


# -- finding 5: a head without end ----------------------------------------------------------


class CountingProtocol(OpenAIErrorHttpProtocol):
    """The proxy's protocol, counting the bytes the server read off all connections."""

    received = 0

    def data_received(self, data: bytes) -> None:
        CountingProtocol.received += len(data)
        super().data_received(data)


SEND_CAP = 16 << 20  # what the client offers at most: the head never ends
READ_BOUND = MAX_REQUEST_HEAD_BYTES + 2 * (256 << 10)  # the bound and two reads of the loop


def flood(port: int, start: bytes, piece: bytes) -> tuple[int, bytes]:
    """Send `start`, then `piece` again and again (at most SEND_CAP bytes) until the server
    answers or closes; returns the bytes sent and what the server sent back."""
    # A selector, not select.select: in a long test run the socket's descriptor may be past
    # select()'s limit of 1024.
    with (
        socket.create_connection(("127.0.0.1", port), timeout=DEADLINE_S) as sock,
        selectors.DefaultSelector() as answered,
    ):
        answered.register(sock, selectors.EVENT_READ)
        sock.sendall(start)
        sent = 0
        deadline = time.monotonic() + DEADLINE_S
        while sent < SEND_CAP and time.monotonic() < deadline:
            try:
                sock.sendall(piece)
            except OSError:
                break
            sent += len(piece)
            if answered.select(0):
                break
        return sent, read_until_closed(sock)


@pytest.mark.parametrize(
    "start",
    [
        b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: ",
        b"GET /v1/models?",
        b"GET /healthz HTTP/1.1\r\nHost: x\r\n",
    ],
    ids=["one-huge-header", "huge-url", "many-headers"],
)
def test_a_head_past_the_bound_gets_431_before_more_is_read(
    upstream: tuple[ServerThread, ScriptedUpstream], start: bytes
) -> None:
    piece = b"X-A: b\r\n" * 8192 if start.endswith(b"\r\n") else b"a" * 65536
    server = ServerThread(create_app(proxy_settings(upstream[0])))
    server.server.config.http = CountingProtocol
    CountingProtocol.received = 0
    with _started(server):
        sent, answer = flood(server.port, start, piece)
    assert CountingProtocol.received <= READ_BOUND, (CountingProtocol.received, sent)
    assert sent < SEND_CAP, "the server read a head of any size"
    if answer:  # a reset can overtake the answer; the bound above is what matters
        openai_error(answer, 431, "request_headers_too_large")


def test_endless_trailer_fields_are_cut_at_the_same_bound(
    upstream: tuple[ServerThread, ScriptedUpstream],
) -> None:
    server = ServerThread(create_app(proxy_settings(upstream[0])))
    server.server.config.http = CountingProtocol
    CountingProtocol.received = 0
    start = chunked_request(b"{}", [])[: -len(b"\r\n")] + b"X-Trailer: "
    with _started(server):
        sent, answer = flood(server.port, start, b"a" * 65536)
    assert CountingProtocol.received <= READ_BOUND, (CountingProtocol.received, sent)
    assert sent < SEND_CAP
    if answer:
        openai_error(answer, 431, "request_headers_too_large")


# -- finding 6: time and connections --------------------------------------------------------


@pytest.fixture(scope="module")
def impatient(upstream: tuple[ServerThread, ScriptedUpstream]) -> Iterator[ServerThread]:
    settings = proxy_settings(upstream[0], head_timeout=0.5, body_timeout=0.5)
    with serving(create_app(settings), timeout_keep_alive=1) as server:
        yield server


def test_a_head_that_stops_arriving_gets_408(impatient: ServerThread) -> None:
    with socket.create_connection(("127.0.0.1", impatient.port), timeout=DEADLINE_S) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        openai_error(read_until_closed(sock), 408, "request_timeout")


def test_a_body_that_stops_arriving_gets_408(impatient: ServerThread) -> None:
    with socket.create_connection(("127.0.0.1", impatient.port), timeout=DEADLINE_S) as sock:
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"
        )
        openai_error(read_until_closed(sock), 408, "request_timeout")


def test_trailers_that_stop_arriving_get_408(impatient: ServerThread) -> None:
    with socket.create_connection(("127.0.0.1", impatient.port), timeout=DEADLINE_S) as sock:
        sock.sendall(chunked_request(b"{}", [])[: -len(b"\r\n")] + b"X-Slow: a")
        openai_error(read_until_closed(sock), 408, "request_timeout")


def test_a_connection_that_never_sends_a_request_is_closed(impatient: ServerThread) -> None:
    with socket.create_connection(("127.0.0.1", impatient.port), timeout=DEADLINE_S) as sock:
        assert read_until_closed(sock) == b""


def test_a_request_in_one_read_is_served_within_tight_bounds(impatient: ServerThread) -> None:
    """No timer fires on a request that arrived whole, nor on the response's way out."""
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()
    answer = raw_exchange(impatient.port, chunked_request(body, []))
    assert status_of(answer) == 200, answer[:300]


def test_serve_applies_the_keep_alive_timeout_and_the_connection_cap() -> None:
    port = free_port()
    env = environment(
        TOOLCALL_PROXY_PORT=str(port),
        TOOLCALL_PROXY_MAX_CONNECTIONS="2",
        TOOLCALL_PROXY_KEEP_ALIVE_TIMEOUT="0.5",
    )
    command = [sys.executable, "-m", "proxy", "serve"]  # this tree's proxy, as `serve` runs it
    with process(command, port, env):
        with socket.create_connection(("127.0.0.1", port), timeout=DEADLINE_S) as idle:
            assert read_until_closed(idle) == b""  # closed by the keep-alive timeout
        request = b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        with socket.create_connection(("127.0.0.1", port), timeout=DEADLINE_S) as held:
            held.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")  # one connection held open
            assert status_of(raw_exchange(port, request)) == 503
        assert status_of(raw_exchange(port, request)) == 200


class _started:
    """A `ServerThread` built by the test (its protocol or options changed), started and
    stopped around a `with` block."""

    def __init__(self, server: ServerThread) -> None:
        self.server = server

    def __enter__(self) -> ServerThread:
        return self.server.start()

    def __exit__(self, *exc: object) -> None:
        self.server.stop()
