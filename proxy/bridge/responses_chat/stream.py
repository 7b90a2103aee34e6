"""The Chat exchange's canonical stream as Responses events (SPEC §8, §9).

Input: whole Chat SSE events (`data: {chunk}`, comments, `data: [DONE]`), one stream across
follow-up rounds (the Chat exchange already merged them: one role delta, one finish, one
usage chunk). Output, in Responses' grammar:

    response.created, response.in_progress            (held until something visible, SPEC §5)
    per item: response.output_item.added, its deltas, its .done events, output_item.done
      message:    content_part.added, output_text.delta..., output_text.done, content_part.done
      reasoning:  content_part.added, reasoning_text.delta..., reasoning_text.done, ...
      function:   function_call_arguments.delta..., function_call_arguments.done
      custom:     custom_tool_call_input.delta, custom_tool_call_input.done
    response.completed (or response.incomplete) with the whole `output` and usage

`sequence_number` strictly increases; `output_index` is dense in the order items open. A
message or reasoning item closes when another kind of item starts; calls stay open until the
choice finishes (a canonical stream may still add to an earlier call's arguments while a
later call streams), and close in output order. A custom tool's input is sent whole when the
call closes: its arguments are `{"input": ...}` JSON until then. SSE comments (keep-alives)
pass as comments, at once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from proxy.bridge.responses_chat.output import (
    Entropy,
    ResponseHead,
    call_item,
    custom_input,
    message_item,
    mint,
    reasoning_item,
    responses_usage,
    status_of,
    text_part,
)
from proxy.bridge.responses_chat.tools import ClientTool
from proxy.core.errors import ProxyError, ReplayLoopDetected
from proxy.core.sse import SSEDecoder, SSEEvent, utf8_safe
from proxy.responses.carry import encode
from proxy.responses.exchange import LOOP_FAILURE_CODE, loop_message


@dataclass(slots=True)
class _Message:
    item_id: str
    index: int
    parts: list[list[str]] = field(default_factory=list)  # [kind, text] per content part

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


class ResponsesStream:
    """Feed it the Chat exchange's bytes; it hands back the client's Responses bytes."""

    def __init__(self, head: ResponseHead, entropy: Entropy) -> None:
        self.head = head
        self._entropy = entropy
        self._decoder = SSEDecoder()
        self._seq = 0
        self._started = False  # response.created and response.in_progress went out
        self.released = False  # some bytes went to the client
        self.ended = False
        self._output: dict[int, dict[str, Any]] = {}  # closed items, by output_index
        self._next_index = 0
        self._message: _Message | None = None
        self._reasoning: _Reasoning | None = None
        self._calls: dict[object, _Call] = {}  # open calls, by their Chat index
        self._finish: object = None
        self._usage: object = None

    # -- the exchange's calls ------------------------------------------------------------------

    def feed(self, data: bytes) -> bytes:
        out: list[bytes] = []
        for event in self._decoder.feed(data):
            self._event(event, out)
        return b"".join(out)

    def finish(self) -> bytes:
        """The Chat stream ended: whatever is still open closes, and the response completes."""
        out: list[bytes] = []
        for event in self._decoder.end():
            self._event(event, out)
        if not self.ended:
            self._complete(out)
        return b"".join(out)

    def fail(self, error: ProxyError) -> bytes:
        """`response.failed` after what the client has (SPEC §8: a loop's code is
        `invalid_prompt`, which Codex treats as final)."""
        if self.ended:
            return b""
        if isinstance(error, ReplayLoopDetected):
            body = {"code": LOOP_FAILURE_CODE, "message": loop_message(error)}
        else:
            body = {"code": error.code or "server_error", "message": error.message}
        out: list[bytes] = []
        self._failed(body, out)
        return b"".join(out)

    # -- input ---------------------------------------------------------------------------------

    def _event(self, event: SSEEvent, out: list[bytes]) -> None:
        if self.ended:
            return
        if event.data is None:
            comments = [line for line in event.other if line[:1] == b":"]
            if comments:
                out.append(utf8_safe(b"".join(line + b"\n" for line in comments) + b"\n"))
                self.released = True
            return
        if event.is_done:
            self._complete(out)
            return
        try:
            chunk = orjson.loads(event.data)
        except orjson.JSONDecodeError:
            chunk = None
        if not isinstance(chunk, dict):
            out.append(utf8_safe(b": " + event.data.replace(b"\n", b"\n: ") + b"\n\n"))
            self.released = True
        elif isinstance(chunk.get("error"), dict):
            error = chunk["error"]
            code = error.get("code") if isinstance(error.get("code"), str) else "server_error"
            self._failed({"code": code, "message": str(error.get("message") or "")}, out)
        else:
            self._chunk(chunk, out)

    def _chunk(self, chunk: dict[str, Any], out: list[bytes]) -> None:
        self.head.adopt(chunk)
        if isinstance(chunk.get("usage"), dict):
            self._usage = chunk["usage"]
        choices = chunk.get("choices")
        for choice in choices if isinstance(choices, list) else ():
            if isinstance(choice, dict) and choice.get("index", 0) == 0:
                self._choice(choice, out)

    def _choice(self, choice: dict[str, Any], out: list[bytes]) -> None:
        delta = choice.get("delta")
        if isinstance(delta, dict):
            reasoning = delta.get("reasoning_content") or delta.get("reasoning")
            if isinstance(reasoning, str) and reasoning:
                self._reasoning_delta(reasoning, out)
            for kind, key in (("output_text", "content"), ("refusal", "refusal")):
                text = delta.get(key)
                if isinstance(text, str) and text:
                    self._message_delta(kind, text, out)
            calls = delta.get("tool_calls")
            for call in calls if isinstance(calls, list) else ():
                if isinstance(call, dict):
                    self._call_delta(call, out)
        if choice.get("finish_reason") is not None:
            self._finish = choice["finish_reason"]
            self._close_all(out)

    # -- items ---------------------------------------------------------------------------------

    def _open(self, item: dict[str, Any], out: list[bytes]) -> int:
        index = self._next_index
        self._next_index += 1
        self._emit({"type": "response.output_item.added", "output_index": index, "item": item}, out)
        return index

    def _reasoning_delta(self, text: str, out: list[bytes]) -> None:
        self._close_message(out)
        rs = self._reasoning
        if rs is None:
            item_id = mint(self._entropy, "rs_")
            item = {"id": item_id, "type": "reasoning", "summary": [], "content": []}
            rs = self._reasoning = _Reasoning(item_id, self._open(item, out))
            part = {"type": "reasoning_text", "text": ""}
            self._emit(self._ref("response.content_part.added", rs, part=part), out)
        rs.text += text
        self._emit(self._ref("response.reasoning_text.delta", rs, delta=text), out)

    def _message_delta(self, kind: str, text: str, out: list[bytes]) -> None:
        self._close_reasoning(out)
        msg = self._message
        if msg is None:
            item = message_item(mint(self._entropy, "msg_"), "in_progress", None, None)
            msg = self._message = _Message(item["id"], self._open(item, out))
        content_index = msg.part(kind)
        if content_index is None:
            content_index = len(msg.parts)
            msg.parts.append([kind, ""])
            part = text_part("") if kind == "output_text" else {"type": "refusal", "refusal": ""}
            self._emit(self._ref("response.content_part.added", msg, content_index, part=part), out)
        msg.parts[content_index][1] += text
        event = "response.output_text.delta" if kind == "output_text" else "response.refusal.delta"
        extra: dict[str, Any] = {"logprobs": []} if kind == "output_text" else {}
        self._emit(self._ref(event, msg, content_index, delta=text, **extra), out)

    def _call_delta(self, delta: dict[str, Any], out: list[bytes]) -> None:
        function = delta.get("function")
        function = function if isinstance(function, dict) else {}
        name, call_id = function.get("name"), delta.get("id")
        key = delta.get("index", 0)
        call = self._calls.get(key)
        if isinstance(name, str) and name and isinstance(call_id, str):
            self._close_reasoning(out)
            self._close_message(out)
            call = self._open_call(key, call_id, name, out)
        fragment = function.get("arguments")
        if call is None or not isinstance(fragment, str) or not fragment:
            return
        call.arguments += fragment
        if call.tool.kind != "custom":
            event = self._ref("response.function_call_arguments.delta", call, None, delta=fragment)
            self._emit(event, out)

    def _open_call(self, key: object, call_id: str, name: str, out: list[bytes]) -> _Call:
        if key in self._calls:  # a new call at a used index: the old one is complete
            self._close_call(self._calls.pop(key), out)
        tool = self.head.tools.lookup(name)
        item_id = mint(self._entropy, "ctc_" if tool.kind == "custom" else "fc_")
        item = call_item(item_id, call_id, tool, "", "in_progress")
        call = _Call(item_id, self._open(item, out), call_id, tool)
        self._calls[key] = call
        return call

    # -- closing -------------------------------------------------------------------------------

    def _close_all(self, out: list[bytes]) -> None:
        self._close_reasoning(out)
        self._close_message(out)
        for call in sorted(self._calls.values(), key=lambda c: c.index):
            self._close_call(call, out)
        self._calls.clear()

    def _close_reasoning(self, out: list[bytes]) -> None:
        rs, self._reasoning = self._reasoning, None
        if rs is None:
            return
        self._emit(self._ref("response.reasoning_text.done", rs, text=rs.text), out)
        part = {"type": "reasoning_text", "text": rs.text}
        self._emit(self._ref("response.content_part.done", rs, part=part), out)
        self._done(rs.index, reasoning_item(rs.item_id, rs.text), out)

    def _close_message(self, out: list[bytes]) -> None:
        msg, self._message = self._message, None
        if msg is None:
            return
        content: list[dict[str, Any]] = []
        for n, (kind, text) in enumerate(msg.parts):
            if kind == "output_text":
                done = self._ref("response.output_text.done", msg, n, text=text, logprobs=[])
                part = text_part(text)
            else:
                done = self._ref("response.refusal.done", msg, n, refusal=text)
                part = {"type": "refusal", "refusal": text}
            self._emit(done, out)
            self._emit(self._ref("response.content_part.done", msg, n, part=part), out)
            content.append(part)
        status = status_of(self._finish)[0] if self._finish is not None else "completed"
        item = message_item(msg.item_id, status, None, None)
        item["content"] = content
        self._done(msg.index, item, out)

    def _close_call(self, call: _Call, out: list[bytes]) -> None:
        item = call_item(call.item_id, call.call_id, call.tool, call.arguments, "completed")
        if call.tool.kind == "custom":
            text = custom_input(call.arguments)
            if text:
                self._emit(
                    self._ref("response.custom_tool_call_input.delta", call, None, delta=text), out
                )
            self._emit(
                self._ref("response.custom_tool_call_input.done", call, None, input=text), out
            )
        else:
            done = self._ref("response.function_call_arguments.done", call, None)
            done["arguments"] = call.arguments
            self._emit(done, out)
        self._done(call.index, item, out)

    def _done(self, index: int, item: dict[str, Any], out: list[bytes]) -> None:
        self._output[index] = item
        self._emit({"type": "response.output_item.done", "output_index": index, "item": item}, out)

    def _complete(self, out: list[bytes]) -> None:
        self._close_all(out)
        status, reason = status_of(self._finish)
        response = self.head.response(
            status, self._closed_output(), responses_usage(self._usage), reason
        )
        kind = "response.completed" if status == "completed" else "response.incomplete"
        self._emit({"type": kind, "response": response}, out)
        self.ended = True

    def _failed(self, error: dict[str, Any], out: list[bytes]) -> None:
        response = self.head.response("failed", self._closed_output(), responses_usage(self._usage))
        response["error"] = error
        self._emit({"type": "response.failed", "response": response}, out)
        self.ended = True

    def _closed_output(self) -> list[dict[str, Any]]:
        return [self._output[index] for index in sorted(self._output)]

    # -- output --------------------------------------------------------------------------------

    @staticmethod
    def _ref(
        kind: str, item: _Message | _Reasoning | _Call, content_index: int | None = 0, **fields: Any
    ) -> dict[str, Any]:
        event: dict[str, Any] = {"type": kind, "item_id": item.item_id, "output_index": item.index}
        if content_index is not None:
            event["content_index"] = content_index
        event.update(fields)
        return event

    def _emit(self, event: dict[str, Any], out: list[bytes]) -> None:
        """Number the event and hand it out; the response's head goes first, with it."""
        if not self._started:
            self._started = True
            created = self.head.response("in_progress", [])
            for kind in ("response.created", "response.in_progress"):
                self._number_and_encode({"type": kind, "response": created}, out)
        self._number_and_encode(event, out)
        self.released = True

    def _number_and_encode(self, event: dict[str, Any], out: list[bytes]) -> None:
        event["sequence_number"] = self._seq
        self._seq += 1
        out.append(encode(event))
