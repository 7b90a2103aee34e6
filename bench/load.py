"""Requests per second at N connections: `wrk` when installed, else an asyncio client.

Both send the same chat request (the small non-streaming one unless another body is given)
over keep-alive connections for a fixed time and count complete 2xx responses.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import httptools
import orjson

from bench.client import chat_body, chat_request

WRK_GRACE_S = 15.0  # wrk gets this long beyond its duration before it is killed

# wrk's summary in one parseable line (latencies are in microseconds).
_WRK_SCRIPT = """\
wrk.method = "POST"
wrk.body = {body}
wrk.headers["Content-Type"] = "application/json"
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    "BENCH requests=%d duration_us=%d errors=%d status=%d p50_us=%d p99_us=%d\\n",
    summary.requests, summary.duration, e.connect + e.read + e.write + e.timeout, e.status,
    latency:percentile(50), latency:percentile(99)))
end
"""
_WRK_LINE = re.compile(rb"BENCH " + rb" ".join(rb"(\w+)=(\d+)" for _ in range(6)))


@dataclass(frozen=True, slots=True)
class LoadResult:
    tool: str
    connections: int
    rps: float
    requests: int
    errors: int
    p50_ms: float
    p99_ms: float


def have_wrk() -> bool:
    return shutil.which("wrk") is not None


def run(
    port: int,
    connections: int,
    duration_s: float,
    work_dir: Path,
    body: dict[str, object] | None = None,
) -> LoadResult:
    payload = body if body is not None else chat_body("bench-small", stream=False)
    if have_wrk():
        return _wrk(port, connections, duration_s, work_dir, payload)
    return asyncio.run(_asyncio_load(port, connections, duration_s, payload))


def _wrk(
    port: int, connections: int, duration_s: float, work_dir: Path, payload: dict[str, object]
) -> LoadResult:
    body = orjson.dumps(payload).decode()
    if "]=]" in body:
        raise ValueError("the body would end wrk's Lua long string early")
    script = work_dir / "wrk_post.lua"
    # A Lua long string of level 1 needs no escaping while the body holds no "]=]".
    script.write_text(_WRK_SCRIPT.format(body=f"[=[{body}]=]"), encoding="utf-8")
    argv = [
        "wrk",
        "-t1",  # one thread: this machine has two cores, and the servers need them
        f"-c{connections}",
        f"-d{duration_s:g}s",
        "--timeout",
        "5s",
        "-s",
        str(script),
        f"http://127.0.0.1:{port}/v1/chat/completions",
    ]
    done = subprocess.run(argv, capture_output=True, timeout=duration_s + WRK_GRACE_S, check=False)
    match = _WRK_LINE.search(done.stdout)
    if done.returncode != 0 or match is None:
        raise RuntimeError(f"wrk failed ({done.returncode}): {done.stdout!r} {done.stderr!r}")
    values = {match.group(i).decode(): int(match.group(i + 1)) for i in range(1, 13, 2)}
    good = values["requests"] - values["status"]
    return LoadResult(
        tool="wrk",
        connections=connections,
        rps=good / (values["duration_us"] / 1e6),
        requests=values["requests"],
        errors=values["errors"] + values["status"],
        p50_ms=values["p50_us"] / 1000,
        p99_ms=values["p99_us"] / 1000,
    )


class _LoadConnection(asyncio.Protocol):
    """Sends the request again as soon as the previous response completed."""

    def __init__(self, request: bytes, deadline: float, done: asyncio.Future[None]) -> None:
        self.request = request
        self.deadline = deadline
        self.done = done
        self.parser = httptools.HttpResponseParser(self)
        self.transport: asyncio.Transport | None = None
        self.ok = 0
        self.errors = 0
        self.latencies: list[float] = []
        self.sent_at = 0.0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self._send()

    def _send(self) -> None:
        assert self.transport is not None
        self.sent_at = time.monotonic()
        self.transport.write(self.request)

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            self.errors += 1
            self._finish()

    def on_message_complete(self) -> None:
        now = time.monotonic()
        self.latencies.append(now - self.sent_at)
        if 200 <= self.parser.get_status_code() < 300:
            self.ok += 1
        else:
            self.errors += 1
        if now < self.deadline:
            self._send()
        else:
            self._finish()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.errors += 1
            self.done.set_result(None)

    def _finish(self) -> None:
        if not self.done.done():
            self.done.set_result(None)
        if self.transport is not None:
            self.transport.close()


async def _asyncio_load(
    port: int, connections: int, duration_s: float, payload: dict[str, object]
) -> LoadResult:
    loop = asyncio.get_running_loop()
    request = chat_request(port, payload)
    start = time.monotonic()
    deadline = start + duration_s
    conns: list[_LoadConnection] = []
    for _ in range(connections):
        done: asyncio.Future[None] = loop.create_future()
        _, conn = await loop.create_connection(
            lambda done=done: _LoadConnection(request, deadline, done),  # type: ignore[misc]
            "127.0.0.1",
            port,
        )
        conns.append(conn)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(asyncio.gather(*(c.done for c in conns)), duration_s + WRK_GRACE_S)
    elapsed = time.monotonic() - start
    latencies = sorted(x for c in conns for x in c.latencies)
    ok = sum(c.ok for c in conns)
    for conn in conns:
        if conn.transport is not None:
            conn.transport.close()
    return LoadResult(
        tool="asyncio",
        connections=connections,
        rps=ok / elapsed,
        requests=len(latencies),
        errors=sum(c.errors for c in conns),
        p50_ms=latencies[len(latencies) // 2] * 1000 if latencies else 0.0,
        p99_ms=latencies[int(len(latencies) * 0.99)] * 1000 if latencies else 0.0,
    )
