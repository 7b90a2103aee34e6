"""A client that leaves a slow non-streaming request (SPEC §6, "client disconnects"): on the
server `toolcall-proxy serve` runs, uvicorn's `receive()` is what tells the app, and the app
cancels the upstream request at once and logs the request as 499, client disconnected. Real
servers on loopback."""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from proxy.config.load import Route, Settings
from proxy.server.app import create_app
from proxy.simulator import SimulatorLog, create_simulator_app
from tests.logcapture import proxy_records
from tests.server.probe import request
from tests.servers import serving, wait_for


class _Watched:
    """The proxy's app, counting the `receive()` calls it makes after the request body has
    ended (what its disconnect watch makes)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.after_body = 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
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


def test_a_client_leaving_a_slow_non_streaming_request_cancels_it_and_is_logged(
    request_lines: list[logging.LogRecord],
) -> None:
    sim_log = SimulatorLog()
    with serving(create_simulator_app(sim_log)) as simulator:
        route = Route(name="default", upstream=simulator.url + "/v1")
        watched = _Watched(create_app(Settings(routes=(route,))))
        with serving(watched) as proxy:
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
    assert watched.after_body >= 1  # told by a receive() waiting beside the request
