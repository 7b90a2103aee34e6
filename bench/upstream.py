"""A canned OpenAI-compatible upstream for the benchmark: raw asyncio + httptools, one process.

Everything it can send is serialized at start-up, so serving a request costs one parse and
one write: the upstream must never be the bottleneck being measured. The request body picks
the response (by substring, no JSON parsing):

- no `"stream":true`: a small `chat.completion` (SMALL_COMPLETION);
- a stream for model `bench-fast`: FAST_CHUNKS content deltas, written in one go;
- a stream for model `bench-kimi`: what agents get from a Kimi-like upstream whose call
  counter restarts every response: FAST_CHUNKS content deltas, then one tool call streamed as
  Kimi's servers stream it (a header with the id `functions.bash:0`, which the request's
  history already answered under that upstream id, then argument fragments) and the
  `tool_calls` finish, written in one go (TOOLCALL_RESPONSE);
- a stream for model `bench-paced`: PACED_CHUNKS deltas, one every PACED_INTERVAL_S, each
  carrying its send time (`t<CLOCK_MONOTONIC ns>`) so the client can tell how late it arrived;
- a stream for model `bench-hold`: the role chunk and one content delta, then nothing until
  HOLD_S passed or the connection closed (open streams for the memory measurement).

Run it as `python -m bench.upstream --port P`; it prints `ready` once it listens.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
import time
from collections.abc import Callable
from typing import cast

import httptools
import orjson

FAST_CHUNKS = 200
PACED_CHUNKS = 64
PACED_INTERVAL_S = 0.020
HOLD_S = 120.0  # a held stream ends by itself after this, so nothing waits forever
BACKLOG = 4096  # the memory phase opens 1,000 connections in bursts

_ENVELOPE = {
    "id": "chatcmpl-bench0000000000000000000000",
    "object": "chat.completion.chunk",
    "created": 1700000000,
    "model": "bench",
    "system_fingerprint": "fp_bench",
}


def sse_event(delta: dict[str, object], finish: str | None = None) -> bytes:
    """One `data:` event of a chat.completion.chunk with one choice (the benchmark's shape)."""
    choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
    return b"data: " + orjson.dumps({**_ENVELOPE, "choices": [choice]}) + b"\n\n"


def _http_chunk(data: bytes) -> bytes:
    return b"%x\r\n%b\r\n" % (len(data), data)


ROLE = sse_event({"role": "assistant", "content": ""})
FINISH = sse_event({}, "stop") + b"data: [DONE]\n\n"
SMALL_COMPLETION = orjson.dumps(
    {
        "id": "chatcmpl-bench0000000000000000000000",
        "object": "chat.completion",
        "created": 1700000000,
        "model": "bench",
        "system_fingerprint": "fp_bench",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "Hello! How can I help you today?"},
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 9, "completion_tokens": 9, "total_tokens": 18},
    }
)
JSON_RESPONSE = (
    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%b"
    % (len(SMALL_COMPLETION), SMALL_COMPLETION)
)
SSE_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n"
    b"transfer-encoding: chunked\r\n\r\n"
)
END = b"0\r\n\r\n"
FAST_RESPONSE = (
    SSE_HEAD
    + _http_chunk(ROLE)
    + b"".join(_http_chunk(sse_event({"content": f"word{n} "})) for n in range(FAST_CHUNKS))
    + _http_chunk(FINISH)
    + END
)
# The Kimi-like stream's call: the id its history answered (`functions.bash:0`, SPEC §3's kimi
# dialect numbers the history's first call so) with other arguments, so the proxy rewrites the
# id (SPEC §2) after holding the call until its arguments are complete (it might be a replay).
TOOLCALL_ID = "functions.bash:0"
TOOLCALL_ARGUMENTS = ('{"command": ', '"ls -la ', "src/proxy", '"}')
TOOLCALL_EVENTS = (
    sse_event(
        {
            "tool_calls": [
                {
                    "index": 0,
                    "id": TOOLCALL_ID,
                    "type": "function",
                    "function": {"name": "bash", "arguments": ""},
                }
            ]
        }
    ),
    *(
        sse_event({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]})
        for piece in TOOLCALL_ARGUMENTS
    ),
    sse_event({}, "tool_calls") + b"data: [DONE]\n\n",
)
TOOLCALL_RESPONSE = (
    SSE_HEAD
    + _http_chunk(ROLE)
    + b"".join(_http_chunk(sse_event({"content": f"word{n} "})) for n in range(FAST_CHUNKS))
    + b"".join(_http_chunk(event) for event in TOOLCALL_EVENTS)
    + END
)
# A held stream's one delta: the proxy holds a role-only first chunk until the first output
# that shows something (SPEC §5), so a stream of only that would never begin.
HOLD_DELTA = _http_chunk(sse_event({"content": "held"}))
_MARK = b"\x00stamp\x00"
_PACED_BEFORE, _PACED_AFTER = sse_event({"content": _MARK.decode()}).split(
    orjson.dumps(_MARK.decode())
)


