"""The server's HTTP/1.1 protocol, over real sockets on loopback: uvicorn's httptools protocol
as `toolcall-proxy serve` runs it (`OpenAIErrorHttpProtocol`), in what the proxy's app relies
on (SPEC §6: client disconnects told by `receive()`, limits, keep-alive and pipelining,
100-continue, HTTP/1.0, chunked bodies, flow control, response heads checked)."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator

import pytest

from tests.server.probe import (
    FLOOD_CHUNK,
    FLOOD_CHUNKS,
    Probe,
    connect,
    header_value,
    read_response,
    read_to_close,
    request,
)
from tests.servers import ServerThread, serving, wait_for


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[ServerThread, Probe]]:
    probe = Probe()
    # Idle connections stay open past every wait below: what a test sees is never the
    # keep-alive timeout closing the connection.
    with serving(probe, timeout_keep_alive=60) as server:
        yield server, probe


def echo(sock: socket.socket, buffered: bytearray) -> dict[str, object]:
    head, body = read_response(sock, buffered)
    assert head.startswith(b"HTTP/1.1 200 "), head
    return json.loads(body)  # type: ignore[no-any-return]


def answer_to(server: ServerThread, path: str) -> bytes:
    """All the server sends for one request to `path` until it closes the connection."""
    with connect(server) as sock:
        sock.sendall(request(path))
        return read_to_close(sock)


def test_keep_alive_and_pipelined_requests_are_answered_in_order(
    served: tuple[ServerThread, Probe],
) -> None:
    server, _ = served
    with connect(server) as sock:
        buffered = bytearray()
        sock.sendall(request("/echo", b"first"))
        assert echo(sock, buffered)["body_head"] == "first"
        # three at once: each waits for the answer before it
        sock.sendall(b"".join(request("/echo", b"%d" % n) for n in range(3)))
        assert [echo(sock, buffered)["body_head"] for _ in range(3)] == ["0", "1", "2"]


def test_the_path_and_query_reach_the_app_as_asgi_says(served: tuple[ServerThread, Probe]) -> None:
    server, _ = served
    with connect(server) as sock:
        buffered = bytearray()
        sock.sendall(request("/echo?a=1&b=%20"))
        first = echo(sock, buffered)
        sock.sendall(request("/ec%68o"))
        second = echo(sock, buffered)
        sock.sendall(request("http://x/echo?q"))  # absolute form
        third = echo(sock, buffered)
    assert (first["path"], first["raw_path"], first["query"]) == ("/echo", "/echo", "a=1&b=%20")
    assert (second["path"], second["raw_path"], second["query"]) == ("/echo", "/ec%68o", "")
    assert (third["path"], third["query"]) == ("/echo", "q")
    assert first["method"] == "POST" and first["http_version"] == "1.1"


def test_http_1_0_is_answered_and_closed(served: tuple[ServerThread, Probe]) -> None:
    server, _ = served
    with connect(server) as sock:
        sock.sendall(b"GET /echo HTTP/1.0\r\n\r\n")
        answer = read_to_close(sock)
    head, _, body = answer.partition(b"\r\n\r\n")
    assert header_value(head, b"connection") == b"close"
    assert json.loads(body)["http_version"] == "1.0"


def test_a_chunked_request_body_arriving_in_pieces_is_read_whole(
    served: tuple[ServerThread, Probe],
) -> None:
    server, _ = served
    with connect(server) as sock:
        sock.sendall(b"POST /echo HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n")
        for piece in (b"5\r\nhello\r\n", b"6\r\n world\r\n", b"0\r\n\r\n"):
            sock.sendall(piece)
        answer = echo(sock, bytearray())
    assert (answer["length"], answer["body_head"]) == (11, "hello world")


def test_a_large_body_is_read_whole_through_paused_reading(
    served: tuple[ServerThread, Probe],
) -> None:
    server, _ = served
    body = bytes(range(256)) * 8192  # 2 MiB: reading pauses past 64 KiB held
    with connect(server) as sock:
        sock.sendall(request("/echo", body))
        assert echo(sock, bytearray())["length"] == len(body)


def test_expect_100_continue_gets_its_interim_answer_before_the_body(
    served: tuple[ServerThread, Probe],
) -> None:
    server, _ = served
    with connect(server) as sock:
        sock.sendall(
            b"POST /echo HTTP/1.1\r\nhost: x\r\ncontent-length: 4\r\nexpect: 100-continue\r\n\r\n"
        )
        buffered = bytearray()
        while b"\r\n\r\n" not in buffered:
            more = sock.recv(65536)
            assert more
            buffered += more
        assert bytes(buffered) == b"HTTP/1.1 100 Continue\r\n\r\n"
        buffered.clear()
        sock.sendall(b"body")
        assert echo(sock, buffered)["body_head"] == "body"


def test_a_head_request_gets_no_body_and_the_connection_goes_on(
    served: tuple[ServerThread, Probe],
) -> None:
    server, _ = served
    with connect(server) as sock:
        sock.sendall(request("/echo", method="HEAD") + request("/echo", b"next"))
        buffered = bytearray()
        while buffered.count(b"\r\n\r\n") < 2:
            buffered += sock.recv(65536)
        head_end = buffered.index(b"\r\n\r\n") + 4
        assert header_value(bytes(buffered[:head_end]), b"content-length") is not None
        assert bytes(buffered[head_end:]).startswith(b"HTTP/1.1 200 ")  # no body in between
        del buffered[:head_end]
        assert echo(sock, buffered)["body_head"] == "next"


@pytest.mark.parametrize("path", ["/wait-disconnect", "/stream-then-wait"])
def test_a_client_that_leaves_is_noticed_by_receive(
    served: tuple[ServerThread, Probe], path: str
) -> None:
    server, probe = served
    before = len(probe.seen)
    with connect(server) as sock:
        sock.sendall(request(path, b"{}"))
        if path == "/stream-then-wait":
            assert sock.recv(65536).startswith(b"HTTP/1.1 200 ")
    wait_for(lambda: len(probe.seen) > before)
    assert probe.seen[before:] == ["http.disconnect"]


def test_receive_answers_disconnect_once_the_response_has_ended(
    served: tuple[ServerThread, Probe],
) -> None:
    server, probe = served
    before = len(probe.seen)
    with connect(server) as sock:
        sock.sendall(request("/pending-at-end"))
        read_response(sock, bytearray())
        wait_for(lambda: len(probe.seen) >= before + 2)  # while the client is still connected
    assert probe.seen[before:] == ["http.disconnect", "http.disconnect"]


def test_a_stream_head_is_not_held_back_while_its_body_waits(
    served: tuple[ServerThread, Probe],
) -> None:
    server, probe = served
    with connect(server) as sock:
        sock.sendall(request("/hold"))
        buffered = b""
        while b"\r\n\r\n" not in buffered:  # arrives although no body byte has been sent
            more = sock.recv(65536)
            assert more
            buffered += more
        assert buffered.startswith(b"HTTP/1.1 200 ") and b"transfer-encoding: chunked" in buffered
        assert server.loop is not None and probe.go is not None
        server.loop.call_soon_threadsafe(probe.go.set)
        rest = buffered.split(b"\r\n\r\n", 1)[1]
        while not rest.endswith(b"0\r\n\r\n"):
            rest += sock.recv(65536)
    assert rest == b"9\r\ndata: 1\n\n\r\n0\r\n\r\n"


def test_a_header_value_that_would_inject_a_line_never_reaches_the_wire(
    served: tuple[ServerThread, Probe],
) -> None:
    assert b"x-injected" not in answer_to(served[0], "/bad-header")


def test_an_app_that_fails_before_its_response_gets_a_500(
    served: tuple[ServerThread, Probe],
) -> None:
    answer = answer_to(served[0], "/boom")
    assert answer.startswith(b"HTTP/1.1 500 ") and answer.endswith(b"Internal Server Error")


def test_a_client_that_does_not_read_holds_the_app_back(served: tuple[ServerThread, Probe]) -> None:
    server, probe = served
    probe.flood_sent, probe.flood_done = 0, False
    with connect(server) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        sock.sendall(request("/flood"))
        # The transport asks the protocol to stop writing; the app's send() must then wait.
        wait_for(lambda: any(c.flow.write_paused for c in server.server.server_state.connections))
        assert not probe.flood_done
        assert probe.flood_sent < FLOOD_CHUNK * FLOOD_CHUNKS
        _, body = read_response(sock, bytearray())
    assert len(body) == FLOOD_CHUNK * FLOOD_CHUNKS
    wait_for(lambda: probe.flood_done)


def test_an_idle_keep_alive_connection_is_closed_after_the_timeout() -> None:
    with serving(Probe(), timeout_keep_alive=1) as server, connect(server) as sock:
        buffered = bytearray()
        for _ in range(2):  # the timer survives a second request on the connection
            sock.sendall(request("/echo"))
            echo(sock, buffered)
        assert read_to_close(sock) == b""


def test_past_the_concurrency_limit_the_answer_is_503() -> None:
    with serving(Probe(), limit_concurrency=1) as server:
        answer = answer_to(server, "/echo")
    assert answer.startswith(b"HTTP/1.1 503 ") and answer.endswith(b"Service Unavailable")
