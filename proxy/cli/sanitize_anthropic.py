"""`toolcall-proxy sanitize` on an Anthropic Messages capture: the surface's exchange offline.

The capture is one upstream round, streamed (events) or whole (a message body); the output is
what the client would have received. A replay-only round would have been answered by the
proxy with a follow-up request: the explanation says so, and the output ends there.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, BinaryIO

import orjson

from proxy.anthropic.exchange import AnthropicExchange
from proxy.core.events import ExchangeEvent, Forward, LoopDetected, OpenFollowup
from proxy.core.notes import explain
from proxy.core.rounds import RouteRules

READ_SIZE = 64 * 1024


def run_anthropic(
    args: argparse.Namespace, request: dict[str, Any], first: bytes, source: BinaryIO
) -> int:
    rules = RouteRules(
        ids=args.ids, dialect=args.dialect, text_tool_calls=args.text_tool_calls == "auto"
    )
    exchange = AnthropicExchange(request, orjson.dumps(request), rules)
    if args.explain:
        for call in exchange.history_calls:
            if call.client_id != call.upstream_id:
                print(
                    f"history: id {call.client_id!r} ({call.name}) -> upstream "
                    f"{call.upstream_id!r}",
                    file=sys.stderr,
                )
    exchange.begin_round(stream=not first.lstrip().startswith(b"{"))
    status = None
    chunk = first
    while chunk and status is None:
        status = _act(exchange, exchange.feed(chunk), args.explain)
        chunk = source.read(READ_SIZE)
    if status is None:
        status = _act(exchange, exchange.end(), args.explain) or 0
    sys.stdout.buffer.flush()
    return status


def _act(exchange: AnthropicExchange, events: list[ExchangeEvent], explaining: bool) -> int | None:
    """Write what the client would get; the exit status once the round ended (else None)."""
    out = sys.stdout.buffer
    status = None
    for event in events:
        if isinstance(event, bytes):
            out.write(event)
        elif isinstance(event, Forward):
            out.write(event.data)
            status = 0
        elif isinstance(event, OpenFollowup):
            for replay in event.replays if explaining else ():
                print(
                    f"replay: {replay.name} id {replay.raw_id!r} (matched the {replay.form} of "
                    f"{replay.client_id or 'an answered call'!r}) would be answered by the proxy "
                    "with an is_error tool_result and a follow-up request",
                    file=sys.stderr,
                )
            status = 0
        elif isinstance(event, LoopDetected):
            out.write(exchange.stream_error(event.error))
            print(f"toolcall-proxy sanitize: {event.error.message}", file=sys.stderr)
            status = 1
    notes, _ = exchange.report()
    for note in notes if explaining else ():
        print(explain(note), file=sys.stderr)
    return status
