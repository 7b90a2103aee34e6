"""The Responses core offline (`toolcall-proxy sanitize` on a Responses capture): a captured
upstream stream or body in, what the client would have received out, decisions explained."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import orjson

from proxy.core.events import Forward, LoopDetected, OpenFollowup
from proxy.core.notes import explain
from proxy.core.rounds import RouteRules
from proxy.responses.exchange import ResponsesExchange

Say = Callable[[str], None]


def looks_like_responses(first: bytes, request: dict[str, Any] | None) -> bool:
    """A Responses capture: the request has `input`, or the capture's events or body are."""
    if request is not None:
        return "input" in request and "messages" not in request
    head = first[:4096]
    return (
        b"event: response." in head
        or b'"type":"response.' in head
        or b'"object":"response"' in head
    )


def sanitize_responses(
    reads: Iterable[bytes],
    first: bytes,
    request: dict[str, Any] | None,
    rules: RouteRules,
    write: Callable[[bytes], None],
    say: Say,
) -> int:
    """Run the exchange over the capture; 1 when the breaker would stop it, else 0."""
    body = request if request is not None else {"input": []}
    exchange = ResponsesExchange(body, orjson.dumps(body), rules)
    for client_id, upstream_id, what in exchange.translations:
        say(f"history: call_id {client_id!r} ({what}) -> upstream {upstream_id!r}")
    exchange.begin_round(stream=not first.lstrip().startswith(b"{"))
    for read in reads:
        status = _act(exchange.feed(read), exchange, write, say)
        if status is not None:
            return _report(exchange, say, status)
    return _report(exchange, say, _act(exchange.end(), exchange, write, say) or 0)


def _act(
    events: list[Any], exchange: ResponsesExchange, write: Callable[[bytes], None], say: Say
) -> int | None:
    """Write what the client gets; the exit status once the round is over (1: a loop)."""
    over: int | None = None
    for event in events:
        if isinstance(event, bytes):
            write(event)
        elif isinstance(event, Forward):
            write(event.data)
            over = 0 if event.last else over
        elif isinstance(event, OpenFollowup):
            for replay in event.replays:
                say(
                    f"replay: {replay.name} call_id {replay.raw_id!r} (matched the {replay.form} of "
                    f"{replay.client_id or 'an answered call'!r}) would be answered by the proxy "
                    "with a function_call_output and a follow-up request"
                )
            over = 0
        elif isinstance(event, LoopDetected):
            if not event.before_first_byte:
                write(exchange.stream_error(event.error))
            say(f"toolcall-proxy sanitize: {event.error.message}")
            over = 1
    return over


def _report(exchange: ResponsesExchange, say: Say, code: int) -> int:
    for note in exchange.report()[0]:
        say(explain(note))
    return code
