"""The Chat exchange's canonical stream as Responses events (SPEC §8, §9).

Input: whole Chat SSE events (`data: {chunk}`, comments, `data: [DONE]`), one stream across
follow-up rounds (the Chat exchange already merged them: one role delta, one finish, one
usage chunk). Output, in Responses' grammar:

    response.created, response.in_progress            (held until something visible, SPEC §5)
    per item: response.output_item.added, its deltas, its .done events, output_item.done
      (`stream_items.py`: each kind's events, and when an item opens and closes)
    response.completed (or response.incomplete) with the whole `output` and usage

`sequence_number` strictly increases. SSE comments (keep-alives) pass as comments, at once.

Once the general path has written one content chunk as exactly one text delta, the chunks
that differ from it only in a plain text are written from their bytes (`ChatTextLane`,
proxy/bridge/text_lane.py), where the decoder holds nothing: most of a long answer,
unparsed.
"""

from __future__ import annotations

from typing import Any

from proxy.bridge.responses_chat.output import (
    Entropy,
    ResponseHead,
    responses_usage,
    status_of,
)
from proxy.bridge.responses_chat.stream_items import Event, StreamItems
from proxy.bridge.text_lane import ChatTextLane
from proxy.core.errors import ProxyError, ReplayLoopDetected
from proxy.core.nonjson import read_object
from proxy.core.sse import SSEDecoder, SSEEvent, encode_comment, utf8_safe
from proxy.responses.carry import encode
from proxy.responses.exchange import LOOP_FAILURE_CODE, loop_message


class ResponsesOverChatStream:
    """Feed it the Chat exchange's bytes; it hands back the client's Responses bytes."""

    def __init__(self, head: ResponseHead, entropy: Entropy) -> None:
        self.head = head
        self._items = StreamItems(head.tools, entropy)
        self._decoder = SSEDecoder()
        self._seq = 0
        self._started = False  # response.created and response.in_progress went out
        self.released = False  # some bytes went to the client
        self.ended = False
        self._usage: object = None
        self._lane: ChatTextLane | None = None  # None after any event the general path reads

    # -- the exchange's calls ------------------------------------------------------------------

    def feed(self, data: bytes) -> bytes:
        if self._decoder.idle and data.endswith(b"\n\n"):
            return self._by_event(data)
        out: list[bytes] = []
        for event in self._decoder.feed(data):
            self._event(event, out)
        return b"".join(out)

    def _by_event(self, data: bytes) -> bytes:
        """Whole events, each taken by the lane or read by the general path (one by one: an
        event the general path reads may open the lane for the next). Two LFs in a row end
        an event in any framing (the first ends a line, a CRLF's too, the second is a blank
        line), so the pieces between them are what the decoder would read as events."""
        out: list[bytes] = []
        for line in data[:-2].split(b"\n\n"):
            lane = self._lane
            sent = lane.take(line, self._seq) if lane is not None else None
            if sent is None:
                for event in self._decoder.feed(line + b"\n\n"):
                    self._event(event, out)
            else:
                self._seq += 1
                self.released = True
                out.append(sent)
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
        self._lane = None  # what it relies on may change here
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
        chunk = read_object(event.data)
        if chunk is None:
            # The Chat core made such a line a comment already (SPEC §4): kept as one.
            out.append(encode_comment(event.data, event.other))
            self.released = True
        elif isinstance(chunk.get("error"), dict):
            error = chunk["error"]
            code = error.get("code") if isinstance(error.get("code"), str) else "server_error"
            self._failed({"code": code, "message": str(error.get("message") or "")}, out)
        else:
            written = self._chunk(chunk, out)
            if len(written) == 1 and written[0]["type"] == "response.output_text.delta":
                # A chunk whose only event is a text delta: the next like it need no parse.
                self._lane = self._items.text_lane(event.data, written[0], out[-1])

    def _chunk(self, chunk: dict[str, Any], out: list[bytes]) -> list[Event]:
        """Decide a chunk; the events it wrote (numbered)."""
        self.head.adopt(chunk)
        if isinstance(chunk.get("usage"), dict):
            self._usage = chunk["usage"]
        written: list[Event] = []
        choices = chunk.get("choices")
        for choice in choices if isinstance(choices, list) else ():
            if isinstance(choice, dict) and choice.get("index", 0) == 0:
                written += self._choice(choice, out)
        return written

    def _choice(self, choice: dict[str, Any], out: list[bytes]) -> list[Event]:
        events: list[Event] = []
        delta = choice.get("delta")
        if isinstance(delta, dict):
            reasoning = delta.get("reasoning_content") or delta.get("reasoning")
            if isinstance(reasoning, str) and reasoning:
                self._items.reasoning_delta(reasoning, events)
            for kind, key in (("output_text", "content"), ("refusal", "refusal")):
                text = delta.get(key)
                if isinstance(text, str) and text:
                    self._items.message_delta(kind, text, events)
            calls = delta.get("tool_calls")
            for call in calls if isinstance(calls, list) else ():
                if isinstance(call, dict):
                    self._items.call_delta(call, events)
        if choice.get("finish_reason") is not None:
            self._items.finish = choice["finish_reason"]
            self._items.close_all(events)
        self._emit(events, out)
        return events

    # -- the end -------------------------------------------------------------------------------

    def _complete(self, out: list[bytes]) -> None:
        self._lane = None
        events: list[Event] = []
        self._items.close_all(events)
        status, reason = status_of(self._items.finish)
        response = self.head.response(
            status, self._items.closed_output(), responses_usage(self._usage), reason
        )
        kind = "response.completed" if status == "completed" else "response.incomplete"
        events.append({"type": kind, "response": response})
        self._emit(events, out)
        self.ended = True

    def _failed(self, error: dict[str, Any], out: list[bytes]) -> None:
        self._lane = None
        output = self._items.closed_output()
        response = self.head.response("failed", output, responses_usage(self._usage))
        response["error"] = error
        self._emit([{"type": "response.failed", "response": response}], out)
        self.ended = True

    # -- output --------------------------------------------------------------------------------

    def _emit(self, events: list[Event], out: list[bytes]) -> None:
        """Number the events and hand them out; the response's head goes first, with them."""
        if not events:
            return
        if not self._started:
            self._started = True
            created = self.head.response("in_progress", [])
            for kind in ("response.created", "response.in_progress"):
                self._number_and_encode({"type": kind, "response": created}, out)
        for event in events:
            self._number_and_encode(event, out)
        self.released = True

    def _number_and_encode(self, event: Event, out: list[bytes]) -> None:
        event["sequence_number"] = self._seq
        self._seq += 1
        out.append(encode(event))
