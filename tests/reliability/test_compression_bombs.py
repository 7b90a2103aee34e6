"""SPEC §6, compression bombs from the upstream (issue #52, finding 7): 512 KiB of gzip took the
proxy's RSS to 2.1 GiB, about 1 MiB streamed took 3.6 GiB and 130 s of CPU. A body whose
decoded size passes MAX_DECODED_BYTES (proxy/upstream/decoding.py) is the client's
`upstream_error` as the bytes arrive: a 502 in the surface's shape for a whole body, the
surface's `upstream_stream_error` ending for a stream; counted among the upstream errors, no
traceback logged, the proxy's memory growth bounded, and it keeps serving.

The proxy, the upstream and the client all run in this process (tests/servers.py: threads), so
the process's peak RSS (VmHWM, reset before each bomb) bounds what the proxy took.
"""

from __future__ import annotations

import gzip
import struct
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from proxy.upstream import decoding
from proxy.upstream.decoding import MAX_DECODED_BYTES
from tests.e2e.conftest import ProxyFactory
from tests.reliability.test_hostile_upstream import (
    ANTHROPIC_HEADERS,
    SURFACES,
    counted_as_upstream_error,
    log_records,
    no_traceback_logged,
    stream_error,
    surface_error,
)
from tests.reliability.upstreams import completion_body
from tests.reliability.wire import metric, no_traceback
from tests.servers import serving, wait_for

MIB = 1024 * 1024
# What the proxy may take above its resting RSS for one bomb: the bound's bytes held once a
# whole body is joined (a stream's core holds at most what it was fed), twice for the copy
# that joins them, and room for the allocator and the test's own client. Without the bound the
# 1 GiB bombs below took well over 1 GiB.
RSS_GROWTH_LIMIT = 3 * MAX_DECODED_BYTES + 64 * MIB
CPU_LIMIT_S = 15.0  # the whole exchange, upstream and client included


def gzip_bomb(mebibytes: int, unit: bytes = bytes(MIB)) -> Iterator[bytes]:
    """`mebibytes` copies of `unit` (1 MiB of zeros) as one well-formed gzip member (about 1 KiB per MiB), made as it
    is sent: after a full flush the compressor starts afresh, so every MiB after the first
    compresses to the same bytes. Its trailer is right (the CRC of all the zeros, reckoned as
    the pieces go out): httpx's decoder inflated such a body whole and handed it on."""
    packer = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)  # raw: the framing is ours
    first = packer.compress(unit) + packer.flush(zlib.Z_FULL_FLUSH)
    again = packer.compress(unit) + packer.flush(zlib.Z_FULL_FLUSH)
    yield b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff" + first  # RFC 1952 header, no name
    crc = zlib.crc32(unit)
    for _ in range(mebibytes - 1):
        crc = zlib.crc32(unit, crc)
        yield again
    yield packer.flush() + struct.pack("<II", crc, (mebibytes * len(unit)) & 0xFFFFFFFF)


# What a bomb's MiB holds, by the model asked for: one endless line of zeros; empty lines
# (each ends an event that holds nothing); events the proxy forwards.
EVENT = b'data: {"id":"c","object":"chat.completion.chunk","choices":[]}\n\n'
UNITS = {
    "zeros": bytes(MIB),
    "blank-lines": b"\n" * MIB,
    "events": EVENT * (MIB // len(EVENT)),
}


class BombUpstream:
    """Answers a request for one of UNITS' models with `mebibytes` of its unit, gzipped (a
    JSON or an event-stream content type, as the request streams or not), 64 pieces of
    compressed bytes per write; any other chat request with a gzipped completion, and a GET
    with a list."""

    def __init__(self, mebibytes: int) -> None:
        self.mebibytes = mebibytes
        self.bombs = 0

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        request = orjson.loads(body) if body else {}
        stream = request.get("stream") is True
        kind = b"text/event-stream" if stream else b"application/json"
        headers = [(b"content-type", kind), (b"content-encoding", b"gzip")]
        unit = UNITS.get(request.get("model", ""))
        if unit is None:
            answer = completion_body("fine") if body else b'{"object":"list","data":[]}'
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send({"type": "http.response.body", "body": gzip.compress(answer)})
            return
        self.bombs += 1
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        pieces: list[bytes] = []
        for piece in gzip_bomb(self.mebibytes, unit):
            pieces.append(piece)
            if len(pieces) == 64:
                await send(
                    {"type": "http.response.body", "body": b"".join(pieces), "more_body": True}
                )
                pieces = []
        await send({"type": "http.response.body", "body": b"".join(pieces)})


def _rss_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} in /proc/self/status")


