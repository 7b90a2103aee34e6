"""Response direction on Responses, streaming (SPEC §4, §5, §8): upstream events in, the
canonical event grammar out.

`ResponsesStream` reads one upstream round. Every event it hands out is renumbered
(`sequence_number` strictly increasing over what the client receives, across rounds) and
every item gets a dense client `output_index` in delivery order. Call items go through
`CallItem` (held while their id cannot be decided, then the canonical events); messages,
reasoning items (with their `encrypted_content`), built-in tool items and unknown events pass
unchanged but for those two numbers. `response.completed` lists exactly the items the client
saw, with the ids it saw, each as the upstream's own final event describes it where it does
(`final.py`); a body that ends without it is completed.

Phases (`_TRANSITIONS`): STREAMING --round end--> DONE (`followup` set when the round's only
calls were replays), STREAMING --trip--> FAILED (`error`). Only STREAMING takes input.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum, auto
from functools import partial
from typing import Any

import orjson

from proxy.core.decide import ResponseIds
from proxy.core.errors import ReplayLoopDetected
from proxy.core.framing import Event, EventReader
from proxy.core.guard import Replay
from proxy.core.notes import DeltaRepaired, Note
from proxy.core.sse import encode_comment, encode_event
from proxy.responses.calls import CallItem, is_call_event, is_call_item
from proxy.responses.carry import ResponseCarry, key_of
from proxy.responses.decide import decide_call, may_decide, replays_only
from proxy.responses.final import Streamed, final_items
from proxy.responses.lane import TEXT_DELTA, TextLane
from proxy.responses.textcalls import TEXT_EVENTS, MessageTextCalls


class StreamPhase(Enum):
    STREAMING = auto()
    DONE = auto()
    FAILED = auto()


class StreamStateError(RuntimeError):
    """A step the transition table does not list: a bug in the core."""


_TRANSITIONS = {
    (StreamPhase.STREAMING, StreamPhase.DONE),
    (StreamPhase.STREAMING, StreamPhase.FAILED),
}


@dataclass(frozen=True, slots=True)
class RoundFollowup:
    """A round whose only calls were replays: what the follow-up request must repeat."""

    replays: list[Replay]
    replayed_items: list[dict[str, Any]]  # the replayed calls' items, in the same order
    round_items: list[dict[str, Any]]  # the round's other items, as the upstream sent them


class ResponsesStream:
    """Sans-IO: `feed(bytes) -> list[bytes]`, `end() -> list[bytes]`; decisions in `notes`."""

    def __init__(self, ids: ResponseIds, carry: ResponseCarry, *, text_tool_calls: bool = False):
        self.ids = ids
        self.carry = carry
        self.notes: list[Note] = []
        self.followup: RoundFollowup | None = None
        self.error: ReplayLoopDetected | None = None
        self.non_json_events = 0
        self.phase = StreamPhase.STREAMING
        # OpenAI-style upstreams send `event:` + `data:` events, split without a step per line.
        self._reader = EventReader()
        self._first_round = carry.rounds == 0
        carry.rounds += 1
        self._calls: dict[object, CallItem] = {}  # by the upstream's output_index
        self._index: dict[object, int] = {}  # the upstream's output_index -> the client's
        self._open: dict[object, dict[str, Any]] = {}  # non-call items not done yet
        self._renamed: dict[object, object] = {}  # item ids repeated from an earlier round
        self._texts: dict[tuple[object, object], list[str]] = {}  # message text, by part
        # The round's other items the client got: upstream index, client index, raw item id.
        self._others: list[tuple[object, int, object]] = []
        self._replayed: list[dict[str, Any]] = []
        self._upstream_output: list[Any] = []
        self._upstream_error = False  # the upstream sent an `error` event
        # The open text part's plain deltas, taken from their bytes (lane.py); None after
        # any event the general path reads, which may change what the lane relies on.
        self._lane: TextLane | None = None
        offered = ids.facts.offered_tools
        self._text_calls = (
            MessageTextCalls(offered, self.notes, self._recovered)
            if text_tool_calls and offered
            else None
        )
        self._handlers: dict[str, Callable[[dict[str, Any], list[bytes]], None]] = {
            "response.created": self._lifecycle,
            "response.in_progress": self._lifecycle,
            "response.queued": self._lifecycle,
            "response.output_item.added": self._item_added,
            "response.output_item.done": self._item_done,
            "response.completed": self._completed,
            "response.incomplete": self._completed,
            "response.failed": self._failed,
        }

    # -- the shell's calls ---------------------------------------------------------------------

    def feed(self, data: bytes) -> list[bytes]:
        if self.phase is not StreamPhase.STREAMING:
            return []
        return self._handle(self._reader.feed(data))

    def end(self) -> list[bytes]:
        """The upstream body ended cleanly: complete what it left unfinished."""
        if self.phase is not StreamPhase.STREAMING:
            return []
        out = self._handle(self._reader.end())
        if self.phase is StreamPhase.STREAMING and self._upstream_error:
            # The upstream said what went wrong and stopped: not a response to complete.
            self._finish_items(out)
            self.carry.release(out)
            self._go(StreamPhase.DONE)
        elif self.phase is StreamPhase.STREAMING:
            try:
                self._completed({"type": "response.completed"}, out)
            except ReplayLoopDetected as exc:
                self._broken(exc)
        return out

    @property
    def nothing_released(self) -> bool:
        return not self.carry.released

    def _go(self, to: StreamPhase) -> None:
        if (self.phase, to) not in _TRANSITIONS:
            raise StreamStateError(f"no step from {self.phase.name} to {to.name}")
        self.phase = to

    # -- events --------------------------------------------------------------------------------

    def _handle(self, events: list[Event]) -> list[bytes]:
        out: list[bytes] = []
        carry = self.carry
        # One try for all of a read's events, not one per event: the breaker's exception
        # leaves the loop at the event that raised it, as a check after each event would.
        try:
            for data, other in events:
                lane = self._lane
                if lane is not None and data is not None and lane.take(data, carry, out):
                    continue
                self._lane = None
                self._event(data, other, out)
                if self.phase is not StreamPhase.STREAMING:
                    break
        except ReplayLoopDetected as exc:
            self._broken(exc)
        return out

    def _event(self, data: bytes | None, other: tuple[bytes, ...], out: list[bytes]) -> None:
        if data is None:
            out.append(encode_event(None, other))  # comments and keep-alives
            return
        if data.strip() == b"[DONE]":
            return  # not part of the Responses grammar: the body's end completes the round
        try:
            parsed = orjson.loads(data)
        except orjson.JSONDecodeError:
            self.non_json_events += 1
            self.notes.append(DeltaRepaired(kind="non_json_data"))
            out.append(encode_comment(data, other))
            return
        if not isinstance(parsed, dict):
            out.append(encode_event(data, other))
            return
        if "type" not in parsed:
            # Some relays name the event only in its `event:` line.
            named = next((line[6:].strip() for line in other if line[:6] == b"event:"), b"")
            if named:
                parsed["type"] = named.decode("utf-8", "replace")
        self._dispatch(parsed, out)

    def _broken(self, exc: ReplayLoopDetected) -> None:
        """The breaker (SPEC §5): nothing more is sent."""
        self.error = exc
        self._go(StreamPhase.FAILED)

    def _dispatch(self, event: dict[str, Any], out: list[bytes]) -> None:
        kind = event.get("type")
        kind = kind if isinstance(kind, str) else ""
        handler = self._handlers.get(kind)
        if handler is not None:
            handler(event, out)
        elif is_call_event(kind) and upstream_index(event) in self._calls:
            self._call_event(self._calls[upstream_index(event)], kind, event, out)
        elif "output_index" in event:
            self._item_event(event, out)
        else:
            self._upstream_error = self._upstream_error or kind == "error"
            self.carry.emit(event, out)  # `error` and every unknown event: renumbered only

    def _lifecycle(self, event: dict[str, Any], out: list[bytes]) -> None:
        """`response.created` and the like: the first round's are the client's; a follow-up
        round's are not forwarded (one response, SPEC §5)."""
        if not self._first_round:
            return
        response = event.get("response")
        if self.carry.envelope is None and isinstance(response, dict):
            self.carry.envelope = {
                k: response[k] for k in ("id", "created_at", "model") if k in response
            }
        self.carry.emit(event, out)

    # -- items that are not calls --------------------------------------------------------------

    def _client_index(self, upstream: object) -> int:
        index = self._index.get(upstream)
        if index is None:
            index = self._index[upstream] = self.carry.next_index
            self.carry.next_index += 1
        return index

    def _item_added(self, event: dict[str, Any], out: list[bytes]) -> None:
        item = event.get("item")
        upstream = upstream_index(event)
        if is_call_item(item):
            assert isinstance(item, dict)
            call = self._calls[upstream] = CallItem.start(item)
            self._advance(call, out)
            return
        event["output_index"] = self._client_index(upstream)
        if isinstance(item, dict):
            item_id = self.carry.call_ids.other_item_id(item.get("id"))
            if item_id != item.get("id"):
                self._renamed[upstream] = item_id
                event["item"] = item = {**item, "id": item_id}
            self._open[upstream] = item
        self.carry.emit(event, out)

    def _item_event(self, event: dict[str, Any], out: list[bytes]) -> None:
        upstream = upstream_index(event)
        kind = event.get("type")
        parsed = dict(event) if kind == TEXT_DELTA else None  # as it came, for a lane
        events = [event]
        if self._text_calls is not None and kind in TEXT_EVENTS:
            events = self._text_calls.rewrite(upstream, event)
        index = self._client_index(upstream)
        renamed = self._renamed.get(upstream)
        for each in events:
            if renamed is not None and "item_id" in each:
                each["item_id"] = renamed
            delta = each.get("delta")
            if each.get("type") == "response.output_text.delta" and isinstance(delta, str):
                part = key_of(each.get("content_index"))
                self._texts.setdefault((upstream, part), []).append(delta)
            each["output_index"] = index
            self.carry.emit(each, out)
        if parsed is not None and len(events) == 1:
            self._lane = self._text_lane(upstream, parsed, events[0])

    def _text_lane(
        self, upstream: object, parsed: dict[str, Any], client: dict[str, Any]
    ) -> TextLane | None:
        """A lane for the text deltas that follow one the general path wrote as `client`."""
        if not TextLane.fits(parsed, client):
            return None
        texts = self._texts[(upstream, key_of(client.get("content_index")))]
        if self._text_calls is None:
            return TextLane(parsed, client, None, (texts,))
        part = self._text_calls.part(upstream, client)
        if part is None:
            return None
        scanner, released = part
        return TextLane(parsed, client, scanner, (texts, released))

    def _item_done(self, event: dict[str, Any], out: list[bytes]) -> None:
        item = event.get("item")
        upstream = upstream_index(event)
        call = self._calls.get(upstream)
        if call is None and is_call_item(item):
            assert isinstance(item, dict)
            call = self._calls[upstream] = CallItem.start({**item, call_key(item): ""}, ended=True)
        if call is not None:
            if isinstance(item, dict):
                call.update_item(item)
                call.add_whole(item.get(call.key))
            call.complete = call.closed = call.item_done = True
            self._advance(call, out)
            return
        self._close_item(upstream, item if isinstance(item, dict) else None, out)

    def _close_item(self, upstream: object, item: dict[str, Any] | None, out: list[bytes]) -> None:
        """A non-call item's end: the client's `output_item.done`, and its place in the output."""
        added = self._open.pop(upstream, None)
        final = item if item is not None else self._fallback_item(upstream, added)
        raw_id = final.get("id")
        if upstream in self._renamed:
            final = {**final, "id": self._renamed[upstream]}
        if self._text_calls is not None:
            final = self._text_calls.final_item(upstream, final)
        index = self._client_index(upstream)
        self.carry.emit(
            {"type": "response.output_item.done", "output_index": index, "item": final}, out
        )
        self.carry.items[index] = final
        self._others.append((upstream, index, raw_id))
        if self._text_calls is not None:
            self._text_calls.after_item(upstream, out)

    def _fallback_item(self, upstream: object, added: dict[str, Any] | None) -> dict[str, Any]:
        """The item the upstream never finished: as its final output names it, else as it was
        added with the text the client got."""
        item = dict(added or {"type": "message", "role": "assistant"})
        if isinstance(upstream, int) and 0 <= upstream < len(self._upstream_output):
            listed = self._upstream_output[upstream]
            if isinstance(listed, dict) and _may_describe(listed, item):
                return listed
        if item.get("type") == "message":
            parts = sorted(
                (
                    (part, "".join(text))
                    for (index, part), text in self._texts.items()
                    if index == upstream
                ),
                key=_part_order,
            )
            item["content"] = [
                {"type": "output_text", "text": text, "annotations": []} for _, text in parts
            ]
        item["status"] = "completed"
        return item

    # -- calls ---------------------------------------------------------------------------------

    def _call_event(
        self, call: CallItem, kind: str, event: dict[str, Any], out: list[bytes]
    ) -> None:
        if kind == call.delta_type:
            delta = event.get("delta")
            if isinstance(delta, str):
                call.add_delta(delta)
        elif kind == call.done_type:
            call.add_whole(event.get(call.key))
            call.closed = True
        elif call.delivered:
            self._emit_for(call, event, out)
        elif not call.dropped:
            call.extra.append(event)
        self._advance(call, out)

    def _advance(self, call: CallItem, out: list[bytes]) -> None:
        """Decide the call once its id can be decided, then send what the client lacks."""
        if call.dropped:
            return
        if not call.delivered and not self._decide(call, out):
            return
        piece = call.unsent()
        if piece:
            self._emit_for(call, {"type": call.delta_type, "delta": piece}, out)
        for extra in call.extra:
            self._emit_for(call, extra, out)
        call.extra.clear()
        if call.closed and not call.done_sent:
            call.finish_text()
            piece = call.unsent()
            if piece:
                self._emit_for(call, {"type": call.delta_type, "delta": piece}, out)
            self._emit_for(call, {"type": call.done_type, call.key: call.text}, out)
            call.done_sent = True
        if call.item_done and call.done_sent and not call.item_sent:
            final = call.client_item(done=True)
            self.carry.emit(
                {"type": "response.output_item.done", "output_index": call.index, "item": final},
                out,
            )
            call.item_sent = True
            self.carry.items[call.index] = final

    def _emit_for(self, call: CallItem, event: dict[str, Any], out: list[bytes]) -> None:
        event["item_id"] = call.client_item_id
        event["output_index"] = call.index
        self.carry.emit(event, out)

    def _decide(self, call: CallItem, out: list[bytes]) -> bool:
        """True once the call is delivered (its `output_item.added` sent)."""
        if not may_decide(self.ids, call):
            return False  # held: its id waits for its arguments (SPEC §4)
        if not decide_call(self.ids, self.carry.call_ids, call, self.notes, self._replayed):
            return False
        call.index = self.carry.next_index
        self.carry.next_index += 1
        added = {"type": "response.output_item.added", "output_index": call.index}
        self.carry.emit({**added, "item": call.client_item(done=False)}, out)
        return True

    # -- the round's end -----------------------------------------------------------------------

    def _finish_items(self, out: list[bytes]) -> None:
        """Every call and item the upstream left open is completed (SPEC §4)."""
        for call in self._calls.values():
            call.closed = call.item_done = call.complete = True
            self._advance(call, out)
        for upstream in list(self._open):
            self._close_item(upstream, None, out)

    def _completed(self, event: dict[str, Any], out: list[bytes]) -> None:
        response = event.get("response")
        if isinstance(response, dict):
            listed = response.get("output")
            self._upstream_output = listed if isinstance(listed, list) else []
            self.carry.add_usage(response.get("usage"))
        self._finish_items(out)
        self._adopt_final(response)
        if replays_only(self.ids):
            replays = list(self.ids.choice(0).replays)
            round_items = [self.carry.items[index] for _, index, _ in self._others]
            self.followup = RoundFollowup(replays, self._replayed, round_items)
            self._go(StreamPhase.DONE)
            return
        kind = (
            event.get("type")
            if event.get("type") == "response.incomplete"
            else "response.completed"
        )
        status = "incomplete" if kind == "response.incomplete" else "completed"
        final = self.carry.response(response, status)
        final["output"] = self.carry.output()
        if self.carry.usage is not None:
            final["usage"] = self.carry.usage
        self.carry.emit({"type": kind, "response": final}, out)
        self.carry.release(out)
        self._go(StreamPhase.DONE)

    def _failed(self, event: dict[str, Any], out: list[bytes]) -> None:
        """The upstream's own failure ends the response as it said."""
        response = event.get("response")
        self._adopt_final(response)
        failed = self.carry.response(response, "failed")
        failed["output"] = self.carry.output()
        self.carry.emit({**event, "response": failed}, out)
        self.carry.release(out)
        self._go(StreamPhase.DONE)

    def _adopt_final(self, response: object) -> None:
        """The round's items as the upstream's final event lists them (SPEC §8, `final.py`)."""
        listed = response.get("output") if isinstance(response, dict) else None
        if not isinstance(listed, list) or not listed:
            return  # nothing newer than the stream (most servers list the items, some not)
        for index, item in final_items(self._streamed(), listed).items():
            self.carry.items[index] = item

    def _streamed(self) -> list[Streamed]:
        """What the client received in this round, as the upstream named it."""
        streamed = [
            Streamed(
                index,
                upstream,
                self.carry.items[index].get("type"),
                raw_id,
                None,
                partial(self._client_other, upstream, index),
            )
            for upstream, index, raw_id in self._others
        ]
        streamed += [
            Streamed(
                call.index, key, call.kind, call.item.get("id"), call.raw_id, call.client_final
            )
            for key, call in self._calls.items()
            if call.item_sent
        ]
        return streamed

    def _client_other(self, upstream: object, index: int, final: dict[str, Any]) -> dict[str, Any]:
        """The upstream's final description of a streamed item that is not a call: over what
        the stream said, with the id the client saw and the text it got (SPEC §8)."""
        streamed = self.carry.items[index]
        item = {**streamed, **final}
        if "id" in streamed:
            item["id"] = streamed["id"]
        else:
            item.pop("id", None)  # the client saw none
        if self._text_calls is not None:
            item = self._text_calls.final_item(upstream, item)
        return item

    def _recovered(self, upstream: object, calls: list[dict[str, Any]], out: list[bytes]) -> None:
        """Calls recovered from a message's text become call items after that message."""
        for n, item in enumerate(calls):
            key = ("text", upstream, n)
            call = self._calls[key] = CallItem.start(item)
            call.closed = call.item_done = call.complete = True
            self._advance(call, out)


def _may_describe(listed: dict[str, Any], added: dict[str, Any]) -> bool:
    """Can the final list's item at an open item's place be that item: the same type, and
    not another item's id (a relay may order its final list otherwise)?"""
    listed_id, added_id = listed.get("id"), added.get("id")
    return listed.get("type") == added.get("type") and (
        listed_id == added_id or not listed_id or not added_id
    )


def _part_order(entry: tuple[object, str]) -> tuple[int, int, str]:
    """Content parts by index; a part whose index is not a number (bad input) after them."""
    part = entry[0]
    return (0, part, "") if isinstance(part, int) else (1, 0, repr(part))


def upstream_index(event: dict[str, Any]) -> object:
    """The upstream's `output_index`, as a key (any JSON may arrive: a list is not hashable)."""
    return key_of(event.get("output_index"))


def call_key(item: dict[str, Any]) -> str:
    return "input" if item.get("type") == "custom_tool_call" else "arguments"


__all__ = ["ResponsesStream", "RoundFollowup", "StreamPhase", "StreamStateError", "encode_event"]
