"""Latency phases at one connection: each request goes direct, then through the proxy, so
both sides see the same moment of this (shared, noisy) machine.

Every reply is checked: a benchmark that times errors measures nothing.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from bench.client import Connection, Reply, chat_body, chat_request, toolcall_body
from bench.upstream import FAST_CHUNKS, PACED_CHUNKS, TOOLCALL_ID

STREAM_EVENTS = FAST_CHUNKS + 3  # role chunk, the deltas, the finish chunk, [DONE]


@contextmanager
def _no_gc() -> Iterator[None]:
    """The client's garbage collector must not pause inside a timed request."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


class Pair:
    """A keep-alive connection to the upstream and one to the proxy."""

    def __init__(self, upstream_port: int, proxy_port: int) -> None:
        self.direct = Connection(upstream_port)
        self.proxy = Connection(proxy_port)

    def requests(self, model: str, *, stream: bool) -> tuple[bytes, bytes]:
        return self.requests_for(chat_body(model, stream=stream))

    def requests_for(self, body: dict[str, object]) -> tuple[bytes, bytes]:
        return chat_request(self.direct.port, body), chat_request(self.proxy.port, body)

    def close(self) -> None:
        self.direct.close()
        self.proxy.close()


def _check(reply: Reply, side: str, events: int | None = None) -> Reply:
    if reply.status != 200:
        raise RuntimeError(f"{side}: HTTP {reply.status}: {bytes(reply.body[:300])!r}")
    if events is not None and (
        reply.events() != events or not reply.body.endswith(b"data: [DONE]\n\n")
    ):
        raise RuntimeError(
            f"{side}: expected {events} events ending in [DONE], got {reply.events()}"
        )
    return reply


@dataclass(slots=True)
class Samples:
    direct: list[float] = field(default_factory=list)
    proxy: list[float] = field(default_factory=list)


def non_streaming(pair: Pair, count: int, warmup: int) -> Samples:
    direct_req, proxy_req = pair.requests("bench-small", stream=False)
    samples = Samples()
    with _no_gc():
        for n in range(warmup + count):
            d = _check(pair.direct.send(direct_req), "direct")
            p = _check(pair.proxy.send(proxy_req), "proxy")
            if n >= warmup:
                samples.direct.append(d.total_ms)
                samples.proxy.append(p.total_ms)
    return samples


@dataclass(slots=True)
class StreamSamples:
    first_byte: Samples = field(default_factory=Samples)
    last_byte: Samples = field(default_factory=Samples)


def _streams(
    pair: Pair,
    requests: tuple[bytes, bytes],
    count: int,
    warmup: int,
    check: Callable[[Reply, str], Reply],
) -> StreamSamples:
    direct_req, proxy_req = requests
    samples = StreamSamples()
    with _no_gc():
        for n in range(warmup + count):
            d = check(pair.direct.send(direct_req), "direct")
            p = check(pair.proxy.send(proxy_req), "proxy")
            if n >= warmup:
                samples.first_byte.direct.append(d.first_byte_ms)
                samples.first_byte.proxy.append(p.first_byte_ms)
                samples.last_byte.direct.append(d.total_ms)
                samples.last_byte.proxy.append(p.total_ms)
    return samples


def fast_streams(pair: Pair, count: int, warmup: int) -> StreamSamples:
    """200 content deltas."""
    requests = pair.requests("bench-fast", stream=True)
    return _streams(
        pair, requests, count, warmup, lambda reply, side: _check(reply, side, STREAM_EVENTS)
    )


def check_toolcall(reply: Reply, side: str, rewrites: bool) -> Reply:
    """The Kimi-like stream: all of it arrived with its finish, and where `rewrites` (through
    the proxy) with the call's id rewritten (SPEC §2)."""
    _check(reply, side)
    body = bytes(reply.body)
    complete = reply.events() >= FAST_CHUNKS + 3 and body.endswith(b"data: [DONE]\n\n")
    rewritten = TOOLCALL_ID.encode() not in body and b'"id":"call_' in body
    if not complete or b'"finish_reason":"tool_calls"' not in body:
        raise RuntimeError(f"{side}: the tool-call stream arrived incomplete")
    if rewrites and not rewritten:
        raise RuntimeError(f"{side}: the tool call's id was not rewritten")
    return reply


def toolcall_streams(
    pair: Pair, count: int, warmup: int, *, rewrites: bool = True
) -> StreamSamples:
    """200 content deltas, then a Kimi-style call whose id the proxy must rewrite (`rewrites`:
    the candidate is the proxy, not a reference that relays bytes)."""

    def check(reply: Reply, side: str) -> Reply:
        return check_toolcall(reply, side, rewrites and side == "proxy")

    return _streams(pair, pair.requests_for(toolcall_body()), count, warmup, check)


@dataclass(slots=True)
class PacedSamples:
    """Per delta: arrival at the client minus the upstream's send time."""

    delay: Samples = field(default_factory=Samples)


def paced_streams(pair: Pair, rounds: int) -> PacedSamples:
    direct_req, proxy_req = pair.requests("bench-paced", stream=True)
    samples = PacedSamples()
    events = PACED_CHUNKS + 3
    with _no_gc():
        for _ in range(rounds):
            sides = (
                ("direct", pair.direct, direct_req, samples.delay.direct),
                ("proxy", pair.proxy, proxy_req, samples.delay.proxy),
            )
            for side, conn, request, delays in sides:
                reply = _check(conn.send(request), side, events)
                stamped = reply.stamp_delays_ms()
                if len(stamped) != PACED_CHUNKS:
                    raise RuntimeError(f"{side}: {len(stamped)} stamped deltas of {PACED_CHUNKS}")
                delays.extend(stamped)
    return samples
