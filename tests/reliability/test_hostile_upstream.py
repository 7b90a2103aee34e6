"""SPEC §6, an upstream that answers what the proxy cannot pass on: a body whose
content-encoding does not decode (from its first byte, or part way through a stream), and a
status outside 200-599 (999, 600, 099, 000) or a 101. Each is a defined answer, end to end
through the real proxy on loopback: a 502 `upstream_error` in the surface's error shape before
any byte went out, the in-stream error event after; counted among the upstream errors, never
as a client that left (499), no traceback in the log; and the proxy keeps serving.
"""

from __future__ import annotations

import gzip
import logging
import threading
import time
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import orjson
import pytest

from proxy.ops.observability import LOGGER
from tests.e2e.conftest import ProxyFactory
from tests.reliability.upstreams import (
    JSON_HEADERS,
    SSE_HEADERS,
    Script,
    raw_upstream,
    scripted,
    sse_body,
)
from tests.reliability.wire import (
    chat,
    data_events,
    error_body,
    error_event,
    metric,
    no_traceback,
)
from tests.servers import ServerThread

BOTH = pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
ANTHROPIC_HEADERS = {"anthropic-version": "2023-06-01"}
# Not gzip at all: the decoder fails on the first byte it reads.
GARBAGE = b"\x00\x01 this is not gzip \xff\xfe" * 4
# The repaired surfaces and the body of a request to each.
SURFACES: dict[str, dict[str, Any]] = {
    "/v1/chat/completions": {"model": "m", "messages": [{"role": "user", "content": "hi"}]},
    "/v1/messages": {
        "model": "m",
        "max_tokens": 16,
        "messages": [{"role": "user", "content": "hi"}],
    },
    "/v1/responses": {"model": "m", "input": "hi"},
}


@contextmanager
def log_records() -> Iterator[list[logging.LogRecord]]:
    """Every record the proxy and uvicorn (which logs an app's exception) log meanwhile."""
    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.DEBUG)
    handler.emit = records.append  # type: ignore[method-assign,assignment]
    watched = [LOGGER, logging.getLogger("uvicorn.error"), logging.getLogger("uvicorn")]
    levels = [logger.level for logger in watched]
    for logger in watched:
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
    try:
        yield records
    finally:
        for logger, level in zip(watched, levels, strict=True):
            logger.removeHandler(handler)
            logger.setLevel(level)


def no_traceback_logged(records: list[logging.LogRecord]) -> None:
    for record in records:
        assert record.exc_info is None, f"a traceback was logged: {record.getMessage()}"
        assert "Traceback" not in record.getMessage()


def post(server: ServerThread, path: str, *, stream: bool) -> httpx.Response:
    body = {**SURFACES[path], "stream": stream}
    return httpx.post(server.url + path, json=body, headers=ANTHROPIC_HEADERS, timeout=30)


def surface_error(path: str, response: httpx.Response) -> dict[str, Any]:
    """The error of a response answered before any byte, in its surface's shape."""
    if path == "/v1/messages":
        body = response.json()
        assert body["type"] == "error" and set(body["error"]) == {"type", "message"}, body
        return {**body["error"], "code": None}  # type: ignore[no-any-return]
    return error_body(response)


def counted_as_upstream_error(server: ServerThread, kind: str, status: str) -> None:
    """In `toolcall_proxy_upstream_errors_total`, and never counted as a client that left.
    The request is counted once its handler ended, a moment after the client has its answer."""
    assert metric(server, "toolcall_proxy_upstream_errors_total", kind=kind) >= 1
    deadline = time.monotonic() + 10
    while not metric(server, "toolcall_proxy_requests_total", status=status):
        assert time.monotonic() < deadline, f"the request was never counted as {status}"
    assert metric(server, "toolcall_proxy_requests_total", status="499") == 0
    assert metric(server, "toolcall_proxy_requests_total", status="500") == 0


def stream_error(path: str, raw: bytes) -> dict[str, Any]:
    """The error that ends a stream of this surface (its own event)."""
    no_traceback(raw)
    if path == "/v1/chat/completions":
        return error_event(raw)
    events = [orjson.loads(data) for data in data_events(raw) if data.startswith(b"{")]
    last = events[-1]
    if path == "/v1/messages":
        assert last["type"] == "error", last
        return {**last["error"], "code": None}  # type: ignore[no-any-return]
    assert last["type"] == "response.failed", last
    return {**last["response"]["error"], "type": "upstream_error"}  # type: ignore[no-any-return]


# -- a body that cannot be decoded ------------------------------------------------------------


