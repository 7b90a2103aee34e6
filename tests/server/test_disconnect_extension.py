"""The lean protocol tells the app of a client that leaves through a scope extension
(`proxy.server.asgi.DISCONNECT_EXTENSION`), and the proxy's app uses it instead of holding a
`receive()` waiting beside every non-streaming request (SPEC §6, "client disconnects"); under
uvicorn's own protocol it watches with `receive()` as before. Real servers on loopback."""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from proxy.config.load import Route, Settings
from proxy.server.app import create_app
from proxy.server.asgi import DISCONNECT_EXTENSION
from proxy.simulator import SimulatorLog, create_simulator_app
from tests.logcapture import proxy_records
from tests.server.probe import Probe, connect, read_response, request
from tests.servers import ServerThread, serving, wait_for


class _Watched:
    """The proxy's app, noting whether the scope offered the extension and how often the app
    called `receive()` after the request body had ended (what a `receive()` watch does)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.offered: bool | None = None
        self.after_body = 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        self.offered = DISCONNECT_EXTENSION in scope.get("extensions", {})
        body_ended = False

        async def counted() -> Any:
            nonlocal body_ended
            if body_ended:
                self.after_body += 1
            message = await receive()
            body_ended = body_ended or not message.get("more_body", False)
            return message

        await self.app(scope, counted, send)


@pytest.fixture()
def request_lines() -> Iterator[list[logging.LogRecord]]:
    """The proxy's request log lines."""
    with proxy_records() as lines:
        yield lines


@pytest.mark.parametrize("http", ["lean", "httptools"])
def test_a_client_leaving_a_slow_non_streaming_request_cancels_it_and_is_logged(
    http: str, request_lines: list[logging.LogRecord]
) -> None:
    sim_log = SimulatorLog()
    with serving(create_simulator_app(sim_log)) as simulator:
        route = Route(name="default", upstream=simulator.url + "/v1")
        watched = _Watched(create_app(Settings(routes=(route,))))
        with serving(watched, http=http) as proxy:
            body = orjson.dumps({"model": "fault-hang+stall_s=60", "stream": False, "messages": []})
            sock = socket.create_connection(("127.0.0.1", proxy.port), timeout=10)
            try:
                sock.sendall(request("/v1/chat/completions", body))
                wait_for(lambda: len(sim_log.requests) == 1)  # the upstream holds it
            finally:
                sock.close()
            # The upstream request is cancelled at once: the simulator sees its client leave.
            wait_for(lambda: sim_log.disconnects == 1, timeout=5)
            wait_for(lambda: any(r.getMessage() == "request" for r in request_lines))
    [line] = [r for r in request_lines if r.getMessage() == "request"]
    fields = line.fields  # type: ignore[attr-defined]
    assert fields["status"] == 499
    assert fields["client_disconnected"] is True
    if http == "lean":  # told by the server: nothing waited on receive() beside the request
        assert watched.offered is True
        assert watched.after_body == 0
    else:  # uvicorn's own protocol: the receive() watch, as before
        assert watched.offered is False
        assert watched.after_body >= 1


@pytest.fixture(scope="module")
def lean() -> Iterator[tuple[ServerThread, Probe]]:
    probe = Probe()
    with serving(probe, http="lean", timeout_keep_alive=60) as server:
        yield server, probe


def _left_during(lean: tuple[ServerThread, Probe], path: str, notes: int) -> list[str]:
    """What the probe noted for a request to `path` that the client left after sending it."""
    server, probe = lean
    before = len(probe.seen)
    with connect(server) as sock:
        sock.sendall(request(path, b"{}"))
    wait_for(lambda: len(probe.seen) >= before + notes)
    return probe.seen[before:]


def test_the_callback_fires_when_the_client_leaves_mid_request(
    lean: tuple[ServerThread, Probe],
) -> None:
    assert _left_during(lean, "/on-disconnect", 1) == ["callback"]


def test_a_callback_registered_after_the_client_left_fires_at_once(
    lean: tuple[ServerThread, Probe],
) -> None:
    seen = _left_during(lean, "/register-late", 3)
    assert seen == ["http.disconnect", "callback", "registered"]


def test_a_client_leaving_after_a_complete_response_fires_nothing(
    lean: tuple[ServerThread, Probe],
) -> None:
    server, probe = lean
    before = len(probe.seen)
    with connect(server) as sock:
        sock.sendall(request("/callback-after-end", b"{}"))
        head, body = read_response(sock, bytearray())
        assert head.startswith(b"HTTP/1.1 200 ") and body == b"ok"
    wait_for(lambda: not server.server.server_state.connections)
    # One more exchange on the server's loop: the connection's loss has surely been handled.
    with connect(server) as sock:
        sock.sendall(request("/echo", b"{}"))
        assert read_response(sock, bytearray())[0].startswith(b"HTTP/1.1 200 ")
    assert probe.seen[before:] == ["answered"]
