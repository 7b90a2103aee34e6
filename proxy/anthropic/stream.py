"""Response direction, streaming: one upstream round of Anthropic events made canonical.

SPEC §8 in Anthropic's grammar, event by event:
- `message_start` is forwarded (a continuation round's is not: one message);
- every `tool_use` block reaches the client as one `content_block_start` with `input: {}`,
  `input_json_delta` fragments that concatenate to the whole input, one `content_block_stop`;
  an input sent whole in `content_block_start` becomes one delta, and deltas that repeat it
  are dropped; a block without input gets `{}`; client ids follow SPEC §2 (`toolu_...` where
  minted); a possible replay or duplicate waits for its input before it is decided;
- block indexes are dense from 0 in delivery order (continuing across follow-up rounds);
- `message_delta` waits for the round's end: its `stop_reason` is made truthful and its
  output usage summed over the rounds; `message_stop` follows it;
- a body that ends without `message_stop` is completed; text, thinking (and signatures),
  `redacted_thinking`, server tools, `ping` and unknown events pass unchanged but for indexes;
- leaked tool-call markup in text becomes tool_use blocks (when the tool was offered).
A replay-only round ends with `followup` set instead of its `message_delta` (SPEC §5); the
breaker ends it with `error` set.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum, auto
from typing import Any

from proxy.anthropic import whole
from proxy.anthropic.blocks import (
    Block,
    PassBlock,
    TextBlock,
    ToolBlock,
    absorb,
    followup_blocks,
    record_of,
)
from proxy.anthropic.ending import MessageEnd
from proxy.anthropic.output import RoundOutput
from proxy.anthropic.reads import UpstreamReads
from proxy.anthropic.texts import TextBlocks
from proxy.anthropic.tools import ToolBlocks
from proxy.anthropic.wire import at_index, encode, encode_raw
from proxy.core.decide import ResponseIds
from proxy.core.errors import CallBoundExceeded, ReplayLoopDetected
from proxy.core.framing import Event, EventReader
from proxy.core.guard import Replay
from proxy.core.nonjson import NonJsonRule, read_object
from proxy.core.notes import DeltaRepaired, Note
from proxy.core.sse import encode_event


@dataclass(slots=True)
class MessageCarry:
    """What a follow-up round continues: the message the client is reading."""

    next_index: int = 0  # the next client block index
    output_tokens: int = 0  # summed over the rounds so far
    records: list[dict[str, Any]] = field(default_factory=list)  # non-streaming: blocks


@dataclass(frozen=True, slots=True)
class RoundFollowup:
    """A replay-only round: its replays and the blocks the follow-up's message repeats."""

    replays: list[Replay]
    blocks: list[dict[str, Any]]
    carry: MessageCarry


class StreamPhase(Enum):
    STREAMING = auto()
    DONE = auto()


