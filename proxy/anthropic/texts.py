"""Text blocks scanned for leaked tool-call markup (SPEC §8, when the tool was offered).

The scanner releases plain text and recovered calls in order. Plain text goes into a client
text block that opens with the first text released (never an empty text block); a
recovered call closes that block and becomes a tool_use block of its own, and text after it
opens a new text block. Each client text block is recorded whole for a follow-up round.
"""

from __future__ import annotations

from typing import Any

from proxy.anthropic.blocks import TextBlock
from proxy.anthropic.output import RoundOutput
from proxy.anthropic.tools import ToolBlocks
from proxy.core.textcalls import Segment, TextCallScanner


class TextBlocks:
    """Starts, deltas and closes of scanned text blocks."""

    __slots__ = ("_offered", "_output", "_tools")

    def __init__(self, offered: frozenset[str], output: RoundOutput, tools: ToolBlocks) -> None:
        self._offered = offered
        self._output = output
        self._tools = tools

    def start(self, block: dict[str, Any]) -> TextBlock:
        text = TextBlock(TextCallScanner(self._offered), {**block, "text": ""})
        if isinstance(block.get("text"), str) and block["text"]:
            self._segments(text, text.scanner.feed(block["text"]))
        return text

    def delta(self, text: TextBlock, obj: dict[str, Any], raw: bytes) -> None:
        delta = obj.get("delta")
        if not isinstance(delta, dict) or delta.get("type") != "text_delta":
            self._open(text)  # citations and other deltas: in the open text block
            self._output.reindexed(obj, raw, text.index, "content_block_delta")
            return
        value = delta.get("text")
        if not isinstance(value, str) or not value:
            return
        if not text.scanner.passes(value):
            segments = text.scanner.feed(value)
            if segments != [value]:
                self._segments(text, segments)
                return
        # Released whole and unchanged: `_segments` would write the event again as it came
        # when it has nothing else and is at the client's index. Then it goes out as it came.
        if _plain_text_event(obj, delta):
            self._open(text)
            if obj["index"] == text.index:
                text.text.append(value)
                self._output.out += (_DELTA_HEAD, raw, b"\n\n")  # joined once, with the rest
                return
        self._segments(text, [value])

    def close(self, text: TextBlock) -> None:
        self._segments(text, text.scanner.end())
        self._close(text)

    def _segments(self, text: TextBlock, segments: list[Segment]) -> None:
        for segment in segments:
            if isinstance(segment, str):
                self._open(text)
                text.text.append(segment)
                self._output.delta(text.index, {"type": "text_delta", "text": segment})
            else:
                self._close(text)
                self._tools.recovered(segment)

    def _open(self, text: TextBlock) -> None:
        if text.index < 0:
            text.index = self._output.take_index()
            self._output.start(text.index, text.start)

    def _close(self, text: TextBlock) -> None:
        if text.index >= 0:
            self._output.records.append({**text.start, "text": "".join(text.text)})
            text.text = []
            self._output.stop(text.index)
            text.index = -1


_DELTA_HEAD = b"event: content_block_delta\ndata: "


def _plain_text_event(obj: dict[str, Any], delta: dict[str, Any]) -> bool:
    """Has a text delta event nothing but what `_segments` writes for it (`type`, an integer
    `index`, `delta`; in the delta `type` and `text`)? Then, at the right index and with its
    text unchanged, its bytes are the event `_segments` would write."""
    return len(obj) == 3 and len(delta) == 2 and type(obj.get("index")) is int  # not True
