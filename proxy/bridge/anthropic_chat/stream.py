"""Response direction, streaming: the Chat exchange's canonical Chat SSE -> Anthropic's
event grammar (SPEC §9).

One transcoder serves the whole client response, across the exchange's follow-up rounds: the
Chat exchange already makes them one stream (SPEC §5: no earlier round's finish, usage or
`[DONE]`), so there is one `message_start`, indexes go on, and one `message_delta` (stop
reason, usage summed) and `message_stop` end it. What it writes:
- `message_start` (the `msg_` id the exchange drew, the upstream's model, zero usage: Chat
  reports usage only at the end) with the first event;
- blocks (`blocks.py`): `reasoning_content` / `reasoning` -> `thinking` (+ a signature that
  carries the text, `reasoning.py`), `content` / `refusal` -> `text`, `tool_calls` ->
  `tool_use` (ids `call_X` -> `toolu_X`);
- at `[DONE]`: `message_delta` with `stop_reason` and usage (`mapping.py`), `message_stop`;
- Chat comments (keep-alives) pass as SSE comments.
Once a content chunk was written as exactly one text delta of the live block, the chunks that
differ from it only in a plain text are written from their bytes (`ChatTextLane`,
proxy/bridge/text_lane.py), where the decoder holds nothing: most of a long answer, unparsed.
"""

from __future__ import annotations

from typing import Any

from proxy.anthropic.wire import encode, error_event
from proxy.bridge.anthropic_chat.blocks import TEXT, THINKING, TOOL, Block, BlockQueue
from proxy.bridge.anthropic_chat.ids import client_tool_id
from proxy.bridge.anthropic_chat.mapping import anthropic_usage, stop_reason
from proxy.bridge.text_lane import TEXT_MARK, ChatTextLane
from proxy.core.errors import ProxyError, ReplayLoopDetected
from proxy.core.nonjson import read_object
from proxy.core.sse import SSEDecoder, SSEEvent, encode_comment, utf8_safe


def message_start(message_id: str, model: str) -> dict[str, Any]:
    message: dict[str, Any] = {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 0, "output_tokens": 0},
    }
    return {"type": "message_start", "message": message}


