"""Helpers for the Responses-over-Chat bridge's tests: drive a `ResponsesOverChat` as the
shell does (rounds, follow-ups), with upstream Chat streams built by tests.chat.helpers."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from proxy.bridge.responses_chat import ResponsesOverChat
from proxy.core.events import ExchangeEvent, Forward, LoopDetected, OpenFollowup, UpstreamBroken
from proxy.core.rounds import RouteRules

JSON = dict[str, Any]
SHELL = {
    "type": "function",
    "name": "shell",
    "description": "Run a command.",
    "strict": False,
    "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}},
}
APPLY_PATCH = {
    "type": "custom",
    "name": "apply_patch",
    "description": "Edit files. This is a FREEFORM tool.",
    "format": {"type": "grammar", "syntax": "lark", "definition": "start: begin_patch"},
}
PATCH = '*** Begin Patch\n*** Add File: out.txt\n+done "quoted" \\ é\n*** End Patch\n'


def entropy_source() -> Callable[[int], bytes]:
    """Deterministic 'random' bytes, distinct on every call: the same run gives the same
    ids, so two runs' bytes compare."""
    counter = itertools.count(1)

    def entropy(n: int) -> bytes:
        return next(counter).to_bytes(8, "big")[-n:].rjust(n, b"\x01")

    return entropy


def body(*items: JSON, model: str = "kimi-k2", stream: bool = True, **extra: Any) -> JSON:
    out: JSON = {
        "model": model,
        "input": list(items) or [user("run it")],
        "tools": [SHELL, APPLY_PATCH],
        "store": False,
        "stream": stream,
    }
    out.update(extra)
    return out


def user(text: str) -> JSON:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def call(call_id: str, arguments: str = '{"cmd":"ls"}', name: str = "shell") -> JSON:
    return {
        "type": "function_call",
        "id": "fc_x",
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
    }


def output(call_id: str, text: str = "ok", kind: str = "function_call_output") -> JSON:
    return {"type": kind, "call_id": call_id, "output": text}


@dataclass
class Run:
    exchange: ResponsesOverChat
    client: bytes = b""  # everything the client received
    followups: list[JSON] = field(default_factory=list)  # Chat bodies sent upstream after
    last: Forward | None = None
    end: ExchangeEvent | None = None  # a LoopDetected or UpstreamBroken, if one ended it


def run(
    request: JSON,
    rounds: list[list[bytes]],
    *,
    stream: bool = True,
    rules: RouteRules | None = None,
    entropy: Callable[[int], bytes] | None = None,
) -> Run:
    """Each round's reads fed in turn, as the shell's round loop does."""
    exchange = ResponsesOverChat(
        request, rules or RouteRules(), entropy=entropy or entropy_source()
    )
    result = Run(exchange)
    for reads in rounds:
        exchange.begin_round(stream=stream)
        events: list[ExchangeEvent] = []
        for read in reads:
            events += exchange.feed(read)
            if any(not isinstance(e, bytes) for e in events):
                break
        else:
            events += exchange.end()
        if not _take(result, events):
            break
    return result


def _take(result: Run, events: list[ExchangeEvent]) -> bool:
    """True: a follow-up round comes next."""
    for event in events:
        if isinstance(event, bytes):
            assert event, "an empty read would start the client's response"
            result.client += event
        elif isinstance(event, Forward):
            result.client += event.data
            if event.last:
                result.last = event
        elif isinstance(event, OpenFollowup):
            result.followups.append(orjson.loads(event.body))
            return True
        elif isinstance(event, LoopDetected | UpstreamBroken):
            result.end = event
    return False


def upstream_messages(exchange: ResponsesOverChat) -> list[JSON]:
    return list(orjson.loads(exchange.upstream_request)["messages"])