def paced_chunk(stamp_ns: int) -> bytes:
    """One paced delta whose content is `t<send time in ns>`."""
    return _http_chunk(_PACED_BEFORE + b'"t%d"' % stamp_ns + _PACED_AFTER)


class _Connection(asyncio.Protocol):
    __slots__ = ("_body", "_busy", "_handles", "_loop", "_parser", "_transport")

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._parser = httptools.HttpRequestParser(self)
        self._transport: asyncio.Transport | None = None
        self._body: list[bytes] = []
        self._handles: list[asyncio.TimerHandle] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def connection_lost(self, exc: Exception | None) -> None:
        for handle in self._handles:
            handle.cancel()
        self._handles.clear()
        self._transport = None

    def data_received(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError:
            if self._transport is not None:
                self._transport.close()

    # httptools callbacks
    def on_message_begin(self) -> None:
        self._body.clear()

    def on_body(self, body: bytes) -> None:
        self._body.append(body)

    def on_message_complete(self) -> None:
        transport = self._transport
        if transport is None:
            return
        body = b"".join(self._body)
        # find(), not `in`: CPython 3.11's `bytes in bytes` first tries the needle as an int
        # and formats the TypeError it gets (about 1,200 instructions each): the benchmark's
        # own upstream would count in the proxy's instructions per request.
        if body.find(b'"stream":true') < 0 and body.find(b'"stream": true') < 0:
            transport.write(JSON_RESPONSE)
        elif body.find(b"bench-paced") >= 0:
            self._paced(transport)
            return
        elif body.find(b"bench-kimi") >= 0:
            transport.write(TOOLCALL_RESPONSE)
        elif body.find(b"bench-hold") >= 0:
            transport.write(SSE_HEAD + _http_chunk(ROLE) + HOLD_DELTA)
            self._handles.append(self._loop.call_later(HOLD_S, self._finish, transport))
            return
        else:
            transport.write(FAST_RESPONSE)
        if not self._parser.should_keep_alive():
            transport.close()

    def _paced(self, transport: asyncio.Transport) -> None:
        transport.write(SSE_HEAD + _http_chunk(ROLE))
        start = self._loop.time()
        for n in range(1, PACED_CHUNKS + 1):
            # Absolute times, so one late timer does not push the rest back.
            self._handles.append(
                self._loop.call_at(start + n * PACED_INTERVAL_S, self._paced_delta, transport)
            )
        self._handles.append(
            self._loop.call_at(
                start + PACED_CHUNKS * PACED_INTERVAL_S + 0.001, self._finish, transport
            )
        )

    def _paced_delta(self, transport: asyncio.Transport) -> None:
        if not transport.is_closing():
            transport.write(paced_chunk(time.monotonic_ns()))

    def _finish(self, transport: asyncio.Transport) -> None:
        self._handles.clear()
        if not transport.is_closing():
            transport.write(_http_chunk(FINISH) + END)
            if not self._parser.should_keep_alive():
                transport.close()


async def serve(
    host: str, port: int, protocol: Callable[[], asyncio.Protocol] | None = None
) -> None:
    """Serve `protocol` (this module's canned upstream by default) until SIGTERM or SIGINT."""
    loop = asyncio.get_running_loop()
    server = await loop.create_server(protocol or _Connection, host, port, backlog=BACKLOG)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print("ready", flush=True)
    async with server:
        await stop.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.upstream")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    run_server(args.host, args.port)
    return 0


def run_server(
    host: str, port: int, protocol: Callable[[], asyncio.Protocol] | None = None
) -> None:
    """`serve` on uvloop where it is installed (as the proxy runs), else asyncio's loop."""
    loop_factory = None
    with contextlib.suppress(ImportError):
        import uvloop

        loop_factory = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        runner.run(serve(host, port, protocol))


if __name__ == "__main__":
    sys.exit(main())