class ChatToAnthropicStream:
    """Sans-IO: `feed(chat bytes) -> anthropic bytes`; `close()` at the response's end,
    `error(e)` for a stream that ends with an error."""

    def __init__(self, message_id: str, model: str) -> None:
        self.message_id = message_id
        self.model = model  # the request's, until the upstream names its own
        self.started = False
        self.done = False
        self._decoder = SSEDecoder()
        self._blocks = BlockQueue()
        self._tools: dict[int, Block] = {}  # a Chat call index -> its block
        self._finish_reason: object = None
        self._usage: object = None
        self._lane: ChatTextLane | None = None  # None after any event the general path reads

    def feed(self, data: bytes) -> bytes:
        if self._decoder.idle and data.endswith(b"\n\n"):
            # Whole events, each taken by the lane or read by the general path, one by one
            # (two LFs in a row end an event in any framing, as the decoder reads it).
            for line in data[:-2].split(b"\n\n"):
                lane = self._lane
                sent = lane.take(line) if lane is not None else None
                if sent is None:
                    self._read(line + b"\n\n")
                else:
                    self._blocks.out.append(sent)
            return self._take()
        self._read(data)
        return self._take()

    def _read(self, data: bytes) -> None:
        for event in self._decoder.feed(data):
            self._event(event)

    def close(self) -> bytes:
        """The Chat stream ended (its `[DONE]` went through `feed`, or it is missing)."""
        for event in self._decoder.end():
            self._event(event)
        self._finish()
        return self._take()

    def error(self, error: ProxyError) -> bytes:
        """The stream ends with Anthropic's `error` event (no `message_stop`), inside a message
        (SDKs read an error only after `message_start`) and after the live block stopped. A
        replay loop comes after a completed block, an empty text block if none went out:
        Claude Code ends its turn on an error event only then (SPEC §8), and re-sends the
        request otherwise."""
        self._lane = None
        if self.done:
            return b""
        self._start_message()
        self._blocks.close_live()
        if isinstance(error, ReplayLoopDetected) and not self._blocks.completed:
            self._blocks.empty_text_block()
        self.done = True
        return self._take() + error_event(error)

    def _take(self) -> bytes:
        return self._blocks.take()

    # -- Chat events ------------------------------------------------------------------------------

    def _event(self, event: SSEEvent) -> None:
        self._lane = None  # what it relies on may change here
        if self.done:
            return
        if event.data is None:
            comments = [line for line in event.other if line[:1] == b":"]
            if comments:
                text = b"".join(line + b"\n" for line in comments) + b"\n"
                self._blocks.out.append(utf8_safe(text))
            return
        if event.is_done:
            self._finish()
            return
        chunk = read_object(event.data)
        if chunk is None:
            # The Chat core made such a line a comment already (SPEC §4): kept as one.
            self._blocks.out.append(encode_comment(event.data, event.other))
        else:
            written = len(self._blocks.out)
            self._chunk(chunk)
            if len(self._blocks.out) == written + 1:
                self._lane = self._text_lane(event.data, chunk)

    def _chunk(self, chunk: dict[str, Any]) -> None:
        if isinstance(chunk.get("error"), dict) and not chunk.get("choices"):
            self._upstream_error(chunk["error"])
            return
        model = chunk.get("model")
        if not self.started and isinstance(model, str) and model:
            self.model = model
        self._start_message()
        if isinstance(chunk.get("usage"), dict):
            self._usage = chunk["usage"]  # the exchange reports it once, summed (SPEC §5)
        choices = chunk.get("choices")
        for choice in choices if isinstance(choices, list) else []:
            if isinstance(choice, dict) and choice.get("index", 0) == 0:
                self._choice(choice)

    def _choice(self, choice: dict[str, Any]) -> None:
        delta = choice.get("delta")
        if isinstance(delta, dict):
            blocks = self._blocks
            for key in ("reasoning_content", "reasoning"):
                if isinstance(delta.get(key), str):
                    blocks.append_text(THINKING, delta[key])
            for key in ("content", "refusal"):
                if isinstance(delta.get(key), str):
                    blocks.append_text(TEXT, delta[key])
            calls = delta.get("tool_calls")
            for call in calls if isinstance(calls, list) else []:
                if isinstance(call, dict):
                    self._call(call)
        if choice.get("finish_reason") is not None:
            self._finish_reason = choice["finish_reason"]

    def _text_lane(self, data: bytes, chunk: dict[str, Any]) -> ChatTextLane | None:
        """A lane for the chunks like `chunk` (data `data`), which wrote one event: if that
        was its content's text delta in the live text block (the queue's last)."""
        choices = chunk.get("choices")
        choice = choices[0] if isinstance(choices, list) and len(choices) == 1 else None
        delta = choice.get("delta") if isinstance(choice, dict) else None
        text = delta.get("content") if isinstance(delta, dict) else None
        queue = self._blocks.queue
        block = queue[-1] if queue else None
        if not isinstance(text, str) or block is None or block.kind != TEXT or block.index < 0:
            return None
        marked = encode(block.delta_event(TEXT_MARK))
        written = (self._blocks.out[-1], marked, 0)
        return ChatTextLane.of(data, text, written, block.content.append)

    def _call(self, call: dict[str, Any]) -> None:
        """SPEC §4's canonical deltas: one header (id, name, maybe arguments), then fragments."""
        index = call.get("index", 0)
        function = call.get("function")
        function = function if isinstance(function, dict) else {}
        arguments = function.get("arguments")
        if isinstance(call.get("id"), str) and isinstance(function.get("name"), str):
            block = Block(TOOL, client_tool_id(call["id"]), function["name"])
            self._tools[index] = self._blocks.begin(block)
        block_or_none = self._tools.get(index)
        if block_or_none is None or not isinstance(arguments, str):
            return
        if self._blocks.is_open(block_or_none):
            self._blocks.add_fragment(block_or_none, arguments)

    # -- the message's frame ----------------------------------------------------------------------

    def _start_message(self) -> None:
        if not self.started:
            self.started = True
            self._blocks.out.append(encode(message_start(self.message_id, self.model)))

    def _finish(self) -> None:
        self._lane = None
        if self.done:
            return
        self._start_message()
        self._blocks.finish()
        reason = stop_reason(self._finish_reason, self._blocks.tools_delivered)
        delta = {
            "type": "message_delta",
            "delta": {"stop_reason": reason, "stop_sequence": None},
            "usage": anthropic_usage(self._usage),
        }
        self._blocks.out.append(encode(delta) + encode({"type": "message_stop"}))
        self.done = True

    def _upstream_error(self, error: dict[str, Any]) -> None:
        """An upstream's error object inside its stream ends the client's with Anthropic's
        error event, its message kept."""
        message = error.get("message")
        self._start_message()
        self._blocks.close_live()
        body = {
            "type": "error",
            "error": {"type": "api_error", "message": str(message or "upstream stream error")},
        }
        self._blocks.out.append(encode(body))
        self.done = True
