"""The proxy's cost per request in one process, for profilers and instruction counts.

The app (as `create_app` builds it) and the benchmark upstream (`bench.upstream.serve`) run on
one uvloop loop, and requests are made by calling the ASGI app with an in-memory receive and
send: no uvicorn, no client, so what is measured is the app, the httpx client, the transport
and the upstream's small share, one request at a time. Logging is configured as `serve`
configures it (the JSON request line at the default level, info), written to /dev/null.

    python -m bench.inprocess [KIND] [--requests N]      CPU us per request (process time)
    python -m bench.inprocess [KIND] --profile           cProfile of N requests, top 30
    python -m bench.inprocess [KIND] --instructions      instructions per request
    python -m bench.inprocess [KIND] --floor ...          the same without the proxy
    python -m bench.inprocess [KIND] --inspect on ...     with the inspector on (SPEC §12;
                                                          `content`: --inspect-content on too;
                                                          `watched`: a page open on its feed)
    python -m bench.inprocess [KIND] --trace ...          with traces on (SPEC §12; spans batched
                                                          and encoded as OTLP, not sent)

KIND is nothing (a small non-streaming request), `--stream` (200 content deltas) or
`--stream-toolcall` (200 content deltas, then a Kimi-style tool call whose id the proxy
rewrites, as agents get from a Kimi-like upstream: bench.upstream's `bench-kimi`).

The app watches for a client leaving with a waiting `receive()`, as under uvicorn: here
`receive()` waits on an asyncio.Event the response's end sets (no client leaves).

`--instructions` runs this module twice under `valgrind --tool=callgrind` (at N and 3N
requests, after the same warm-up) and prints the difference per request. Unlike time on a
shared machine, the count repeats to within about 0.1%, so it can tell a change of a few
percent apart; it counts instructions, not their cost (a memchr over 16 KiB is few).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import logging
import os
import pstats
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from typing import Any, cast

import orjson
import uvloop

from bench.client import toolcall_body
from bench.upstream import TOOLCALL_ID, serve
from proxy.config.load import Route, Settings
from proxy.ops.observability import LOGGER, configure_logging
from proxy.server.app import create_app
from proxy.upstream.transport import HttptoolsTransport, RawResponse, request_head
from tests.servers import free_port

WARMUP = 200


KINDS = {
    "small": "non-streaming request",
    "stream": "200-chunk stream",
    "toolcall": "200-chunk stream ending in a tool call",
}


def _body(kind: str) -> bytes:
    if kind == "toolcall":
        return orjson.dumps(toolcall_body())
    stream = kind == "stream"
    model = "bench-fast" if stream else "bench-small"
    return b'{"model":"%s","stream":%s,"messages":[{"role":"user","content":"Say hello."}]}' % (
        model.encode(),
        b"true" if stream else b"false",
    )


def _request(
    app: Any, body: bytes, sink: list[bytes] | None = None
) -> Callable[[], Awaitable[None]]:
    """One request to the app; what it answers is kept in `sink` when one is given."""
    scope: dict[str, Any] = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/v1/chat/completions",
        "raw_path": b"/v1/chat/completions",
        "root_path": "",
        "query_string": b"",
        "headers": [
            (b"host", b"127.0.0.1"),
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
        ],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8787),
    }

    async def one() -> None:
        messages = [{"type": "http.request", "body": body, "more_body": False}]
        done = asyncio.Event()

        async def receive() -> dict[str, Any]:
            if messages:
                return messages.pop()
            await done.wait()
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            if sink is not None:
                sink.append(message.get("body", b""))
            if message["type"] == "http.response.body" and not message.get("more_body"):
                done.set()

        await app(scope, receive, send)
        if not done.is_set():
            raise RuntimeError("the app returned without ending its response")

    return one


async def _run(
    kind: str,
    requests: int,
    profile: bool,
    floor: bool = False,
    inspect: str = "off",
    trace: bool = False,
) -> float:
    port = free_port()
    upstream = asyncio.create_task(serve("127.0.0.1", port))
    for _ in range(200):  # until the upstream listens (bounded: 2 s)
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            await asyncio.sleep(0.01)
            continue
        writer.close()
        break
    if floor:
        return await _measure(_floor_request(port, _body(kind)), requests, profile, upstream)
    route = Route(name="bench", upstream=f"http://127.0.0.1:{port}/v1")
    settings = Settings(
        routes=(route,),
        inspect="off" if inspect == "off" else "on",
        inspect_content=inspect == "content",
    )
    configure_logging(settings.log_level)  # as `serve` does: one JSON line per request
    # Line-buffered, as Python opens stderr (where `serve` logs) unless told otherwise.
    with open(os.devnull, "w", buffering=1) as sink:
        for handler in LOGGER.handlers:
            cast(logging.StreamHandler[Any], handler).setStream(sink)
        app = create_app(settings)
        if inspect == "watched":  # a page open on the feed: every exchange summarized at its end
            cast(Any, app).inspector.subscribe()
        if trace:
            inner = cast(Any, app)
            inner.tracer = inner.exchanges.report.tracer = _tracer()
        await _check(app, kind)
        one = _request(app, _body(kind))
        return await _measure(one, requests, profile, upstream)


def _tracer() -> Any:
    """Traces as `serve` sends them (the OTLP exporter's batch processor, on its thread), the
    batches encoded as the OTLP/HTTP exporter encodes them and dropped: the proxy's and the
    SDK's share, without a collector's."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    from proxy.ops.otel import OtelTracer

    class Encoded(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            encode_spans(cast(list[ReadableSpan], spans)).SerializeToString()
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Encoded()))
    return OtelTracer(provider)


