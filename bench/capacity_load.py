"""The capacity benchmark's load generator: N concurrent paced streams, in its own process.

Each stream is one connection and one request (bench.paced_wire), started at its own offset
within one delta interval (agents are not synchronized), read with httptools; the arrival time
of every read is taken before parsing and given to each stamp completed in it. It prints one
JSON line: the delays summarized, the streams that failed (with the first few reasons), the
window it streamed in (monotonic ns) and its own CPU over that window, so the caller can tell
whether the load generator, not the server, was the bottleneck.

    python -m bench.capacity_load --port P --api chat --streams N --deltas D --rate R [--rewrites]
    python -m bench.capacity_load --serve   # one job per JSON line on stdin, one result line each
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import resource
import sys
import time
from dataclasses import asdict, dataclass

import httptools
import orjson

from bench.capacity_stats import Delays, delays_ms
from bench.paced_wire import APIS, check_reply, request_bytes, scan_stamps

GRACE_S = 20.0  # beyond a stream's paced length, before the run gives up on it
_REASONS_KEPT = 5


class _Stream(asyncio.Protocol):
    """One streamed request; its stamps as (send ns, arrival ns)."""

    def __init__(self, request: bytes) -> None:
        self.request = request
        self.parser = httptools.HttpResponseParser(self)
        self.transport: asyncio.Transport | None = None
        self.body = bytearray()
        self.scanned = 0
        self.now = 0
        self.stamps: list[tuple[int, int]] = []
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.status = 0
        self.failure: str | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        transport.write(self.request)  # type: ignore[attr-defined]

    def data_received(self, data: bytes) -> None:
        self.now = time.monotonic_ns()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._finish(f"bad HTTP: {exc}")

    def on_body(self, body: bytes) -> None:
        self.body += body
        sent, self.scanned = scan_stamps(self.body, self.scanned)
        self.stamps += [(stamp, self.now) for stamp in sent]

    def on_message_complete(self) -> None:
        self.status = self.parser.get_status_code()
        self._finish(None)

    def connection_lost(self, exc: Exception | None) -> None:
        self._finish("the connection closed mid-stream")

    def _finish(self, failure: str | None) -> None:
        if not self.done.done():
            self.failure = failure
            self.done.set_result(None)
        if self.transport is not None:
            self.transport.close()


async def _one(port: int, request: bytes, delay_s: float) -> _Stream | str:
    await asyncio.sleep(delay_s)
    loop = asyncio.get_running_loop()
    try:
        _, stream = await loop.create_connection(lambda: _Stream(request), "127.0.0.1", port)
    except OSError as exc:
        return f"connect: {exc}"
    await stream.done
    return stream


def _verdict(
    outcome: _Stream | str | BaseException, api: str, deltas: int, rewrites: bool
) -> str | None:
    if isinstance(outcome, BaseException):
        return f"{type(outcome).__name__}: {outcome}"
    if isinstance(outcome, str):
        return outcome
    if outcome.failure is not None:
        return outcome.failure
    return check_reply(
        api, outcome.status, bytes(outcome.body), deltas, len(outcome.stamps), rewrites
    )


@dataclass(frozen=True, slots=True)
class Job:
    """One run: `streams` concurrent streams of `api` against 127.0.0.1:`port`."""

    port: int
    api: str
    streams: int
    deltas: int
    rate: float
    rewrites: bool  # expect the proxy's minted ids, not the upstream's raw one


async def run(job: Job) -> dict[str, object]:
    request = request_bytes(job.api, job.port)
    interval = 1 / job.rate
    timeout = (job.deltas + 2) * interval + GRACE_S
    cpu0, start = resource.getrusage(resource.RUSAGE_SELF), time.monotonic_ns()
    tasks = [
        asyncio.ensure_future(_one(job.port, request, interval * i / job.streams))
        for i in range(job.streams)
    ]
    finished, pending = await asyncio.wait(tasks, timeout=timeout)
    end, cpu1 = time.monotonic_ns(), resource.getrusage(resource.RUSAGE_SELF)
    for task in pending:
        task.cancel()
    reasons = [f"{len(pending)} streams still open after {timeout:.0f} s"] if pending else []
    failed = len(pending)
    delays: list[float] = []
    for task in finished:
        outcome = task.exception() or task.result()
        reason = _verdict(outcome, job.api, job.deltas, job.rewrites)
        if reason is not None:
            failed += 1
            reasons.append(reason)
        if isinstance(outcome, _Stream):
            delays += delays_ms(outcome.stamps)
    cpu_s = cpu1.ru_utime + cpu1.ru_stime - cpu0.ru_utime - cpu0.ru_stime
    return {
        "delays": asdict(Delays.of(delays)),
        "errors": failed,
        "reasons": reasons[:_REASONS_KEPT],
        "start_ns": start,
        "end_ns": end,
        "cpu_pct": 100 * cpu_s / ((end - start) / 1e9),
    }


def _run_quietly(runner: asyncio.Runner, job: Job) -> bytes:
    """One job's JSON line; no garbage collection pauses inside the timed streams."""
    gc.collect()
    gc.disable()
    try:
        return orjson.dumps(runner.run(run(job))) + b"\n"
    finally:
        gc.enable()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.capacity_load", description=__doc__)
    parser.add_argument("--serve", action="store_true", help="jobs as JSON lines on stdin")
    parser.add_argument("--port", type=int)
    parser.add_argument("--api", choices=APIS, default="chat")
    parser.add_argument("--streams", type=int, default=10)
    parser.add_argument("--deltas", type=int, default=80)
    parser.add_argument("--rate", type=float, default=30.0)
    parser.add_argument("--rewrites", action="store_true", help="expect the proxy's minted ids")
    args = parser.parse_args(argv)
    if not args.serve and args.port is None:
        parser.error("--port is required without --serve")
    loop_factory = None
    with contextlib.suppress(ImportError):
        import uvloop

        loop_factory = uvloop.new_event_loop
    out = sys.stdout.buffer
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        if not args.serve:
            fields = {k: getattr(args, k) for k in Job.__dataclass_fields__}
            out.write(_run_quietly(runner, Job(**fields)))
            return 0
        # One process for every step: no interpreter start-up between them.
        for line in sys.stdin.buffer:
            out.write(_run_quietly(runner, Job(**orjson.loads(line))))
            out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