def _undecodable(path: str, stream: bool, encoding: bytes = b"gzip") -> Script:
    kind = SSE_HEADERS if stream else JSON_HEADERS
    return Script(headers=(*kind, (b"content-encoding", encoding)), pieces=(GARBAGE,))


@BOTH
@pytest.mark.parametrize("path", list(SURFACES))
def test_a_body_that_does_not_decode_is_an_upstream_error(
    make_proxy: ProxyFactory, path: str, stream: bool
) -> None:
    """Without streaming nothing went out yet: a 502 in the surface's shape. A stream's head
    leaves with its first bytes (SPEC §5), so its first read failing ends it with the surface's
    in-stream error, as a connection reset there does."""
    with (
        log_records() as records,
        scripted({path: _undecodable(path, stream)}) as (upstream, _),
        make_proxy(upstream=upstream.url + "/v1") as proxy,
    ):
        response = post(proxy, path, stream=stream)
        no_traceback(response.content)
        if stream:
            assert response.status_code == 200
            error = stream_error(path, response.content)
            assert error.get("code") in (None, "upstream_stream_error")
        else:
            assert response.status_code == 502, response.text
            error = surface_error(path, response)
            assert error["type"] == "upstream_error"
            assert error["code"] in (None, "upstream_stream_error")
        assert "decode" in error["message"]
        counted_as_upstream_error(proxy, "upstream_stream_error", "200" if stream else "502")
    no_traceback_logged(records)


@BOTH
def test_a_content_encoding_the_proxy_cannot_decode_is_an_upstream_error(
    make_proxy: ProxyFactory, stream: bool
) -> None:
    """The proxy asks for `identity`; an upstream that answers in an encoding it has no decoder
    for must not reach the client as undecoded bytes without their content-encoding."""
    path = "/v1/chat/completions"
    script = _undecodable(path, stream, encoding=b"compress")
    with (
        log_records() as records,
        scripted({path: script}) as (upstream, _),
        make_proxy(upstream=upstream.url + "/v1") as proxy,
    ):
        response = post(proxy, path, stream=stream)
        if stream:
            assert response.status_code == 200
            error = error_event(response.content)
        else:
            assert response.status_code == 502, response.text
            error = error_body(response)
        assert (error["type"], error["code"]) == ("upstream_error", "upstream_stream_error")
        assert "compress" in error["message"]
        counted_as_upstream_error(proxy, "upstream_stream_error", "200" if stream else "502")
    no_traceback_logged(records)


def test_a_stream_that_stops_decoding_part_way_ends_with_the_error_event(
    make_proxy: ProxyFactory,
) -> None:
    """The events that decoded reach the client; then the in-stream error, no `[DONE]`."""
    events = sse_body("before the garbage")
    packer = zlib.compressobj(wbits=31)  # gzip framing
    first = packer.compress(events[:-14]) + packer.flush(zlib.Z_SYNC_FLUSH)  # all but [DONE]
    gate = threading.Semaphore(0)
    script = Script(
        headers=(*SSE_HEADERS, (b"content-encoding", b"gzip")),
        pieces=(first, GARBAGE),
        gate=gate,
    )
    path = "/v1/chat/completions"
    body = {**SURFACES[path], "stream": True}
    with (
        log_records() as records,
        scripted({path: script}) as (upstream, _),
        make_proxy(upstream=upstream.url + "/v1") as proxy,
        httpx.stream("POST", proxy.url + path, json=body, timeout=30) as response,
    ):
        received = b""
        pieces = response.iter_raw()
        while b"before the garbage" not in received:  # the decoded part arrived first
            received += next(pieces)
        gate.release()  # only now may the garbage go out
        received += b"".join(pieces)
        assert response.status_code == 200
        assert b"before the garbage" in received
        error = error_event(received)
        assert (error["type"], error["code"]) == ("upstream_error", "upstream_stream_error")
        counted_as_upstream_error(proxy, "upstream_stream_error", "200")
        keeps_serving_scripted(proxy)
    no_traceback_logged(records)


def keeps_serving_scripted(proxy: ServerThread) -> None:
    """A scripted upstream answers /models whatever the test scripted for chat."""
    listing = httpx.get(proxy.url + "/v1/models", timeout=10)
    assert listing.status_code == 200 and listing.json()["object"] == "list"


