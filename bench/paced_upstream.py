"""A paced upstream for the capacity benchmark: every API the proxy carries, one process.

Each request gets a stream shaped like a model's (bench.paced_wire): its head at once, then
one stamped text delta every 1/rate seconds (on absolute times from the request's arrival,
so one late timer does not push the rest back), then the tail with a Kimi-style tool call.
The request's path picks the API (`/v1/chat/completions`, `/v1/messages`, `/v1/responses`);
no body is parsed. Like bench.upstream (whose framing it reuses) it is raw asyncio +
httptools, so it stays cheap next to the proxy it feeds.

    python -m bench.paced_upstream --port P [--deltas 80] [--rate 30]

It prints `ready` once it listens.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from typing import cast

import httptools

from bench.paced_wire import PATHS, SCRIPTS, Script, stamp_text
from bench.upstream import END, SSE_HEAD, _http_chunk, run_server

DEFAULT_DELTAS = 80
DEFAULT_RATE = 30.0
_API_OF_PATH = {path.encode(): api for api, path in PATHS.items()}


class _Stream:
    """One paced response on `transport`: a timer per delta, the next set when one fires."""

    __slots__ = ("_handle", "_loop", "_script", "_sent", "_stamps", "_start", "_transport")

    def __init__(self, transport: asyncio.Transport, script: Script) -> None:
        self._loop = asyncio.get_running_loop()
        self._transport = transport
        self._script = script
        self._sent = 0
        self._stamps: list[int] = []
        self._start = self._loop.time()
        transport.write(SSE_HEAD + _http_chunk(script.head))
        self._handle: asyncio.TimerHandle | None = self._loop.call_at(
            self._start + _Settings.interval_s, self._tick
        )

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _tick(self) -> None:
        transport = self._transport
        if transport.is_closing():
            self._handle = None
            return
        script = self._script
        if self._sent == _Settings.deltas:
            text = "".join(stamp_text(s) for s in self._stamps)
            seq = script.first_seq + self._sent
            transport.write(_http_chunk(script.tail(text, seq)) + END)
            self._handle = None
            return
        stamp = time.monotonic_ns()
        transport.write(_http_chunk(script.delta(stamp, script.first_seq + self._sent)))
        self._stamps.append(stamp)
        self._sent += 1
        # The tail goes out one interval after the last delta, as a model's would.
        self._handle = self._loop.call_at(
            self._start + (self._sent + 1) * _Settings.interval_s, self._tick
        )


class _Settings:
    """The stream's shape for this process (set once from the command line)."""

    deltas = DEFAULT_DELTAS
    interval_s = 1 / DEFAULT_RATE


class _Connection(asyncio.Protocol):
    __slots__ = ("_parser", "_path", "_stream", "_transport")

    def __init__(self) -> None:
        self._parser = httptools.HttpRequestParser(self)
        self._transport: asyncio.Transport | None = None
        self._path = b""
        self._stream: _Stream | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def connection_lost(self, exc: Exception | None) -> None:
        if self._stream is not None:
            self._stream.cancel()
        self._transport = None

    def data_received(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError:
            if self._transport is not None:
                self._transport.close()

    # httptools callbacks
    def on_url(self, url: bytes) -> None:
        self._path = url

    def on_message_complete(self) -> None:
        transport = self._transport
        if transport is None:
            return
        api = _API_OF_PATH.get(self._path)
        if api is None:
            transport.write(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n")
            return
        if self._stream is not None:
            self._stream.cancel()
        self._stream = _Stream(transport, SCRIPTS[api])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.paced_upstream", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--deltas", type=int, default=DEFAULT_DELTAS)
    parser.add_argument("--rate", type=float, default=DEFAULT_RATE, help="deltas per second")
    args = parser.parse_args(argv)
    _Settings.deltas = args.deltas
    _Settings.interval_s = 1 / args.rate
    run_server(args.host, args.port, _Connection)
    return 0


if __name__ == "__main__":
    sys.exit(main())
