"""The output items of one streamed response, as Responses events (SPEC §8, §9).

Per item, in this order: response.output_item.added, its deltas, its .done events,
response.output_item.done.

    message:    content_part.added, output_text.delta..., output_text.done, content_part.done
    reasoning:  content_part.added, reasoning_text.delta..., reasoning_text.done, ...
    function:   function_call_arguments.delta..., function_call_arguments.done
    custom:     custom_tool_call_input.delta, custom_tool_call_input.done

`output_index` is dense in the order items open. A message or reasoning item closes when
another kind of item starts; calls stay open until the choice finishes (a canonical stream
may still add to an earlier call's arguments while a later call streams), and close in
output order. A custom tool's input is sent whole when the call closes: its arguments are
`{"input": ...}` JSON until then.

The events come out as dicts, in order and not yet numbered: the stream (`stream.py`) numbers
them, sends the response's head before the first, and encodes them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from proxy.bridge.responses_chat.output import (
    Entropy,
    call_item,
    custom_input,
    message_item,
    mint,
    reasoning_item,
    status_of,
    text_part,
)
from proxy.bridge.responses_chat.tools import ClientTool, ToolTable
from proxy.bridge.text_lane import SEQ_MARK, TEXT_MARK, ChatTextLane
from proxy.responses.carry import encode

Event = dict[str, Any]


@dataclass(slots=True)
class _Message:
    item_id: str
    index: int
    # Per content part: its kind and its text's pieces (joined once, when the part closes).
    parts: list[tuple[str, list[str]]] = field(default_factory=list)

    def part(self, kind: str) -> int | None:
        for n, (have, _) in enumerate(self.parts):
            if have == kind:
                return n
        return None


@dataclass(slots=True)
class _Reasoning:
    item_id: str
    index: int
    text: str = ""


@dataclass(slots=True)
class _Call:
    item_id: str
    index: int
    call_id: str
    tool: ClientTool
    arguments: str = ""


class StreamItems:
    """Chat's deltas into items: each call appends the events it causes to `events`."""

    def __init__(self, tools: ToolTable, entropy: Entropy) -> None:
        self._tools = tools
        self._entropy = entropy
        # The Chat finish_reason once it came: the status of a message closed after it, and
        # of the response.
        self.finish: object = None
        self._output: dict[int, dict[str, Any]] = {}  # closed items, by output_index
        self._next_index = 0
        self._message: _Message | None = None
        self._reasoning: _Reasoning | None = None
        self._calls: dict[object, _Call] = {}  # open calls, by their Chat index

    def closed_output(self) -> list[dict[str, Any]]:
        """The closed items, in output order: the response's `output`."""
        return [self._output[index] for index in sorted(self._output)]

    def text_lane(self, data: bytes, event: Event, sent: bytes) -> ChatTextLane | None:
        """A lane for the chunks like the one (data `data`) written as the text delta
        `event` (numbered; its bytes `sent`), whose text the open message's part holds
        last."""
        msg = self._message
        index = event.get("content_index")
        if msg is None or not isinstance(index, int) or not 0 <= index < len(msg.parts):
            return None
        marked = encode({**event, "delta": TEXT_MARK, "sequence_number": SEQ_MARK})
        written = (sent, marked, event["sequence_number"])
        return ChatTextLane.of(data, event["delta"], written, msg.parts[index][1].append)

    # -- deltas ---------------------------------------------------------------------------------

    def reasoning_delta(self, text: str, events: list[Event]) -> None:
        self._close_message(events)
        rs = self._reasoning
        if rs is None:
            item_id = mint(self._entropy, "rs_")
            item = {"id": item_id, "type": "reasoning", "summary": [], "content": []}
            rs = self._reasoning = _Reasoning(item_id, self._open(item, events))
            part = {"type": "reasoning_text", "text": ""}
            events.append(_ref("response.content_part.added", rs, part=part))
        rs.text += text
        events.append(_ref("response.reasoning_text.delta", rs, delta=text))

    def message_delta(self, kind: str, text: str, events: list[Event]) -> None:
        self._close_reasoning(events)
        msg = self._message
        if msg is None:
            item = message_item(mint(self._entropy, "msg_"), "in_progress", None, None)
            msg = self._message = _Message(item["id"], self._open(item, events))
        content_index = msg.part(kind)
        if content_index is None:
            content_index = len(msg.parts)
            msg.parts.append((kind, []))
            part = text_part("") if kind == "output_text" else {"type": "refusal", "refusal": ""}
            events.append(_ref("response.content_part.added", msg, content_index, part=part))
        msg.parts[content_index][1].append(text)
        event = "response.output_text.delta" if kind == "output_text" else "response.refusal.delta"
        extra: dict[str, Any] = {"logprobs": []} if kind == "output_text" else {}
        events.append(_ref(event, msg, content_index, delta=text, **extra))

    def call_delta(self, delta: dict[str, Any], events: list[Event]) -> None:
        function = delta.get("function")
        function = function if isinstance(function, dict) else {}
        name, call_id = function.get("name"), delta.get("id")
        key = delta.get("index", 0)
        call = self._calls.get(key)
        if isinstance(name, str) and name and isinstance(call_id, str):
            self._close_reasoning(events)
            self._close_message(events)
            call = self._open_call(key, call_id, name, events)
        fragment = function.get("arguments")
        if call is None or not isinstance(fragment, str) or not fragment:
            return
        call.arguments += fragment
        if call.tool.kind != "custom":
            events.append(
                _ref("response.function_call_arguments.delta", call, None, delta=fragment)
            )

    # -- opening and closing --------------------------------------------------------------------

    def _open(self, item: dict[str, Any], events: list[Event]) -> int:
        index = self._next_index
        self._next_index += 1
        events.append({"type": "response.output_item.added", "output_index": index, "item": item})
        return index

    def _open_call(self, key: object, call_id: str, name: str, events: list[Event]) -> _Call:
        if key in self._calls:  # a new call at a used index: the old one is complete
            self._close_call(self._calls.pop(key), events)
        tool = self._tools.lookup(name)
        item_id = mint(self._entropy, "ctc_" if tool.kind == "custom" else "fc_")
        item = call_item(item_id, call_id, tool, "", "in_progress")
        call = _Call(item_id, self._open(item, events), call_id, tool)
        self._calls[key] = call
        return call

    def close_all(self, events: list[Event]) -> None:
        self._close_reasoning(events)
        self._close_message(events)
        for call in sorted(self._calls.values(), key=lambda c: c.index):
            self._close_call(call, events)
        self._calls.clear()

    def _close_reasoning(self, events: list[Event]) -> None:
        rs, self._reasoning = self._reasoning, None
        if rs is None:
            return
        events.append(_ref("response.reasoning_text.done", rs, text=rs.text))
        part = {"type": "reasoning_text", "text": rs.text}
        events.append(_ref("response.content_part.done", rs, part=part))
        self._done(rs.index, reasoning_item(rs.item_id, rs.text), events)

    def _close_message(self, events: list[Event]) -> None:
        msg, self._message = self._message, None
        if msg is None:
            return
        content: list[dict[str, Any]] = []
        for n, (kind, pieces) in enumerate(msg.parts):
            text = "".join(pieces)
            if kind == "output_text":
                done = _ref("response.output_text.done", msg, n, text=text, logprobs=[])
                part = text_part(text)
            else:
                done = _ref("response.refusal.done", msg, n, refusal=text)
                part = {"type": "refusal", "refusal": text}
            events.append(done)
            events.append(_ref("response.content_part.done", msg, n, part=part))
            content.append(part)
        status = status_of(self.finish)[0] if self.finish is not None else "completed"
        item = message_item(msg.item_id, status, None, None)
        item["content"] = content
        self._done(msg.index, item, events)

    def _close_call(self, call: _Call, events: list[Event]) -> None:
        item = call_item(call.item_id, call.call_id, call.tool, call.arguments, "completed")
        if call.tool.kind == "custom":
            text = custom_input(call.arguments)
            if text:
                events.append(_ref("response.custom_tool_call_input.delta", call, None, delta=text))
            events.append(_ref("response.custom_tool_call_input.done", call, None, input=text))
        else:
            done = _ref("response.function_call_arguments.done", call, None)
            done["arguments"] = call.arguments
            events.append(done)
        self._done(call.index, item, events)

    def _done(self, index: int, item: dict[str, Any], events: list[Event]) -> None:
        self._output[index] = item
        events.append({"type": "response.output_item.done", "output_index": index, "item": item})


def _ref(
    kind: str, item: _Message | _Reasoning | _Call, content_index: int | None = 0, **fields: Any
) -> Event:
    """An event about one item: its id and output index, and its content part's."""
    event: Event = {"type": kind, "item_id": item.item_id, "output_index": item.index}
    if content_index is not None:
        event["content_index"] = content_index
    event.update(fields)
    return event
