"""A request the HTTP parser cannot read gets the OpenAI error shape (SPEC §6), not uvicorn's
plain-text `400 Invalid HTTP request received.`: the server runs with
`proxy.server.draining.OpenAIErrorHttpProtocol`, as `toolcall-proxy serve` starts it."""

from __future__ import annotations

import json
import os
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from proxy.config.load import Route, Settings
from proxy.server.app import create_app
from proxy.simulator import SimulatorLog
from tests.e2e.test_cli_serve import process
from tests.reliability.wire import keeps_serving, no_traceback, raw_exchange, status_of
from tests.servers import ServerThread, free_port

BROKEN = {
    "obs-fold": b"GET /v1/models HTTP/1.1\r\nHost: x\r\nX-A: a\r\n b\r\n\r\n",
    "bare-lf": b"GET /v1/models HTTP/1.1\r\nHost: x\r\nX-A: a\nX-B: b\r\n\r\n",
    "bare-cr": b"GET /v1/models HTTP/1.1\r\nHost: x\r\nX-A: a\rX-B: b\r\n\r\n",
    "nul": b"GET /v1/models HTTP/1.1\r\nHost: x\r\nX-A: a\x00b\r\n\r\n",
    "space-in-name": b"GET /v1/models HTTP/1.1\r\nHost: x\r\nX A: b\r\n\r\n",
    "not-http": b"HELLO THERE\r\n\r\n",
    "bad-version": b"GET /v1/models HTTP/9.Z\r\nHost: x\r\n\r\n",
    "bad-chunk": b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
    b"Transfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n",
    "two-lengths": b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
    b"Content-Length: 2\r\nContent-Length: 3\r\n\r\n{}",
}


def assert_openai_400(answer: bytes) -> None:
    assert status_of(answer) == 400, answer[:200]
    head, _, body = answer.partition(b"\r\n\r\n")
    assert b"content-type: application/json" in head.lower()
    assert b"connection: close" in head.lower()
    error = json.loads(body)["error"]
    assert set(error) == {"message", "type", "code", "param"}
    assert (error["type"], error["code"]) == ("invalid_request_error", "invalid_http_request")
    no_traceback(answer)


@pytest.fixture(scope="module")
def served(simulator: ServerThread) -> Iterator[ServerThread]:
    app = create_app(Settings(routes=(Route(name="d", upstream=simulator.url + "/v1"),)))
    server = ServerThread(app)  # on the protocol `toolcall-proxy serve` runs
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.mark.parametrize("request_bytes", list(BROKEN.values()), ids=list(BROKEN))
def test_a_broken_request_gets_the_openai_error_shape(
    served: ServerThread, log: SimulatorLog, request_bytes: bytes
) -> None:
    assert_openai_400(raw_exchange(served.port, request_bytes))
    assert log.paths == []
    keeps_serving(served)


def test_a_well_formed_request_on_the_same_connection_is_answered_first(
    served: ServerThread,
) -> None:
    # A good request, then garbage: the good one is answered, then the 400, then the close.
    good = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
    with socket.create_connection(("127.0.0.1", served.port), timeout=10) as sock:
        sock.sendall(good)
        first = sock.recv(65536)
        sock.sendall(BROKEN["not-http"])
        rest = b""
        while chunk := sock.recv(65536):
            rest += chunk
    assert status_of(first) == 200
    assert_openai_400(rest)


def test_the_serve_command_answers_a_broken_head_in_the_openai_shape() -> None:
    port = free_port()
    env = {**os.environ, "TOOLCALL_PROXY_PORT": str(port)}
    command = [str(Path(sys.executable).parent / "toolcall-proxy"), "serve"]
    with process(command, port, env):
        assert_openai_400(raw_exchange(port, BROKEN["bare-lf"]))
