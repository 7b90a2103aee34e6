"""Response direction, non-streaming: the same decisions as stream.py on a whole message.

`content`'s tool_use blocks get client ids by SPEC §2 (`toolu_...` where minted), an `input`
that is not an object becomes one (`{}` when absent), duplicates and replays are removed,
leaked markup in text blocks becomes tool_use blocks, and `stop_reason` is made truthful. A
follow-up round's message is merged into the first round's (SPEC §5: one message, the first
round's id and model, content in order, output usage summed).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from proxy.anthropic.blocks import ToolBlock, followup_blocks
from proxy.anthropic.ending import output_tokens, truthful_stop_reason
from proxy.anthropic.stream import MessageCarry
from proxy.core.decide import ResponseIds, Verdict
from proxy.core.guard import Replay
from proxy.core.ids import normalize_raw_id
from proxy.core.jsontext import dumps
from proxy.core.notes import DeltaRepaired, Note
from proxy.core.textcalls import Segment, TextCallScanner


@dataclass(slots=True)
class MessageResult:
    body: dict[str, Any]
    changed: bool
    notes: list[Note] = field(default_factory=list)
    # Set when the only calls were replays and a follow-up round must run.
    replays: list[Replay] = field(default_factory=list)
    blocks: list[dict[str, Any]] = field(default_factory=list)  # the follow-up repeats these


def _input_value(tool: ToolBlock) -> object:
    try:
        value = orjson.loads(tool.arguments_text())
    except orjson.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


class _Content:
    """Rebuilds one message's content list block by block."""

    def __init__(self, ids: ResponseIds, scan: bool):
        self.ids = ids
        self.choice = ids.choice(0)
        self.scan = scan
        self.out: list[Any] = []
        self.notes: list[Note] = []
        self.changed = False

    def block(self, block: object) -> None:
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "tool_use":
            assert isinstance(block, dict)
            self.tool(block, ToolBlock.from_start(block, normalize_raw_id(block.get("id"))))
        elif kind == "text" and self.scan and isinstance(block, dict):
            self.text(block)
        else:
            self.out.append(block)

    def tool(self, block: dict[str, Any], tool: ToolBlock) -> None:
        decision = self.ids.decide(self.choice, tool.raw_id, tool)
        if decision.verdict is not Verdict.DELIVER:
            self.notes.append(decision.dropped(0, tool.name, tool.raw_id))
            self.changed = True
            return
        fixed = {**block, "id": decision.client_id, "name": tool.name, "input": _input_value(tool)}
        if (note := tool.rewritten(decision)) is not None:
            self.notes.append(note)
        self.changed = self.changed or fixed != block
        self.out.append(fixed)

    def text(self, block: dict[str, Any]) -> None:
        value = block.get("text")
        if not isinstance(value, str):
            self.out.append(block)
            return
        scanner = TextCallScanner(self.ids.facts.offered_tools)
        segments = _joined([*scanner.feed(value), *scanner.end()])
        if len(segments) == 1 and segments[0] == value:
            self.out.append(block)
            return
        self.changed = True
        for segment in segments:
            if isinstance(segment, str):
                self.out.append({**block, "text": segment})
                continue
            self.notes.append(DeltaRepaired(kind="text_tool_call", detail=segment.format))
            raw_id = normalize_raw_id(segment.raw_id)
            tool = ToolBlock(raw_id, segment.name, whole=segment.arguments)
            self.tool({"type": "tool_use"}, tool)


def _joined(segments: list[Segment]) -> list[Segment]:
    """Adjacent text as one piece: the stream sends the text between two calls as one block
    (texts.py), and so does a whole message. The scanner's `feed` and `end` each hand back
    merged pieces, but the last of one and the first of the other may be adjacent (text
    ending in a `<` it held): two blocks there would split the model's text in two."""
    out: list[Segment] = []
    for segment in segments:
        if isinstance(segment, str) and out and isinstance(out[-1], str):
            out[-1] += segment
        else:
            out.append(segment)
    return out


def sanitize_message(
    body: dict[str, Any], ids: ResponseIds, *, text_tool_calls: bool = False
) -> MessageResult:
    """One upstream message made canonical; raises ReplayLoopDetected on a loop."""
    content = body.get("content")
    if not isinstance(content, list):
        return MessageResult(body, False)
    scan = text_tool_calls and bool(ids.facts.offered_tools)
    rebuilt = _Content(ids, scan)
    for block in content:
        rebuilt.block(block)
    notes = rebuilt.notes
    choice = rebuilt.choice
    out = {**body, "content": rebuilt.out} if rebuilt.changed else body
    reason = body.get("stop_reason")
    fixed = truthful_stop_reason(bool(choice.delivered), reason)
    if fixed != reason:
        out = {**out, "stop_reason": fixed}
        notes.append(DeltaRepaired(kind="stop_reason", detail=f"{reason} -> {fixed}"))
    result = MessageResult(out, out is not body, notes)
    if choice.replays and not choice.delivered and ids.guard.enabled:
        result.replays = list(choice.replays)
        result.blocks = followup_blocks([b for b in rebuilt.out if isinstance(b, dict)])
    return result


def merge_continuation(carry: MessageCarry, first: dict[str, Any], last: dict[str, Any]) -> bytes:
    """SPEC §5: the rounds as one message: the first round's identity, every round's blocks,
    the last round's stop, output usage summed."""
    usage = last.get("usage")
    usage = usage if isinstance(usage, dict) else {}
    content = last.get("content")
    merged = {
        **last,
        "id": first.get("id", last.get("id")),
        "model": first.get("model", last.get("model")),
        "content": [*carry.records, *(content if isinstance(content, list) else [])],
        "usage": {**usage, "output_tokens": carry.output_tokens + output_tokens(usage)},
    }
    return dumps(merged)
