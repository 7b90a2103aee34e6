"""Peak RSS of a proxy holding many open streams.

OPEN_STREAMS clients each open a stream against the upstream's `bench-hold` model, which
sends the role chunk and one delta, then nothing. Once every client has read its first chunk (so the
proxy holds a client connection, an upstream connection and a stream core for each), the
proxy's VmHWM (peak resident set) is read from /proc; then the clients hang up.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass

from bench.client import chat_body, chat_request
from bench.procs import Server

OPEN_STREAMS = 1000
OPENING_AT_ONCE = 100  # connection attempts in flight, well inside the listen backlogs
OPEN_TIMEOUT_S = 60.0
SETTLE_S = 1.0  # the proxy's allocations after the last first chunk


@dataclass(frozen=True, slots=True)
class StreamsResult:
    streams: int
    opened: int
    open_s: float
    baseline_rss_mb: float
    rss_mb: float
    peak_rss_mb: float


async def _open_one(
    port: int, request: bytes, gate: asyncio.Semaphore
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
    async with gate:
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            if b" 200 " not in head.split(b"\r\n", 1)[0]:
                writer.close()
                return None
            await reader.readuntil(b"data: ")  # the first event arrived through the proxy
            return reader, writer
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            return None


async def _hold(proxy: Server, streams: int) -> StreamsResult:
    request = chat_request(proxy.port, chat_body("bench-hold", stream=True))
    baseline = proxy.rss_kb()["VmRSS"]
    gate = asyncio.Semaphore(OPENING_AT_ONCE)
    start = time.monotonic()
    opened = await asyncio.wait_for(
        asyncio.gather(*(_open_one(proxy.port, request, gate) for _ in range(streams))),
        OPEN_TIMEOUT_S,
    )
    open_s = time.monotonic() - start
    await asyncio.sleep(SETTLE_S)
    rss = proxy.rss_kb()
    for pair in opened:
        if pair is not None:
            pair[1].close()
    for pair in opened:
        if pair is not None:
            with contextlib.suppress(OSError):
                await pair[1].wait_closed()
    return StreamsResult(
        streams=streams,
        opened=sum(1 for pair in opened if pair is not None),
        open_s=open_s,
        baseline_rss_mb=baseline / 1024,
        rss_mb=rss["VmRSS"] / 1024,
        peak_rss_mb=rss["VmHWM"] / 1024,
    )


def measure(proxy: Server, streams: int = OPEN_STREAMS) -> StreamsResult:
    """`proxy` should be freshly started, so its peak RSS is this phase's."""
    return asyncio.run(_hold(proxy, streams))
