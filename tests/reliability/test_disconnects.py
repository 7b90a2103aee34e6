"""SPEC §6, "client disconnects": the upstream request is cancelled at once and nothing leaks.

Each test runs against a simulator of its own, so the connections its uvicorn server holds
open (`server_state.connections`) are this proxy's alone: the honest view of the proxy's
upstream pool from the outside, whatever transport the proxy uses. A disconnected request's
upstream connection must be closed (never returned to the pool half-read); a completed one
may stay open as one idle keep-alive connection.
"""

from __future__ import annotations

import socket

import httpx
import orjson
import pytest

from proxy.simulator import SimulatorLog
from tests.e2e.conftest import ProxyFactory
from tests.reliability.wire import keeps_serving, metric
from tests.servers import ServerThread, wait_for

CYCLES = 3


def _open_connections(simulator: ServerThread) -> int:
    return len(simulator.server.server_state.connections)


def _request(body: dict[str, object]) -> bytes:
    raw = orjson.dumps(body)
    return (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: proxy\r\n"
        b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(raw), raw)
    )


@pytest.mark.parametrize(
    ("model", "stream", "read_first"),
    [
        ("fault-stall+stall_s=60", True, True),  # stalled mid-stream
        ("paced+delay_ms=100", True, True),  # streaming steadily
        ("fault-hang+stall_s=60", True, False),  # no response head yet
        ("fault-hang+stall_s=60", False, False),  # non-streaming, waiting for the body
    ],
    ids=["stalled-stream", "paced-stream", "before-head", "non-stream"],
)
def test_client_disconnect_cancels_the_upstream_request_and_leaks_nothing(
    make_proxy: ProxyFactory,
    own_simulator: tuple[ServerThread, SimulatorLog],
    model: str,
    stream: bool,
    read_first: bool,
) -> None:
    simulator, log = own_simulator
    with make_proxy(upstream=simulator.url + "/v1") as proxy:
        for cycle in range(CYCLES):
            disconnects, requests = log.disconnects, len(log.requests)
            sock = socket.create_connection(("127.0.0.1", proxy.port), timeout=10)
            try:
                sock.sendall(_request({"model": model, "stream": stream, "messages": []}))
                if read_first:
                    assert sock.recv(65536).startswith(b"HTTP/1.1 200")
                    wait_for(lambda: metric(proxy, "toolcall_proxy_active_streams") == 1)
                wait_for(lambda n=requests + 1: len(log.requests) == n)
                assert _open_connections(simulator) == 1
            finally:
                sock.close()
            # The upstream side closes at once: its response sees the disconnect ...
            wait_for(lambda n=disconnects + 1: log.disconnects == n, timeout=5)
            # ... and the connection is gone, not parked in the proxy's pool.
            wait_for(lambda: _open_connections(simulator) == 0, timeout=5)
            assert metric(proxy, "toolcall_proxy_active_streams") == 0
            assert log.completed_streams == 0
            assert metric(
                proxy, "toolcall_proxy_requests_total", status="499", stream=str(stream).lower()
            ) == (cycle + 1)
        # Still serving, and a completed request leaves at most one idle keep-alive connection.
        keeps_serving(proxy)
        assert _open_connections(simulator) <= 1


def test_disconnect_during_many_streams_cancels_only_that_one(
    make_proxy: ProxyFactory, own_simulator: tuple[ServerThread, SimulatorLog]
) -> None:
    simulator, log = own_simulator
    with make_proxy(upstream=simulator.url + "/v1") as proxy, httpx.Client(timeout=30) as client:
        body = {"model": "paced+chunks=40+delay_ms=25", "stream": True, "messages": []}
        with client.stream("POST", proxy.url + "/v1/chat/completions", json=body) as survivor:
            sock = socket.create_connection(("127.0.0.1", proxy.port), timeout=10)
            sock.sendall(
                _request({"model": "fault-stall+stall_s=60", "stream": True, "messages": []})
            )
            wait_for(lambda: len(log.requests) == 2)
            sock.close()
            wait_for(lambda: log.disconnects == 1, timeout=5)
            raw = survivor.read()
        assert raw.endswith(b"data: [DONE]\n\n") and raw.count(b"word") == 40
        wait_for(lambda: log.completed_streams == 1)
        assert log.disconnects == 1
        wait_for(lambda: metric(proxy, "toolcall_proxy_active_streams") == 0)
