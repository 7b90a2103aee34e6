"""A finished request leaves no reference cycle behind: everything it made is freed when its
last reference goes, not by Python's cycle collector, whose runs cost about 16K instructions
a request (bench.serverprocess) when a request's objects held each other. Counted with the
collector off, over real requests on keep-alive connections through the protocol
`toolcall-proxy serve` runs (uvicorn's httptools protocol): uvicorn's request cycle and the
proxy's request log line."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest
from uvicorn.protocols.http.httptools_impl import RequestResponseCycle

from proxy.ops.observability import RequestLog
from tests.servers import ServerThread

REQUESTS = 30
# Each connection (the client's to the proxy and the proxy's to the simulator behind it, both
# servers in this process) holds its last request's cycle until its next one replaces it; a
# reference cycle per request would leave one per request.
AT_MOST_ALIVE = 4


@contextmanager
def collector_off() -> Iterator[None]:
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def alive(kind: type) -> int:
    return sum(1 for thing in gc.get_objects() if type(thing) is kind)


@pytest.mark.parametrize("stream", [False, True])
def test_requests_leave_nothing_for_the_cycle_collector(proxy: ServerThread, stream: bool) -> None:
    body = {
        "model": "reference+rounds=0",
        "messages": [{"role": "user", "content": "hi"}],
        "stream": stream,
    }
    with httpx.Client(base_url=proxy.url, timeout=10) as client:
        assert client.post("/v1/chat/completions", json=body).status_code == 200  # warm-up
        with collector_off():
            for _ in range(REQUESTS):
                response = client.post("/v1/chat/completions", json=body)
                assert response.status_code == 200
            exchanges, logs = alive(RequestResponseCycle), alive(RequestLog)
    assert exchanges <= AT_MOST_ALIVE
    assert logs <= AT_MOST_ALIVE
