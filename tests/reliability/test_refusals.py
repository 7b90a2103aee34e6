"""A refusal reaches a client that is still sending its body (SPEC §6: 413, 401, ...).

Clients such as Python's urllib send the whole body before they read, and ask for
`Connection: close`. A server that answers early and closes with the body still arriving
makes the kernel reset the connection, and the client sees ECONNRESET or EPIPE instead of the
answer. The proxy reads and drops the rest of the body before it closes (bounded in bytes and
time: proxy.server.asgi LINGER_*), so these clients read the error.
"""

from __future__ import annotations

import json
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import httpx
import pytest

import proxy.server.asgi
from proxy.simulator import SimulatorLog
from tests.e2e.conftest import ProxyFactory
from tests.reliability.wire import error_body, keeps_serving, status_of
from tests.servers import ServerThread

CHAT = "/v1/chat/completions"
LIMIT = 1000
DEADLINE = 20.0  # seconds: every loop below stops by then


@pytest.fixture(scope="module")
def small_proxy(make_proxy: ProxyFactory) -> Iterator[ServerThread]:
    with make_proxy(settings={"max_body_bytes": LIMIT}) as server:
        yield server


def body_of(size: int) -> bytes:
    return b'{"model": "kimi", "messages": [], "pad": "' + b"x" * size + b'"}'


def urllib_post(url: str, body: bytes, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(url, data=body, headers=headers or {}, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=DEADLINE) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:  # the answer, read by the client
        return error.code, error.read()


@pytest.mark.parametrize("size", [10_000_000, 30_000_000])
def test_urllib_reads_the_413_for_a_body_far_over_the_limit(
    small_proxy: ServerThread, log: SimulatorLog, size: int
) -> None:
    # Without the lingering read, urllib fails here with "[Errno 32] Broken pipe".
    status, answer = urllib_post(small_proxy.url + CHAT, body_of(size))
    assert status == 413
    assert json.loads(answer)["error"]["code"] == "request_too_large"
    assert log.requests == []
    keeps_serving(small_proxy)


def test_urllib_reads_the_401_for_a_wrong_key_with_a_large_body(
    make_proxy: ProxyFactory, log: SimulatorLog
) -> None:
    with make_proxy(settings={"proxy_keys": ("right-key",)}) as server:
        status, answer = urllib_post(
            server.url + CHAT, body_of(10_000_000), {"Authorization": "Bearer wrong-key"}
        )
    assert status == 401
    assert json.loads(answer)["error"]["type"] == "authentication_error"
    assert log.requests == []


def test_a_keep_alive_client_gets_the_413_and_the_connection_is_closed_after_it(
    small_proxy: ServerThread,
) -> None:
    with httpx.Client(timeout=DEADLINE) as client:
        over = client.post(small_proxy.url + CHAT, content=body_of(5_000_000))
        assert over.status_code == 413
        assert error_body(over)["code"] == "request_too_large"
        assert over.headers["connection"] == "close"
        assert client.get(small_proxy.url + "/healthz").status_code == 200


def head(length: int, extra: bytes = b"") -> bytes:
    return (
        b"POST %s HTTP/1.1\r\nHost: proxy\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n%s\r\n" % (CHAT.encode(), length, extra)
    )


def read_until_closed(sock: socket.socket) -> tuple[bytes, bool]:
    """What arrived before the server closed, and whether it closed before the deadline."""
    received = b""
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            continue
        except OSError:
            return received, True  # reset: closed
        if not chunk:
            return received, True
        received += chunk
    return received, False


def test_lingering_stops_after_the_time_limit(
    small_proxy: ServerThread, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(proxy.server.asgi, "LINGER_SECONDS", 0.3)
    with socket.create_connection(("127.0.0.1", small_proxy.port), timeout=1) as sock:
        # Announce 10 MB, send a little, then nothing: the answer comes at once, and the
        # proxy gives up waiting for the rest at the time limit and closes.
        sock.sendall(head(10_000_000) + b"x" * 100)
        received, closed = read_until_closed(sock)
    assert status_of(received) == 413 and b'"request_too_large"' in received
    assert closed


def test_lingering_stops_after_the_byte_limit(
    small_proxy: ServerThread, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(proxy.server.asgi, "LINGER_MAX_BYTES", 1_000_000)
    announced = 256 * 1024 * 1024
    piece = b"x" * 65536
    sent = 0
    deadline = time.monotonic() + DEADLINE
    with socket.create_connection(("127.0.0.1", small_proxy.port), timeout=1) as sock:
        sock.sendall(head(announced))
        while sent < announced and time.monotonic() < deadline:
            try:
                sent += sock.send(piece)
            except TimeoutError:
                continue  # the proxy is not reading (yet): try again until the deadline
            except OSError:
                break  # the proxy closed: it stopped reading
    # It read about a megabyte and closed: only that and what the socket buffers held went out.
    assert sent < announced // 4


def test_a_client_waiting_for_100_continue_gets_the_refusal_instead(
    small_proxy: ServerThread, log: SimulatorLog
) -> None:
    with socket.create_connection(("127.0.0.1", small_proxy.port), timeout=1) as sock:
        sock.sendall(head(10_000_000, b"Expect: 100-continue\r\n"))
        received, closed = read_until_closed(sock)
    assert received.startswith(b"HTTP/1.1 413 ")  # no "100 Continue": the body is not wanted
    assert closed and log.requests == []
