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

import orjson

from proxy.anthropic.blocks import (
    Block,
    PassBlock,
    TextBlock,
    ToolBlock,
    absorb,
    followup_blocks,
    record_of,
)
from proxy.anthropic.wire import encode, encode_raw
from proxy.chat.decide import ResponseIds, Verdict
from proxy.chat.guard import Replay
from proxy.chat.ids import canonical_arguments, normalize_raw_id
from proxy.chat.notes import DeltaRepaired, Note
from proxy.chat.textcalls import RecoveredCall, Segment, TextCallScanner
from proxy.errors import ReplayLoopDetected
from proxy.sse import SSEDecoder, SSEEvent, encode_comment, encode_event


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


_DELTA_KEYS = frozenset({"type", "delta", "usage"})

# finish reasons that mean "the model stopped" after delivering tool_use blocks
_STOPPED = ("end_turn", None, "")


def truthful_stop_reason(delivered: bool, reason: object) -> object:
    """SPEC §8: `tool_use` after delivered tool_use blocks, `end_turn` when it claimed
    tool_use and delivered none; `max_tokens`, `pause_turn` and the rest are kept."""
    if delivered and reason in _STOPPED:
        return "tool_use"
    if not delivered and reason == "tool_use":
        return "end_turn"
    return reason


def output_tokens(usage: object) -> int:
    value = usage.get("output_tokens") if isinstance(usage, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


class AnthropicStream:
    """Feed it an upstream event stream's bytes; it returns the client's."""

    def __init__(
        self,
        ids: ResponseIds,
        *,
        carry: MessageCarry | None = None,
        text_tool_calls: bool = False,
    ):
        self._decoder = SSEDecoder()
        self.ids = ids
        self._choice = ids.choice(0)
        self.continuation = carry is not None
        self._carry = carry or MessageCarry()
        self._next = self._carry.next_index
        self._open: dict[object, Block] = {}  # upstream index -> open block
        self._scan = text_tool_calls and bool(ids.facts.offered_tools)
        self._records: list[dict[str, Any]] = []
        self._started = False  # this round's message_start arrived
        self._delta: dict[str, Any] = {}  # the message_delta's delta, held to the end
        self._delta_extra: dict[str, Any] = {}  # its other keys, kept
        self._usage: dict[str, Any] | None = None
        self._out: list[bytes] = []
        # The client's block open now (-1: none), and whether the message completed one.
        self._client_open = -1
        self._completed = self._carry.next_index > 0  # earlier rounds' blocks all closed
        self.phase = StreamPhase.STREAMING
        self.notes: list[Note] = []
        self.error: ReplayLoopDetected | None = None
        self.followup: RoundFollowup | None = None
        self.non_json_events = 0

    # -- feeding -------------------------------------------------------------------------------

    def feed(self, data: bytes) -> list[bytes]:
        if self.phase is StreamPhase.STREAMING:
            for event in self._decoder.feed(data):
                self._event(event)
                if self._over():
                    break
        return self._take()

    def end(self) -> list[bytes]:
        """The upstream body ended cleanly: complete a message it left open."""
        if self.phase is StreamPhase.STREAMING:
            for event in self._decoder.end():
                self._event(event)
                if self._over():
                    break
        if self.phase is StreamPhase.STREAMING:
            if self._started or self.continuation:
                self.notes.append(DeltaRepaired(kind="message_stop", detail="added"))
                self._guarded(self._finish)
            self.phase = StreamPhase.DONE
        return self._take()

    def _over(self) -> bool:
        return self.phase is StreamPhase.DONE

    def _take(self) -> list[bytes]:
        out, self._out = self._out, []
        return out

    def _event(self, event: SSEEvent) -> None:
        if event.data is None:
            self._out.append(encode_event(None, _kept_lines(event.other)))
            return
        try:
            obj = orjson.loads(event.data)
        except orjson.JSONDecodeError:
            obj = None
        if not isinstance(obj, dict):
            # SPEC §4: a data line that is not a JSON object becomes a comment, in place.
            self.non_json_events += 1
            self._out.append(encode_comment(event.data, _kept_lines(event.other)))
            return
        kind = obj.get("type")
        handler = _HANDLERS.get(kind if isinstance(kind, str) else "", AnthropicStream._passthrough)
        self._guarded(lambda: handler(self, obj, event.data or b""))

    def _guarded(self, step: Any) -> None:
        try:
            step()
        except ReplayLoopDetected as exc:  # the breaker (SPEC §5): nothing more is sent
            self.error = exc
            self.phase = StreamPhase.DONE

    # -- message-level events ------------------------------------------------------------------

    def _message_start(self, obj: dict[str, Any], raw: bytes) -> None:
        self._started = True
        if not self.continuation:
            self._out.append(encode_raw("message_start", raw))

    def _message_delta(self, obj: dict[str, Any], raw: bytes) -> None:
        self._close_all()
        delta = obj.get("delta")
        if isinstance(delta, dict):
            self._delta.update(delta)
        usage = obj.get("usage")
        if isinstance(usage, dict):
            self._usage = usage
        self._delta_extra.update((k, v) for k, v in obj.items() if k not in _DELTA_KEYS)

    def _message_stop(self, obj: dict[str, Any], raw: bytes) -> None:
        self._finish()

    def _finish(self) -> None:
        """The round's end: a follow-up for a replay-only round, else the message's end."""
        self._close_all()
        choice = self.ids.choice(0)
        tokens = self._carry.output_tokens + output_tokens(self._usage)
        if choice.replays and not choice.delivered and self.ids.guard.enabled:
            carry = MessageCarry(next_index=self._next, output_tokens=tokens)
            blocks = followup_blocks(self._records)
            self.followup = RoundFollowup(list(choice.replays), blocks, carry)
            self.phase = StreamPhase.DONE
            return
        reason = self._delta.get("stop_reason")
        fixed = truthful_stop_reason(bool(choice.delivered), reason)
        if fixed != reason and (reason is not None or choice.delivered):
            self.notes.append(DeltaRepaired(kind="stop_reason", detail=f"{reason} -> {fixed}"))
        delta = {"stop_sequence": None, **self._delta, "stop_reason": fixed}
        usage = {**(self._usage or {}), "output_tokens": tokens}
        self._out.append(
            encode({"type": "message_delta", **self._delta_extra, "delta": delta, "usage": usage})
        )
        self._out.append(b'event: message_stop\ndata: {"type":"message_stop"}\n\n')
        self.phase = StreamPhase.DONE

    def _error(self, obj: dict[str, Any], raw: bytes) -> None:
        """The upstream's own error event ends the stream as it came."""
        self._out.append(encode_raw("error", raw))
        self.phase = StreamPhase.DONE

    def _passthrough(self, obj: dict[str, Any], raw: bytes) -> None:
        """ping, error and unknown events: unchanged (an index follows its block's)."""
        kind = obj.get("type")
        block = self._open.get(_key(obj)) if "index" in obj else None
        if isinstance(block, PassBlock) and block.index != obj.get("index"):
            self._out.append(encode({**obj, "index": block.index}))
        elif isinstance(kind, str):
            self._out.append(encode_raw(kind, raw))
        else:
            self._out.append(encode_event(raw))

    # -- blocks --------------------------------------------------------------------------------

    def _take_index(self) -> int:
        index = self._next
        self._next += 1
        self._client_open = index  # every index taken is a block the client sees start
        return index

    def block_before_error(self) -> bytes:
        """An empty text block when the message has no completed block and none open: Claude
        Code ends the turn on an error event only after a completed block (without one it
        re-sends the request without streaming, SPEC §8)."""
        if self._completed or self._client_open >= 0:
            return b""
        index = self._take_index()
        self._stop(index)
        start = {"type": "content_block_start", "index": index}
        head = encode({**start, "content_block": {"type": "text", "text": ""}})
        return head + b"".join(self._take())

    def _block_start(self, obj: dict[str, Any], raw: bytes) -> None:
        # Anthropic streams one block at a time: a new block ends any the upstream left open.
        self._close_all()
        block = obj.get("content_block")
        block = block if isinstance(block, dict) else {}
        kind = block.get("type")
        key = _key(obj)
        if kind == "tool_use":
            self._open[key] = self._tool_start(block)
        elif kind == "text" and self._scan:
            text = TextBlock(TextCallScanner(self.ids.facts.offered_tools), {**block, "text": ""})
            self._open[key] = text
            if isinstance(block.get("text"), str) and block["text"]:
                self._text_segments(text, text.scanner.feed(block["text"]))
        else:
            index = self._take_index()
            record = record_of(block)
            if record is not None:
                self._records.append(record)
            self._open[key] = PassBlock(index, record)
            self._out.append(_reindexed(obj, raw, index, "content_block_start"))

    def _block_delta(self, obj: dict[str, Any], raw: bytes) -> None:
        block = self._block_at(_key(obj))
        if block is None:
            self._passthrough(obj, raw)
        elif isinstance(block, ToolBlock):
            self._tool_delta(block, obj, raw)
        elif isinstance(block, TextBlock):
            self._text_delta(block, obj, raw)
        else:
            absorb(block.record, obj.get("delta"))
            self._out.append(_reindexed(obj, raw, block.index, "content_block_delta"))

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
            self._tool_close(block)
        elif isinstance(block, TextBlock):
            self._text_segments(block, block.scanner.end())
            self._text_close(block)
        else:
            self._stop(block.index)

    def _stop(self, index: int) -> None:
        self._completed = True
        self._client_open = -1
        self._out.append(encode({"type": "content_block_stop", "index": index}))

    # -- tool_use blocks -----------------------------------------------------------------------

    def _tool_start(self, block: dict[str, Any]) -> ToolBlock:
        raw_id = normalize_raw_id(block.get("id"))
        tool = ToolBlock.from_start(block, raw_id)
        if tool.whole is not None:
            self.notes.append(DeltaRepaired(kind="whole_input", detail="moved into a delta"))
        if self.ids.needs_hold(self._choice, raw_id):
            tool.held = True
        else:
            self._deliver(tool)
        return tool

    def _tool_delta(self, tool: ToolBlock, obj: dict[str, Any], raw: bytes) -> None:
        delta = obj.get("delta")
        if not isinstance(delta, dict) or delta.get("type") != "input_json_delta":
            if tool.index >= 0:  # another kind of delta: passed on in the block's place
                self._out.append(_reindexed(obj, raw, tool.index, "content_block_delta"))
            return
        part = delta.get("partial_json")
        if not isinstance(part, str):
            return  # null or missing adds nothing
        if tool.whole is not None:
            tool.repeats.append(part)
            return
        tool.parts.append(part)
        if tool.index >= 0 and not tool.held and part:
            tool.sent_input = True
            self._input(tool.index, part)

    def _tool_close(self, tool: ToolBlock) -> None:
        if tool.repeats:
            same = canonical_arguments("".join(tool.repeats)) == canonical_arguments(tool.whole)
            kind = "repeated_input" if same else "conflicting_input"
            self.notes.append(DeltaRepaired(kind=kind, detail="the whole input was sent once"))
        if tool.held:
            tool.held = False
            self._deliver(tool)
        if tool.index < 0:
            return  # a replay or a duplicate: the client never sees it
        if not tool.sent_input:
            self._input(tool.index, "{}")
            self.notes.append(DeltaRepaired(kind="empty_input", detail="{}"))
        self._stop(tool.index)

    def _deliver(self, tool: ToolBlock) -> None:
        """Decide the call's client id (SPEC §2) and send its start with what input it has."""
        decision = self.ids.decide(self._choice, tool.raw_id, tool)
        tool.decision = decision
        if decision.verdict is not Verdict.DELIVER:
            self.notes.append(decision.dropped(0, tool.name, tool.raw_id))
            return
        tool.index = self._take_index()
        if (note := tool.rewritten(decision)) is not None:
            self.notes.append(note)
        start = {"type": "content_block_start", "index": tool.index}
        self._out.append(encode({**start, "content_block": tool.start_block(decision.client_id)}))
        text = tool.whole if tool.whole is not None else "".join(tool.parts)
        if text:
            tool.sent_input = True
            self._input(tool.index, text)

    def _input(self, index: int, part: str) -> None:
        delta = {"type": "input_json_delta", "partial_json": part}
        self._out.append(encode({"type": "content_block_delta", "index": index, "delta": delta}))

    # -- text blocks with leaked tool calls ----------------------------------------------------

    def _text_delta(self, text: TextBlock, obj: dict[str, Any], raw: bytes) -> None:
        delta = obj.get("delta")
        if isinstance(delta, dict) and delta.get("type") == "text_delta":
            value = delta.get("text")
            if isinstance(value, str) and value:
                self._text_segments(text, text.scanner.feed(value))
            return
        self._text_open(text)  # citations and other deltas: in the open text block
        self._out.append(_reindexed(obj, raw, text.index, "content_block_delta"))

    def _text_segments(self, text: TextBlock, segments: list[Segment]) -> None:
        for segment in segments:
            if isinstance(segment, str):
                self._text_open(text)
                text.text.append(segment)
                delta = {"type": "text_delta", "text": segment}
                self._out.append(
                    encode({"type": "content_block_delta", "index": text.index, "delta": delta})
                )
            else:
                self._text_close(text)
                self._recovered(segment)

    def _text_open(self, text: TextBlock) -> None:
        if text.index < 0:
            text.index = self._take_index()
            start = {"type": "content_block_start", "index": text.index}
            self._out.append(encode({**start, "content_block": text.start}))

    def _text_close(self, text: TextBlock) -> None:
        if text.index >= 0:
            self._records.append({**text.start, "text": "".join(text.text)})
            text.text = []
            self._stop(text.index)
            text.index = -1

    def _recovered(self, call: RecoveredCall) -> None:
        """A call found in the text: a tool_use block of its own, decided whole."""
        self.notes.append(DeltaRepaired(kind="text_tool_call", detail=call.format))
        tool = ToolBlock(normalize_raw_id(call.raw_id), call.name, whole=call.arguments)
        self._deliver(tool)
        self._tool_close(tool)


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
    return value if isinstance(value, int | str) else None


def _kept_lines(other: tuple[bytes, ...]) -> tuple[bytes, ...]:
    """An event's lines other than data, without its `event:` name (the proxy writes it)."""
    return tuple(line for line in other if not line.startswith(b"event:"))


def _reindexed(obj: dict[str, Any], raw: bytes, index: int, kind: str) -> bytes:
    """The event at the client's index: its own bytes when the index is already right."""
    if obj.get("index") == index:
        return encode_raw(kind, raw)
    return encode({**obj, "index": index})
