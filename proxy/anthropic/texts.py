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
from proxy.anthropic.runs import EVENT_HEAD, LANE_HEAD, TextRun, first_text_end, run_at
from proxy.anthropic.tools import ToolBlocks
from proxy.anthropic.wire import at_index, data_lines
from proxy.core.jsontext import plain_text
from proxy.core.textcalls import Segment, TextCallScanner


class TextBlocks:
    """Starts, deltas and closes of scanned text blocks."""

    __slots__ = ("_lane_head", "_offered", "_output", "_run", "_tools", "_whole_head", "lane")

    def __init__(self, offered: frozenset[str], output: RoundOutput, tools: ToolBlocks) -> None:
        self._offered = offered
        self._output = output
        self._tools = tools
        # The text block whose client block is open (None: none is), and how a plain text
        # delta at its client index begins: see `as_came`.
        self.lane: TextBlock | None = None
        self._lane_head = b""
        self._whole_head = b""  # the same with its event line (`take_whole`)
        self._run: TextRun | None = None  # the lane's runs of such events (`take_run`)

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
            if at_index(obj, text.index):
                text.text.append(value)
                # joined once, with the rest
                self._output.out += (EVENT_HEAD, data_lines(raw), b"\n\n")
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

    def as_came(self, data: bytes) -> bool:
        """Take an upstream event that is a plain text delta of the lane's block from its bytes
        alone, without parsing it; False (nothing done) when `delta` must decide.

        Such an event is `{"type":"content_block_delta","index":N,"delta":{"type":
        "text_delta","text":"..."}}` exactly as the lane's prefix and the end `"}}` spell it,
        with a text of valid UTF-8 without quotes, backslashes or control characters: then it
        is that JSON object and that text, with no other key, at the block's index, and
        `delta` would send it on as it came if the scanner passes the text whole. So does
        this (the tests hold it to `delta`'s answer)."""
        text = self.lane
        if text is None or not data.startswith(self._lane_head) or data[-3:] != b'"}}':
            return False
        value = plain_text(data[len(self._lane_head) : -3])
        if value is None or not text.scanner.passes(value):
            return False
        text.text.append(value)
        self._output.out += (EVENT_HEAD, data, b"\n\n")
        return True

    def take_whole(self, data: bytes) -> bool:
        """Take a read that is one whole event `as_came` would take (a paced model's read,
        nearly every delta of a real stream), handing on the read itself; False: nothing
        done. The lane's event line and prefix, a plain text (no quote, backslash or control
        character, so no line break: no other event) and the end `"}}` and blank line are
        that event and nothing else; the run's search and proof would find the same."""
        text = self.lane
        head = self._whole_head
        if text is None or not data.startswith(head) or data[-5:] != b'"}}\n\n':
            return False
        value = plain_text(data[len(head) : -5])
        if value is None or not text.scanner.passes(value):
            return False
        text.text.append(value)
        self._output.out.append(data)
        return True

    def take_run(self, data: bytes, at: int) -> int:
        """Send on, as the bytes that came, the run of the lane's plain text deltas that begins
        at `at` in `data` (a read; `at` an event boundary); where it ends (`at`: no run).

        The run is events that `as_came` would each take (see `runs.TextRun` for what they
        may hold beyond it: two-character escapes), so the scanner is asked about their text
        at once: it passes all of it or none, as `passes` looks for markup starts only, and
        there are none in such text. Their bytes are what `delta` would write for them."""
        text, run = self.lane, self._run
        if text is None or run is None or text.scanner.holding:
            return at
        found = run.match(data, at)
        if found is None:
            return at
        end, value = found
        if not text.scanner.passes(value):
            return at
        text.text.append(value)
        self._output.out.append(data[at:end])
        return end

    def next_run(self, data: bytes, at: int, skip: int) -> int:
        """Where in `data` (a read) from `at` on a run may begin: after the `skip`-th next
        event that may begin one, or, while no lane is open, after the first text delta (it
        may open one); the end of `data` if nowhere."""
        run = self._run
        return run.next_start(data, at, skip) if run is not None else first_text_end(data, at)

    def _open(self, text: TextBlock) -> None:
        if text.index < 0:
            text.index = self._output.take_index()
            self._output.start(text.index, text.start)
            # The stream has one block open at a time, so a delta at any index reaches this
            # one while it is open: its lane is the deltas at the client's index.
            self.lane = text
            self._lane_head = LANE_HEAD % text.index
            self._whole_head = EVENT_HEAD + self._lane_head
            self._run = run_at(text.index)

    def _close(self, text: TextBlock) -> None:
        if self.lane is text:
            self.lane = None
            self._run = None
        if text.index >= 0:
            self._output.records.append({**text.start, "text": "".join(text.text)})
            text.text = []
            self._output.stop(text.index)
            text.index = -1


def _plain_text_event(obj: dict[str, Any], delta: dict[str, Any]) -> bool:
    """Has a text delta event nothing but what `_segments` writes for it (`type`, `index`,
    `delta`; in the delta `type` and `text`)? Then, at the right index (`at_index`: an
    integer) and with its text unchanged, its bytes are the event `_segments` would write."""
    return len(obj) == 3 and len(delta) == 2