def _floor_request(port: int, body: bytes) -> Callable[[], Awaitable[None]]:
    """The same request without the proxy: its bytes sent by the proxy's own transport,
    prebuilt, and the answer read to its end. What every count above includes besides the
    app (the event loop, the benchmark upstream, the sockets) is about this much."""
    transport = HttptoolsTransport()
    head = request_head(
        "POST",
        b"/v1/chat/completions",
        [
            (b"host", b"127.0.0.1:%d" % port),
            (b"content-type", b"application/json"),
            (b"content-length", b"%d" % len(body)),
        ],
    )
    key = ("http", "127.0.0.1", port)

    async def one() -> None:
        raw = await transport.pool.send_head(
            key, head, body, connect_timeout=None, read_timeout=None, answer=RawResponse
        )
        async for _ in raw.stream:
            pass
        await raw.stream.aclose()

    return one


async def _measure(
    one: Callable[[], Awaitable[None]], requests: int, profile: bool, upstream: asyncio.Task[None]
) -> float:
    try:
        for _ in range(WARMUP):
            await one()
        profiler = cProfile.Profile() if profile else None
        start = time.process_time()
        if profiler is not None:
            profiler.enable()
        for _ in range(requests):
            await one()
        if profiler is not None:
            profiler.disable()
            pstats.Stats(profiler).sort_stats("tottime").print_stats(30)
        return (time.process_time() - start) / requests * 1e6
    finally:
        upstream.cancel()


async def _check(app: Any, kind: str) -> None:
    """A benchmark that times errors measures nothing: the answer is the expected one."""
    sink: list[bytes] = []
    await _request(app, _body(kind), sink)()
    answer = b"".join(sink)
    expected = {
        "small": b'"finish_reason":"stop"',
        "stream": b"word199 ",
        "toolcall": b'"finish_reason":"tool_calls"',
    }[kind]
    if expected not in answer or (kind == "toolcall" and TOOLCALL_ID.encode() in answer):
        raise RuntimeError(f"unexpected answer to the {KINDS[kind]}: {answer[-400:]!r}")


def _instructions(
    kind: str, requests: int, floor: bool = False, inspect: str = "off", trace: bool = False
) -> int:
    """Instructions per request: callgrind totals at N and 3N requests, differenced."""
    flags = [] if kind == "small" else ["--stream" if kind == "stream" else "--stream-toolcall"]
    flags += ["--floor"] if floor else []
    flags += ["--inspect", inspect]
    flags += ["--trace"] if trace else []
    return per_unit(lambda n: ["bench.inprocess", "--requests", str(n), *flags], requests)


def per_unit(module_argv: Callable[[int], list[str]], count: int) -> int:
    """Instructions per unit of work: `python -m <module_argv(n)>` doing n units (after the
    same warm-up) counted under callgrind at n = count and 3 * count, differenced."""
    totals = []
    for units in (count, 3 * count):
        with tempfile.TemporaryDirectory() as work:
            argv = [
                "valgrind",
                "--tool=callgrind",
                f"--callgrind-out-file={work}/callgrind.out",
                sys.executable,
                "-m",
                *module_argv(units),
            ]
            env = {**os.environ, "PYTHONHASHSEED": "0"}
            done = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
            if done.returncode != 0:
                raise RuntimeError(f"{' '.join(argv)} failed:\n{done.stderr[-3000:]}")
        match = re.search(r"Collected : (\d+)", done.stderr)
        if match is None:
            raise RuntimeError("callgrind printed no total:\n" + done.stderr[-2000:])
        totals.append(int(match.group(1)))
    return (totals[1] - totals[0]) // (2 * count)


def add_kind_flags(parser: argparse.ArgumentParser) -> None:
    """`--stream` or `--stream-toolcall` (nothing: the small request); see `kind_of`."""
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--stream", action="store_true", help="the 200-chunk stream")
    what.add_argument(
        "--stream-toolcall",
        action="store_true",
        help="the 200-chunk stream that ends in a Kimi-style tool call",
    )


def kind_of(args: argparse.Namespace) -> str:
    return "toolcall" if args.stream_toolcall else "stream" if args.stream else "small"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.inprocess", description=__doc__)
    add_kind_flags(parser)
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument(
        "--floor",
        action="store_true",
        help="no proxy: the same request by the proxy's transport, straight to the upstream",
    )
    parser.add_argument(
        "--inspect",
        choices=("off", "on", "content", "watched"),
        default="off",
        help="the inspector (SPEC §12): off, on, on with content, or on with a page watching",
    )
    parser.add_argument(
        "--trace", action="store_true", help="traces on (SPEC §12): spans encoded, not sent"
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--profile", action="store_true", help="cProfile, top 30 by own time")
    mode.add_argument("--instructions", action="store_true", help="callgrind, per request")
    args = parser.parse_args(argv)
    kind = kind_of(args)
    what = f"{KINDS[kind]}{' without the proxy (--floor)' if args.floor else ''}"
    what += f" (inspector {args.inspect})" if args.inspect != "off" else ""
    what += " (traces on)" if args.trace else ""
    if args.instructions:
        count = _instructions(kind, min(args.requests, 100), args.floor, args.inspect, args.trace)
        print(f"instructions per {what}: {count:,}")
        return 0
    cpu_us = uvloop.run(
        _run(kind, args.requests, args.profile, args.floor, args.inspect, args.trace)
    )
    print(f"CPU per {what}: {cpu_us:.0f} us (app, client, transport and upstream)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
