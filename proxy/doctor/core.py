"""The proxy's own core, run offline on each response the provider sent.

Twice, for two questions:
- `assistant_message`: what should a client send back as the assistant's turn? The core in
  its most literal setting (raw ids kept, no replay guard) puts any stream shape back
  together (indexes, final flushes, calls left in the text), so the conversation goes on
  with the provider's own ids, as a client talking to it directly would.
- `proxy_account`: what would the proxy change in this response with the recommended
  settings? Its notes are the proxy's own account of the quirks it repairs.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson

from proxy.chat.history import translate_request
from proxy.chat.message import sanitize_completion
from proxy.chat.stream import StreamSanitizer
from proxy.core.decide import ResponseIds
from proxy.core.errors import ProxyError
from proxy.core.guard import GuardState
from proxy.core.notes import CallDropped, DeltaRepaired, IdRewritten, Note
from proxy.core.sse import SSEDecoder
from proxy.doctor.session import RecordedExchange

JSON = dict[str, Any]


@dataclass
class CoreResult:
    message: JSON | None  # the assistant message a client ends up with
    notes: list[Note] = field(default_factory=list)
    replays: int = 0  # calls the proxy would answer itself (SPEC §5)
    breaker: str | None = None  # why the proxy would stop the response as a loop


def _deltas(body: bytes) -> Iterator[JSON]:
    """The first choice's delta of every chunk of a stream the core wrote."""
    decoder = SSEDecoder()
    for event in [*decoder.feed(body), *decoder.end()]:
        if event.data is None or event.is_done:
            continue
        try:
            chunk = orjson.loads(event.data)
        except orjson.JSONDecodeError:
            continue  # a provider's non-JSON line, kept by the core as a comment
        choices = chunk.get("choices") if isinstance(chunk, dict) else None
        if choices:
            yield choices[0].get("delta") or {}


def _message_from_stream(body: bytes) -> JSON:
    """Reassemble the canonical stream the core wrote (one header per call, then fragments)."""
    content: list[str] = []
    reasoning: list[str] = []
    calls: dict[int, JSON] = {}
    for delta in _deltas(body):
        content.append(delta.get("content") or "")
        reasoning.append(delta.get("reasoning_content") or "")
        for entry in delta.get("tool_calls") or ():
            fn = entry.get("function") or {}
            call = calls.setdefault(
                entry["index"],
                {
                    "id": entry.get("id"),
                    "type": "function",
                    "function": {"name": fn.get("name"), "arguments": ""},
                },
            )
            call["function"]["arguments"] += fn.get("arguments") or ""
    message: JSON = {"role": "assistant", "content": "".join(content) or None}
    if any(reasoning):
        message["reasoning_content"] = "".join(reasoning)
    if calls:
        message["tool_calls"] = [calls[i] for i in sorted(calls)]
    return message


def run_core(exchange: RecordedExchange, *, ids: str, dialect: str, guard: bool) -> CoreResult:
    """The core on one response, as the proxy would run it for this request."""
    request = orjson.loads(orjson.dumps(exchange.request))  # the core may annotate its input
    facts = translate_request(request, dialect).facts
    decisions = ResponseIds(facts, ids, GuardState(enabled=guard))
    if exchange.stream:
        core = StreamSanitizer(decisions, text_tool_calls=True)
        out = core.feed(exchange.raw) + core.end()
        followup = core.followup
        return CoreResult(
            _message_from_stream(b"".join(out)),
            core.notes,
            len(followup.replays) if followup else 0,
            core.error.message if core.error else None,
        )
    body = exchange.json()
    if not isinstance(body, dict):
        return CoreResult(None)
    try:
        result = sanitize_completion(body, decisions, text_tool_calls=True)
    except ProxyError as exc:  # the breaker trips on a replay repeated within the response
        return CoreResult(None, breaker=exc.message)
    choices = body.get("choices")
    first = choices[0] if isinstance(choices, list) and choices else None
    message = first.get("message") if isinstance(first, dict) else None
    return CoreResult(
        message if isinstance(message, dict) else None, result.notes, len(result.replays)
    )


def assistant_message(exchange: RecordedExchange) -> JSON | None:
    """The assistant turn to send back: the provider's calls, raw ids kept, well formed."""
    message = run_core(exchange, ids="off", dialect="passthrough", guard=False).message
    if message is None:
        return None
    kept: JSON = {"role": "assistant", "content": message.get("content")}
    for thinking in ("reasoning_content", "reasoning"):  # thinking models require it back
        if message.get(thinking):
            kept[thinking] = message[thinking]
    if message.get("tool_calls"):
        kept["tool_calls"] = message["tool_calls"]
    elif kept["content"] is None:
        kept["content"] = ""  # an assistant message needs content or calls
    return kept


def proxy_account(exchanges: list[RecordedExchange], dialect: str) -> dict[str, dict[str, int]]:
    """What the proxy would do with these responses: counts by kind of decision."""
    counts: dict[str, Counter[str]] = {
        "ids rewritten": Counter(),
        "stream repairs": Counter(),
        "calls withheld": Counter(),
        "replays answered": Counter(),
        "loops stopped": Counter(),
    }
    for exchange in exchanges:
        result = run_core(exchange, ids="auto", dialect=dialect, guard=True)
        for note in result.notes:
            match note:
                case IdRewritten():
                    counts["ids rewritten"][note.reason] += 1
                case DeltaRepaired():
                    counts["stream repairs"][note.kind] += 1
                case CallDropped():
                    counts["calls withheld"][note.reason] += 1
        if result.replays:
            counts["replays answered"]["replay"] += result.replays
        if result.breaker:
            counts["loops stopped"]["loop_detected"] += 1
    return {kind: dict(sorted(c.items())) for kind, c in counts.items() if c}
