"""What a trace says about the answer the client got (SPEC §12): the response's model, id,
finish reasons and usage, and when its first byte left.

Read once, when the request ends, from what the client's `send` saw: the first body sent and
the last few (a stream's first event names the model, its last ones the finish and usage), or
the one body of a whole message. Every API surface's shapes are read the same way: Chat
Completions' chunks and bodies, Anthropic's `message_start`, `message_delta` and message
bodies, Responses' `response.*` events and bodies. Per chunk, `BodyWatch` only keeps a
reference; nothing is parsed until the end, and what is parsed is bounded.
"""

from __future__ import annotations

import re
import time
from collections import deque
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import orjson

Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

# The largest whole body parsed, and how many lines from a stream's end are looked at.
MESSAGE_BYTES = 4 * 1024 * 1024
TAIL_LINES = 64
TAIL_BODIES = 3
# The lines at a stream's end worth parsing: those that may hold a finish or usage (a Chat
# chunk still streaming says `"finish_reason":null`).
_END_MARKS = re.compile(rb'"(?:usage|finish_reason|stop_reason|status)"')
_NULL_FINISH = re.compile(rb'"finish_reason": ?null')


class BodyWatch:
    """Wraps the client's `send`: when the first body left, and references to the first and
    the last few (no copy, no parse)."""

    __slots__ = ("first_at", "head", "send", "tail")

    def __init__(self, send: Send) -> None:
        self.send = send
        self.first_at: float | None = None
        self.head = b""
        self.tail: deque[bytes] = deque(maxlen=TAIL_BODIES)

    def __call__(self, message: MutableMapping[str, Any]) -> Awaitable[None]:
        if message["type"] == "http.response.body":
            body = message.get("body")
            if body:
                if self.first_at is None:
                    self.first_at = time.perf_counter()
                    self.head = body
                else:
                    self.tail.append(body)
        return self.send(message)


class ResponseFacts:
    """The answer's model, id, finish reasons (per choice) and token counts, as far as read."""

    __slots__ = ("cache_read", "id", "input_tokens", "model", "output_tokens", "reasons")

    def __init__(self) -> None:
        self.model: str | None = None
        self.id: str | None = None
        self.reasons: dict[int, str] = {}
        self.input_tokens: int | None = None
        self.output_tokens: int | None = None
        self.cache_read: int | None = None

    @property
    def finish_reasons(self) -> tuple[str, ...]:
        return tuple(self.reasons[index] for index in sorted(self.reasons))

    def read(self, obj: dict[str, Any]) -> None:
        """One JSON object of the answer: a chunk, an event or a whole body."""
        self._holder(obj, whole=obj.get("object") == "response")
        for key in ("message", "response"):  # Anthropic's message_start, Responses' events
            inner = obj.get(key)
            if isinstance(inner, dict):
                self._holder(inner, whole=key == "response")
        delta = obj.get("delta")
        if isinstance(delta, dict) and isinstance(delta.get("stop_reason"), str):
            self.reasons[0] = delta["stop_reason"]  # Anthropic's message_delta
        choices = obj.get("choices")
        if isinstance(choices, list):
            for position, choice in enumerate(choices):
                if isinstance(choice, dict) and isinstance(choice.get("finish_reason"), str):
                    index = choice.get("index")
                    at = index if isinstance(index, int) else position
                    self.reasons[at] = choice["finish_reason"]

    def _holder(self, holder: dict[str, Any], *, whole: bool) -> None:
        model = holder.get("model")
        if isinstance(model, str) and model:
            self.model = model
        ident = holder.get("id")
        if self.id is None and isinstance(ident, str) and ident:
            self.id = ident
        usage = holder.get("usage")
        if isinstance(usage, dict):
            self._usage(usage)
        stop = holder.get("stop_reason")
        if isinstance(stop, str):
            self.reasons[0] = stop  # an Anthropic message
        if whole:
            self._status(holder)

    def _status(self, response: dict[str, Any]) -> None:
        """A Responses response: its status, or why it is incomplete."""
        status = response.get("status")
        details = response.get("incomplete_details")
        reason = details.get("reason") if isinstance(details, dict) else None
        if isinstance(reason, str):
            self.reasons[0] = reason
        elif isinstance(status, str) and status not in ("in_progress", "queued"):
            self.reasons[0] = status

    def _usage(self, usage: dict[str, Any]) -> None:
        """Chat's prompt/completion tokens, or Anthropic's and Responses' input/output tokens
        (Anthropic's input counts exclude its cache: added, as the conventions count them)."""
        given = usage.get("prompt_tokens", usage.get("input_tokens"))
        out = usage.get("completion_tokens", usage.get("output_tokens"))
        cached = _count(usage.get("cache_read_input_tokens"))
        written = _count(usage.get("cache_creation_input_tokens"))
        if isinstance(given, int) and not isinstance(given, bool):
            self.input_tokens = given + (cached or 0) + (written or 0)
        if isinstance(out, int) and not isinstance(out, bool):
            self.output_tokens = out
        for key in ("prompt_tokens_details", "input_tokens_details"):
            details = usage.get(key)
            if isinstance(details, dict) and _count(details.get("cached_tokens")) is not None:
                cached = _count(details.get("cached_tokens"))
        if cached is not None:
            self.cache_read = cached


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def response_facts(watch: BodyWatch, stream: bool) -> ResponseFacts:
    """What the answer the client got says of itself (see the module's docstring)."""
    facts = ResponseFacts()
    if not stream:
        body = watch.head
        if body[:1] == b"{" and len(body) <= MESSAGE_BYTES:
            _parse_into(facts, body)
        return facts
    _read_first(facts, watch.head)
    _read_end(facts, b"".join(watch.tail) if watch.tail else watch.head)
    return facts


def _read_first(facts: ResponseFacts, data: bytes) -> None:
    """The stream's first event that names a model (Chat's first chunk, Anthropic's
    `message_start`, Responses' `response.created`): its model and id. One line is parsed,
    however many events the first body holds."""
    at = data.find(b'"model"')
    if at >= 0:
        end = data.find(b"\n", at)
        line = data[data.rfind(b"\n", 0, at) + 1 : end if end >= 0 else len(data)]
        if line.startswith(b"data:"):
            _parse_into(facts, line[5:].strip())


def _read_end(facts: ResponseFacts, data: bytes) -> None:
    """The stream's last lines, from its end back to its finish (usage comes with it or
    after it on every surface), at most `TAIL_LINES` lines (a line cut at the start of the
    first body kept is no `data:` line, or no JSON: it is skipped). Where several choices
    finish in separate chunks, the last chunk's reasons are those read."""
    end = len(data)
    for _ in range(TAIL_LINES):
        if end <= 0 or facts.reasons:
            return
        start = data.rfind(b"\n", 0, end) + 1
        line = data[start:end]
        end = start - 1
        if line.startswith(b"data:") and _END_MARKS.search(line) and not _NULL_FINISH.search(line):
            _parse_into(facts, line[5:].strip())


def _parse_into(facts: ResponseFacts, payload: bytes) -> None:
    try:
        obj = orjson.loads(payload)
    except orjson.JSONDecodeError:
        return
    if isinstance(obj, dict):
        facts.read(obj)


__all__ = ["BodyWatch", "ResponseFacts", "response_facts"]