def test_an_undecodable_error_answer_over_a_bridge_is_a_502(make_proxy: ProxyFactory) -> None:
    """A bridged route puts an upstream's error answer in the client's shape (SPEC §9), which
    means reading it decoded: one that does not decode is the bridge's 502, not a 500."""
    script = Script(
        status=400,
        headers=(*JSON_HEADERS, (b"content-encoding", b"gzip")),
        pieces=(GARBAGE,),
    )
    with (
        log_records() as records,
        scripted({"/v1/chat/completions": script}) as (upstream, _),
        make_proxy(upstream=upstream.url + "/v1", upstream_api="chat_completions") as proxy,
    ):
        response = post(proxy, "/v1/messages", stream=False)
        assert response.status_code == 502, response.text
        error = surface_error("/v1/messages", response)
        assert error["type"] == "upstream_error" and "decode" in error["message"]
        counted_as_upstream_error(proxy, "upstream_stream_error", "502")
    no_traceback_logged(records)


def test_a_passthrough_body_is_relayed_undecoded_even_when_it_would_not_decode(
    make_proxy: ProxyFactory,
) -> None:
    """Passthrough never decodes (SPEC §1): the bytes and their content-encoding go to the
    client as they came, which is where a decoder would fail, not in the proxy."""
    script = Script(headers=(*JSON_HEADERS, (b"content-encoding", b"gzip")), pieces=(GARBAGE,))
    with (
        log_records() as records,
        scripted({"/v1/models": script}) as (upstream, _),
        make_proxy(upstream=upstream.url + "/v1") as proxy,
        httpx.stream("GET", proxy.url + "/v1/models", timeout=10) as response,
    ):
        raw = b"".join(response.iter_raw())
        assert response.status_code == 200
        assert response.headers["content-encoding"] == "gzip"
        assert raw == GARBAGE
    no_traceback_logged(records)


def test_a_compressed_body_that_decodes_still_does(make_proxy: ProxyFactory) -> None:
    """The checks above leave a well-formed compressed answer alone."""
    path = "/v1/chat/completions"
    packed = gzip.compress(sse_body("fine"))
    script = Script(headers=(*SSE_HEADERS, (b"content-encoding", b"gzip")), pieces=(packed,))
    with (
        scripted({path: script}) as (upstream, _),
        make_proxy(upstream=upstream.url + "/v1") as proxy,
    ):
        response = post(proxy, path, stream=True)
    assert response.status_code == 200
    assert data_events(response.content)[-1] == b"[DONE]"


# -- a status the proxy cannot pass on ----------------------------------------------------------

BAD_STATUSES = {
    "999": b"HTTP/1.1 999 Nine\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}",
    "600": b"HTTP/1.1 600 Six\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}",
    "099": b"HTTP/1.1 099 Low\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}",
    "000": b"HTTP/1.1 000 Zero\r\ncontent-type: application/json\r\ncontent-length: 0\r\n\r\n",
    "101": b"HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: upgrade\r\n\r\n",
}
# Where a client meets it: each repaired surface, streaming or not, and passthrough.
CALLS = [
    ("POST", "/v1/chat/completions", False),
    ("POST", "/v1/chat/completions", True),
    ("POST", "/v1/messages", True),
    ("POST", "/v1/responses", False),
    ("GET", "/v1/models", False),
]


@pytest.mark.parametrize("status", list(BAD_STATUSES))
@pytest.mark.parametrize(
    ("method", "path", "stream"),
    CALLS,
    ids=[f"{m} {p} {'stream' if s else ''}" for m, p, s in CALLS],
)
def test_a_status_outside_200_to_599_is_a_502_naming_it(
    make_proxy: ProxyFactory, status: str, method: str, path: str, stream: bool
) -> None:
    with (
        log_records() as records,
        raw_upstream(BAD_STATUSES[status]) as upstream,
        make_proxy(upstream=upstream.url + "/v1") as proxy,
    ):
        for _ in range(2):  # the same answer every time: the proxy keeps serving
            if method == "GET":
                response = httpx.get(proxy.url + path, timeout=30)
            else:
                response = post(proxy, path, stream=stream)
            no_traceback(response.content)
            assert response.status_code == 502, response.content[:200]
            error = surface_error(path, response)
            assert error["type"] == "upstream_error"
            assert error["code"] in (None, "upstream_error")
            assert f"status {status}" in error["message"], error
        counted_as_upstream_error(proxy, "upstream_error", "502")
        assert upstream.requests == 2
    no_traceback_logged(records)


def test_an_interim_head_then_nothing_is_a_502(make_proxy: ProxyFactory) -> None:
    """A 1xx is only ever interim to the proxy: one that no final head follows is a 502."""
    answer = b"HTTP/1.1 103 Early Hints\r\nlink: </x>; rel=preload\r\n\r\n"
    with (
        log_records() as records,
        raw_upstream(answer) as upstream,
        make_proxy(upstream=upstream.url + "/v1") as proxy,
    ):
        response = chat(proxy, "m", stream=False)
        assert response.status_code == 502
        assert error_body(response)["type"] == "upstream_error"
    no_traceback_logged(records)