class AnthropicStream:
    """Feed it an upstream event stream's bytes; it returns the client's.

    This class is the phase and the event dispatch: message-level events, and which kind of
    block an event belongs to. tool_use blocks are `ToolBlocks`' (tools.py), scanned text
    blocks `TextBlocks`' (texts.py), the message's end `MessageEnd`'s (ending.py); all of
    them write to one `RoundOutput` (output.py), which keeps the client's block indexes
    dense. Reads come as events from `UpstreamReads` (reads.py), which sends runs of plain
    text deltas on unparsed.
    """

    def __init__(
        self,
        ids: ResponseIds,
        *,
        carry: MessageCarry | None = None,
        text_tool_calls: bool = False,
    ):
        self.ids = ids
        self.continuation = carry is not None
        self._carry = carry or MessageCarry()
        self._output = RoundOutput(self._carry.next_index)
        self._tools = ToolBlocks(ids, self._output)
        self._texts = TextBlocks(ids.facts.offered_tools, self._output, self._tools)
        self._scan = text_tool_calls and bool(ids.facts.offered_tools)
        self._reads = UpstreamReads(EventReader(), self._texts if self._scan else None)
        self._open: dict[object, Block] = {}  # upstream index -> open block
        self._started = False  # this round's message_start arrived
        self._end = MessageEnd()
        self.phase = StreamPhase.STREAMING
        self.notes: list[Note] = self._output.notes  # one list: the exchange reads and clears it
        self.error: ReplayLoopDetected | None = None
        self.followup: RoundFollowup | None = None
        self.non_json = NonJsonRule(self.notes)

    # -- feeding -------------------------------------------------------------------------------

    def feed(self, data: bytes) -> list[bytes]:
        if self.phase is StreamPhase.STREAMING and not self._reads.whole_delta(data):
            for events in self._reads.feed(data):
                if not self._events(events):
                    break
        return self._output.take()

    def end(self) -> list[bytes]:
        """The upstream body ended cleanly: complete a message it left open."""
        if self.phase is StreamPhase.STREAMING:
            self._events(self._reads.end())
        if self.phase is StreamPhase.STREAMING:
            if self._started or self.continuation:
                self.notes.append(DeltaRepaired(kind="message_stop", detail="added"))
                try:
                    self._finish()
                except (ReplayLoopDetected, CallBoundExceeded) as exc:
                    self._broken(exc)
            self.phase = StreamPhase.DONE
        return self._output.take()

    def block_before_error(self) -> bytes:
        """See `RoundOutput.block_before_error` (the exchange asks before a loop error)."""
        return self._output.block_before_error()

    def _events(self, events: list[Event]) -> bool:
        """Decide a piece's events; False when the round is done (the rest is not read)."""
        # One try for all of a read's events, not one per event: the breaker's exception
        # leaves the loop at the event that raised it, as a check after each event would.
        try:
            texts = self._texts
            for data, other in events:
                # A scanned text block's plain deltas are taken from their bytes, unparsed.
                if texts.lane is not None and data is not None and texts.as_came(data):
                    continue
                self._event(data, other)
                if self.phase is StreamPhase.DONE:
                    break
        except (ReplayLoopDetected, CallBoundExceeded) as exc:
            self._broken(exc)
        return self.phase is StreamPhase.STREAMING

    def _broken(self, exc: ReplayLoopDetected | CallBoundExceeded) -> None:
        """The breaker (SPEC §5), or a call past its bound (§6: `broken`): nothing more is sent."""
        if isinstance(exc, CallBoundExceeded):
            self.non_json.broken = exc
        else:
            self.error = exc
        self.phase = StreamPhase.DONE

    def _event(self, data: bytes | None, other: tuple[bytes, ...]) -> None:
        if data is None:
            self._output.out.append(encode_event(None, _kept_lines(other)))
            return
        obj = read_object(data)
        if obj is None:
            self._not_json(data, other)
            return
        kind = obj.get("type")
        handler = _HANDLERS.get(kind if isinstance(kind, str) else "", AnthropicStream._passthrough)
        handler(self, obj, data)

    def _not_json(self, data: bytes, other: tuple[bytes, ...]) -> None:
        """SPEC §4: a data line that is not a JSON object becomes a comment in its place, or
        ends the round inside an open call (the exchange then ends the client's stream)."""
        comment = self.non_json.answer(data, other, self._call_open())
        if comment is None:
            self.phase = StreamPhase.DONE  # `broken` says why; nothing more is read
        else:
            self._output.out.append(comment)

    def _call_open(self) -> bool:
        """A tool_use block whose input is not complete yet, or a text block whose scanner
        holds what may be a leaked call."""
        for block in self._open.values():
            if isinstance(block, ToolBlock) and not block.input_complete():
                return True
            if isinstance(block, TextBlock) and block.scanner.in_call:
                return True
        return False

    # -- message-level events ------------------------------------------------------------------

    def _message_start(self, obj: dict[str, Any], raw: bytes) -> None:
        self._started = True
        message = obj.get("message")
        if not isinstance(message, dict):
            message = {}
        self._end.started(message)
        content = message.get("content")
        blocks = content if isinstance(content, list) and content else None
        tools, output = self._tools, self._output
        if self.continuation:
            if blocks is not None:
                whole.as_events(blocks, tools, output)
        elif blocks is not None and (kept := whole.kept_in_place(blocks, tools, output)) != blocks:
            output.out.append(encode({**obj, "message": {**message, "content": kept}}))
        else:
            output.out.append(encode_raw("message_start", raw))

    def _message_delta(self, obj: dict[str, Any], raw: bytes) -> None:
        self._close_all()
        self._end.delta(obj)

    def _message_stop(self, obj: dict[str, Any], raw: bytes) -> None:
        self._finish()

    def _finish(self) -> None:
        """The round's end: a follow-up for a replay-only round, else the message's end."""
        self._close_all()
        output = self._output
        choice = self.ids.choice(0)
        tokens = self._carry.output_tokens + self._end.output_tokens()
        if choice.replays and not choice.delivered and self.ids.guard.enabled:
            carry = MessageCarry(next_index=output.next_index, output_tokens=tokens)
            blocks = followup_blocks(output.records)
            self.followup = RoundFollowup(list(choice.replays), blocks, carry)
            self.phase = StreamPhase.DONE
            return
        events, note = self._end.events(bool(choice.delivered), tokens)
        if note is not None:
            self.notes.append(note)
        output.out.append(events)
        self.phase = StreamPhase.DONE

    def _error(self, obj: dict[str, Any], raw: bytes) -> None:
        """The upstream's own error event ends the stream as it came."""
        self._output.out.append(encode_raw("error", raw))
        self.phase = StreamPhase.DONE

    def _passthrough(self, obj: dict[str, Any], raw: bytes) -> None:
        """ping, error and unknown events: unchanged (an index follows its block's)."""
        kind = obj.get("type")
        block = self._open.get(_key(obj)) if "index" in obj else None
        out = self._output.out
        if isinstance(block, PassBlock) and not at_index(obj, block.index):
            out.append(encode({**obj, "index": block.index}))
        elif isinstance(kind, str):
            out.append(encode_raw(kind, raw))
        else:
            out.append(encode_event(raw))

    # -- blocks: which kind an event belongs to ------------------------------------------------

    def _block_start(self, obj: dict[str, Any], raw: bytes) -> None:
        # Anthropic streams one block at a time: a new block ends any the upstream left open.
        self._close_all()
        block = obj.get("content_block")
        block = block if isinstance(block, dict) else {}
        kind = block.get("type")
        key = _key(obj)
        if kind == "tool_use":
            self._open[key] = self._tools.start(block)
        elif kind == "text" and self._scan:
            self._open[key] = self._texts.start(block)
        else:
            output = self._output
            index = output.take_index()
            record = record_of(block)
            if record is not None:
                output.records.append(record)
            self._open[key] = PassBlock(index, record)
            output.reindexed(obj, raw, index, "content_block_start")

    def _block_delta(self, obj: dict[str, Any], raw: bytes) -> None:
        block = self._block_at(_key(obj))
        if block is None:
            self._passthrough(obj, raw)
        elif isinstance(block, ToolBlock):
            self._tools.delta(block, obj, raw)
        elif isinstance(block, TextBlock):
            self._texts.delta(block, obj, raw)
        else:
            absorb(block.record, obj.get("delta"))
            self._output.reindexed(obj, raw, block.index, "content_block_delta")

    def _block_stop(self, obj: dict[str, Any], raw: bytes) -> None:
        key = _key(obj)
        if key not in self._open and len(self._open) == 1:
            key = next(iter(self._open))
        block = self._open.pop(key, None)
        if block is None:
            self.notes.append(DeltaRepaired(kind="block_stop", detail="dropped a stray stop"))
            return
        self._close(block)

    def _block_at(self, key: object) -> Block | None:
        block = self._open.get(key)  # type: ignore[call-overload]
        if block is None and len(self._open) == 1:
            return next(iter(self._open.values()))  # an index that drifted: the open block
        return block

    def _close_all(self) -> None:
        while self._open:
            _, block = self._open.popitem()
            self._close(block)

    def _close(self, block: Block) -> None:
        if isinstance(block, ToolBlock):
            self._tools.close(block)
        elif isinstance(block, TextBlock):
            self._texts.close(block)
        else:
            self._output.stop(block.index)


_HANDLERS = {
    "message_start": AnthropicStream._message_start,
    "content_block_start": AnthropicStream._block_start,
    "content_block_delta": AnthropicStream._block_delta,
    "content_block_stop": AnthropicStream._block_stop,
    "message_delta": AnthropicStream._message_delta,
    "message_stop": AnthropicStream._message_stop,
    "error": AnthropicStream._error,
}


def _key(obj: dict[str, Any]) -> object:
    """An event's block index as a key (an index no block can have, such as a list, is None)."""
    value = obj.get("index")
    return (
        value if isinstance(value, (int, str)) else None
    )  # a tuple: `int | str` is built per call


def _kept_lines(other: tuple[bytes, ...]) -> tuple[bytes, ...]:
    """An event's lines other than data, without its `event:` name (the proxy writes it)."""
    return tuple(line for line in other if not line.startswith(b"event:"))