class PeakRss:
    """This process's peak RSS over a block, above its RSS at the start (Linux: writing 5 to
    clear_refs resets the peak, VmHWM)."""

    def __enter__(self) -> PeakRss:
        Path("/proc/self/clear_refs").write_text("5")
        self.start = _rss_kib("VmRSS")
        self.cpu = time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.growth = (_rss_kib("VmHWM") - self.start) * 1024
        self.cpu = time.process_time() - self.cpu


def post(url: str, path: str, *, stream: bool, model: str) -> httpx.Response:
    body = {**SURFACES[path], "model": model, "stream": stream}
    return httpx.post(url + path, json=body, headers=ANTHROPIC_HEADERS, timeout=60)


@pytest.fixture(scope="module")
def bombed(make_proxy: ProxyFactory) -> Iterator[tuple[str, BombUpstream, Any]]:
    """One proxy in front of a 1 GiB bomb (1 MiB of gzip), for every test here."""
    upstream = BombUpstream(1024)
    with serving(upstream) as server, make_proxy(upstream=server.url + "/v1") as proxy:
        yield proxy.url, upstream, proxy


# A stream of blank lines or of events costs the stream core its work per line, as the same
# bytes uncompressed would (about 0.3 us per blank line: 64 MiB of them took 17 s of CPU), so
# those run against a lower bound; the zeros, which cost the core nothing per byte, against the
# real one, to measure its memory.
LOW_BOUND = 4 * MIB


@pytest.mark.parametrize(
    ("stream", "unit", "bound"),
    [
        (False, "zeros", MAX_DECODED_BYTES),
        (True, "zeros", MAX_DECODED_BYTES),
        (True, "blank-lines", LOW_BOUND),
        (True, "events", LOW_BOUND),
    ],
    ids=["json", "stream-zeros", "stream-blank-lines", "stream-events"],
)
@pytest.mark.parametrize("path", list(SURFACES))
def test_a_gzip_bomb_is_an_upstream_error_within_bounded_memory(
    bombed: tuple[str, BombUpstream, Any],
    monkeypatch: pytest.MonkeyPatch,
    path: str,
    stream: bool,
    unit: str,
    bound: int,
) -> None:
    monkeypatch.setattr(decoding, "MAX_DECODED_BYTES", bound)
    url, upstream, proxy = bombed
    before = upstream.bombs
    with log_records() as records, PeakRss() as peak:
        response = post(url, path, stream=stream, model=unit)
    assert upstream.bombs == before + 1
    no_traceback(response.content)
    if stream:
        assert response.status_code == 200, response.text
        error = stream_error(path, response.content)
        assert error.get("code") in (None, "upstream_stream_error")
    else:
        assert response.status_code == 502, response.text
        error = surface_error(path, response)
        assert error["type"] == "upstream_error"
        assert error["code"] in (None, "upstream_stream_error")
    assert str(bound) in error["message"], error
    counted_as_upstream_error(proxy, "upstream_stream_error", "200" if stream else "502")
    no_traceback_logged(records)
    print(f"{path} {unit} stream={stream}: RSS +{peak.growth / MIB:.0f} MiB, CPU {peak.cpu:.2f} s")
    assert peak.growth < RSS_GROWTH_LIMIT, f"RSS grew by {peak.growth / MIB:.0f} MiB"
    assert peak.cpu < CPU_LIMIT_S, f"{peak.cpu:.1f} s of CPU"
    # It keeps serving, a compressed answer that decodes included.
    fine = post(url, "/v1/chat/completions", stream=False, model="fine")
    assert fine.status_code == 200, fine.text
    assert fine.json()["choices"][0]["message"]["content"] == "fine"


def test_a_client_that_leaves_during_a_bomb_is_seen_at_once(
    bombed: tuple[str, BombUpstream, Any],
) -> None:
    """The decoder lets the event loop run between its pieces, so the app's watch for the
    client's disconnect runs too (it was seen 11 s late): the request ends as a 499 a moment
    after the client left, not once the stream core has worked through the body's 64 MiB of
    blank lines (about 17 s of CPU)."""
    url, upstream, proxy = bombed
    left_before = metric(proxy, "toolcall_proxy_requests_total", status="499")
    bombs = upstream.bombs
    body = {**SURFACES["/v1/chat/completions"], "model": "blank-lines", "stream": True}
    with pytest.raises(httpx.ReadTimeout):  # nothing comes back while the core works
        httpx.post(url + "/v1/chat/completions", json=body, timeout=httpx.Timeout(10, read=1))
    left = time.monotonic()  # the client closed its connection
    assert upstream.bombs == bombs + 1
    wait_for(
        lambda: metric(proxy, "toolcall_proxy_requests_total", status="499") > left_before,
        timeout=30,
        interval=0.05,
    )
    assert time.monotonic() - left < 2.0, f"seen {time.monotonic() - left:.1f} s late"
