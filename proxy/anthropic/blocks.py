"""The content blocks of one Anthropic response as the stream core tracks them (SPEC §8).

A block is open from its `content_block_start` until its `content_block_stop` (or the start
of the next block, or the message's end: Anthropic streams one block at a time, so a new
block ends the last one when a translator forgot the stop).
- `ToolBlock`: a `tool_use` block; its client id is decided once its raw id is known, or,
  when it may be a replay or an in-response duplicate, once its input is complete.
- `TextBlock`: a `text` block whose text goes through the leaked-markup scanner; its client
  block opens with the first text the scanner releases (never an empty text block).
- `PassBlock`: every other block (text without scanning, `thinking`, `redacted_thinking`,
  `server_tool_use`, unknown kinds): forwarded unchanged but for its dense index.
Text and thinking are also recorded whole, for a follow-up round's assistant message.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from proxy.core.decide import Decision
from proxy.core.jsoncomplete import JsonCompleteness, Progress, is_complete_json
from proxy.core.jsontext import dumps
from proxy.core.notes import IdRewritten
from proxy.core.textcalls import TextCallScanner

# Keys a tool_use block carries that the proxy decides itself.
_TOOL_KEYS = frozenset({"type", "id", "name", "input"})


@dataclass(slots=True, eq=False)
class ToolBlock:
    raw_id: str | None
    name: str
    # The input sent whole inside content_block_start (JSON text), or None: it is then the
    # input, and input_json_delta events that follow only repeat it.
    whole: str | None = None
    parts: list[str] = field(default_factory=list)
    repeats: list[str] = field(default_factory=list)  # deltas after a whole input
    extra: dict[str, Any] = field(default_factory=dict)  # other keys of the block, kept
    received: int = 0  # characters in `parts` (or `repeats`): bounded (SPEC §6)
    held: bool = False
    index: int = -1  # the client's block index once delivered; -1 while held or if dropped
    sent_input: bool = False  # some input reached the client
    decision: Decision | None = None
    # Whether `parts` form one complete JSON object or array, each part fed once (asked for
    # every line that is not JSON: joining and parsing them each time was quadratic).
    _json: JsonCompleteness = field(default_factory=JsonCompleteness)
    _scanned: int = 0  # the parts fed to `_json`
    _parses: bool = False  # the text `_json` found closed parses

    @staticmethod
    def from_start(block: dict[str, Any], raw_id: str | None) -> ToolBlock:
        name = block.get("name")
        tool = ToolBlock(raw_id, name if isinstance(name, str) else "")
        value = block.get("input")
        if isinstance(value, str) and value.strip():
            tool.whole = value  # a translator's JSON text instead of an object
        elif value not in (None, {}, ""):
            tool.whole = dumps(value).decode()
        tool.extra = {k: v for k, v in block.items() if k not in _TOOL_KEYS}
        return tool

    def input_complete(self) -> bool:
        """Its input is complete: sent whole, or its deltas so far form one JSON object or
        array (`jsoncomplete`: a top-level scalar is complete only at the block's end)."""
        if self.whole is not None:
            return True
        parts, scanned, json = self.parts, self._scanned, self._json
        if scanned < len(parts):
            closed = json.state is Progress.CLOSED
            for part in parts[scanned:]:
                json.feed(part)
            self._scanned = len(parts)
            if not closed and json.state is Progress.CLOSED:
                self._parses = is_complete_json("".join(parts))
                if not self._parses:
                    json.give_up()
        return json.state is Progress.CLOSED and self._parses

    def arguments_text(self) -> str:
        if self.whole is not None:
            return self.whole
        text = "".join(self.parts)
        return text if text.strip() else "{}"

    def rewritten(self, decision: Decision) -> IdRewritten | None:
        """The note for a delivered call whose client id is not its raw id."""
        if decision.reason is None:
            return None
        return IdRewritten(
            choice=0,
            index=decision.index,
            name=self.name,
            raw_id=self.raw_id,
            client_id=decision.client_id,
            reason=decision.reason,
        )

    def start_block(self, client_id: str) -> dict[str, Any]:
        return {"type": "tool_use", "id": client_id, "name": self.name, "input": {}, **self.extra}


@dataclass(slots=True, eq=False)
class TextBlock:
    scanner: TextCallScanner
    start: dict[str, Any]
    index: int = -1  # the open client text block, or -1 (none open now)
    text: list[str] = field(default_factory=list)


@dataclass(slots=True, eq=False)
class PassBlock:
    index: int
    # The block as recorded for a follow-up's assistant message (None: not replayed there).
    record: dict[str, Any] | None = None


Block = ToolBlock | TextBlock | PassBlock

# Delta kinds whose text accumulates into a recorded block, and the key it goes into.
_RECORDED_DELTAS = {
    "text_delta": ("text", "text"),
    "thinking_delta": ("thinking", "thinking"),
    "signature_delta": ("signature", "signature"),
}


def record_of(block: dict[str, Any]) -> dict[str, Any] | None:
    """The start of a block's record for a follow-up round (text and thinking kinds only)."""
    kind = block.get("type")
    if kind in ("text", "thinking", "redacted_thinking"):
        return dict(block)
    return None


def absorb(record: dict[str, Any] | None, delta: object) -> None:
    """Add a delta's text to a recorded block."""
    if record is None or not isinstance(delta, dict):
        return
    target = _RECORDED_DELTAS.get(delta.get("type"))  # type: ignore[arg-type]
    if target is None:
        return
    source, key = target
    value = delta.get(source)
    if isinstance(value, str):
        before = record.get(key)
        record[key] = (before if isinstance(before, str) else "") + value


def followup_blocks(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The recorded blocks a follow-up's assistant message repeats (no empty text blocks:
    Anthropic rejects them in a history)."""
    return [r for r in records if not (r.get("type") == "text" and not r.get("text"))]
