"""Response direction on Responses, streaming (SPEC §4, §5, §8): upstream events in, the
canonical event grammar out.

`ResponsesStream` reads one upstream round and says how it ends. Every event it hands out
is renumbered (`sequence_number` strictly increasing over what the client receives, across
rounds) and every item gets a dense client `output_index` in delivery order. Call items go
through `RoundCalls` (callflow.py: held while their id cannot be decided, then the canonical
events); messages, reasoning items (with their `encrypted_content`), built-in tool items
(`RoundItems`, items.py) and unknown events pass unchanged but for those two numbers.
`response.completed` lists exactly the items the client saw, with the ids it saw, each as
the upstream's own final event describes it where it does (`final.py`); a body that ends
without it is completed.

Reads: the events a rule needs are parsed (lifecycle, items, calls, and a text part's first
delta); once a text part's lane is open, the runs of its plain deltas that follow are taken
from the read's bytes (`TextLane.take_run`, runs.py) and sent as they came, or renumbered,
without being split into events or parsed; a read that is one such delta (a paced model's
read, nearly every delta of a real stream) is handed on as the very bytes that came
(`TextLane.take_whole`, asked in `feed` itself: a call less per delta). Runs and such reads
are only taken where the reader holds no part of an event (the bytes it had end with a
blank line).

Phases (`_TRANSITIONS`): STREAMING --round end--> DONE (`followup` set when the round's only
calls were replays), STREAMING --trip--> FAILED (`error`). Only STREAMING takes input.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum, auto
from typing import Any

from proxy.core.decide import ResponseIds
from proxy.core.errors import CallBoundExceeded, ReplayLoopDetected
from proxy.core.framing import Event, EventReader
from proxy.core.guard import Replay
from proxy.core.nonjson import NonJsonRule, read_object
from proxy.core.notes import Note
from proxy.core.sse import encode_event
from proxy.responses.callflow import RoundCalls
from proxy.responses.calls import CallItem, is_call_event, is_call_item
from proxy.responses.carry import ResponseCarry, key_of
from proxy.responses.decide import replays_only
from proxy.responses.final import final_items
from proxy.responses.items import RoundItems
from proxy.responses.runs import HEAD
from proxy.responses.textcalls import MessageTextCalls


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
        self.non_json = NonJsonRule(self.notes)
        self.phase = StreamPhase.STREAMING
        # OpenAI-style upstreams send `event:` + `data:` events, split without a step per line.
        self._reader = EventReader()
        self._idle = True  # the reader holds no part of an event: a run may begin here
        self._cut = b""  # the start of a text delta the last read cut (`_cut_delta`)
        self._first_round = carry.rounds == 0
        carry.rounds += 1
        self._upstream_error = False  # the upstream sent an `error` event
        self._calls = RoundCalls(ids, carry, self.notes)
        offered = ids.facts.offered_tools
        text_calls = (
            MessageTextCalls(offered, self.notes, self._calls.recovered)
            if text_tool_calls and offered
            else None
        )
        self._items = RoundItems(carry, text_calls)
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
        lane = self._items.lane
        if (
            lane is not None
            and self._idle
            and not self._cut
            and self.phase is StreamPhase.STREAMING
            and lane.take_whole(data, self.carry)
        ):
            # The read is one plain delta of the open lane (a paced model's read, nearly
            # every delta of a real stream), taken whole: it goes out as it came. Only where
            # neither the reader nor a cut delta holds bytes, which the read's would end.
            return [data]
        if self._cut:
            data, self._cut = self._cut + data, b""
        return self._pieces(data)

    def _pieces(self, data: bytes) -> list[bytes]:
        """A read from its start: runs of the lane's deltas taken, the rest read in pieces
        (each up to where a run may begin) by the reader and the general path."""
        out: list[bytes] = []
        pos, size = 0, len(data)
        runs = _RUNS_PER_READ
        while pos < size and self.phase is StreamPhase.STREAMING:
            lane = self._items.lane
            if lane is not None and self._idle and runs:
                runs -= 1
                taken = lane.take_run(data, pos, self.carry, out)
                if taken > pos:
                    pos = taken
                    continue
                end = _event_end(data, pos)  # the event there is the general path's
            elif lane is None:
                end = _text_delta_end(data, pos)  # a lane may open after it
            else:
                end = _event_end(data, pos) if runs and not self._idle else size
            piece = data if pos == 0 and end == size else data[pos:end]
            if not self._read(piece, out):
                break
            pos = end
        return out

    def end(self) -> list[bytes]:
        """The upstream body ended cleanly: complete what it left unfinished."""
        if self.phase is not StreamPhase.STREAMING:
            return []
        out: list[bytes] = []
        if self._cut:
            self._handle(self._reader.feed(self._cut), out)
            self._cut = b""
        self._handle(self._reader.end(), out)
        if self.phase is StreamPhase.STREAMING and self._upstream_error:
            # The upstream said what went wrong and stopped: not a response to complete.
            self._finish_items(out)
            self.carry.release(out)
            self._go(StreamPhase.DONE)
        elif self.phase is StreamPhase.STREAMING:
            try:
                self._completed({"type": "response.completed"}, out)
            except (ReplayLoopDetected, CallBoundExceeded) as exc:
                self._broken(exc)
        return out

    def _read(self, piece: bytes, out: list[bytes]) -> bool:
        """A piece of a read for the reader; False: a text delta the read cut, held for the
        next read, whose run then begins with it."""
        if self._idle and self._items.lane is not None and _cut_delta(piece):
            self._cut = piece
            return False
        self._handle(self._reader.feed(piece), out)
        self._idle = piece.endswith(b"\n\n")
        return True

    @property
    def nothing_released(self) -> bool:
        return not self.carry.released

    def _go(self, to: StreamPhase) -> None:
        if (self.phase, to) not in _TRANSITIONS:
            raise StreamStateError(f"no step from {self.phase.name} to {to.name}")
        self.phase = to

    # -- events --------------------------------------------------------------------------------

    def _handle(self, events: list[Event], out: list[bytes]) -> None:
        carry, items = self.carry, self._items
        # One try for all of a read's events, not one per event: the breaker's exception
        # leaves the loop at the event that raised it, as a check after each event would.
        try:
            for data, other in events:
                lane = items.lane
                if lane is not None and data is not None and lane.take(data, carry, out):
                    continue
                items.lane = None
                self._event(data, other, out)
                if self.phase is not StreamPhase.STREAMING:
                    break
        except (ReplayLoopDetected, CallBoundExceeded) as exc:
            self._broken(exc)

    def _event(self, data: bytes | None, other: tuple[bytes, ...], out: list[bytes]) -> None:
        if data is None:
            out.append(encode_event(None, other))  # comments and keep-alives
            return
        if data.strip() == b"[DONE]":
            return  # not part of the Responses grammar: the body's end completes the round
        parsed = read_object(data)
        if parsed is None:
            self._not_json(data, other, out)
            return
        if "type" not in parsed:
            # Some relays name the event only in its `event:` line.
            named = next((line[6:].strip() for line in other if line[:6] == b"event:"), b"")
            if named:
                parsed["type"] = named.decode("utf-8", "replace")
        self._dispatch(parsed, out)

    def _not_json(self, data: bytes, other: tuple[bytes, ...], out: list[bytes]) -> None:
        """SPEC §4: a data line that is not a JSON object becomes a comment in its place (after
        the quiet events the head holds, with which it waits), or ends the round inside an
        open call (`broken`: the exchange ends the client's stream)."""
        comment = self.non_json.answer(data, other, self._call_open())
        if comment is None:
            self._go(StreamPhase.FAILED)
        elif self.carry.released:
            out.append(comment)
        else:
            self.carry.pending.append(comment)

    def _call_open(self) -> bool:
        """A call whose arguments are not whole yet, or text a scanner holds as a possible
        call."""
        if any(not call.complete for call in self._calls.calls.values()):
            return True
        text_calls = self._items.text_calls
        return text_calls is not None and text_calls.in_call()

    def _broken(self, exc: ReplayLoopDetected | CallBoundExceeded) -> None:
        """The breaker (SPEC §5), or a call past its bound (§6: `broken`): nothing more is sent."""
        if isinstance(exc, CallBoundExceeded):
            self.non_json.broken = exc
        else:
            self.error = exc
        self._go(StreamPhase.FAILED)

    def _dispatch(self, event: dict[str, Any], out: list[bytes]) -> None:
        kind = event.get("type")
        kind = kind if isinstance(kind, str) else ""
        handler = self._handlers.get(kind)
        calls = self._calls.calls
        if handler is not None:
            handler(event, out)
        elif (
            calls
            and (is_call_event(kind) or "output_index" in event)
            and upstream_index(event) in calls
        ):
            # Any event at a call's index is the call's: its client index and item id, and
            # held or dropped with it (an unknown kind too, not a new index for it).
            self._calls.event(calls[upstream_index(event)], kind, event, out)
        elif "output_index" in event:
            self._items.event(upstream_index(event), event, out)
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

    def _item_added(self, event: dict[str, Any], out: list[bytes]) -> None:
        item = event.get("item")
        upstream = upstream_index(event)
        if is_call_item(item):
            assert isinstance(item, dict)
            self._calls.added(upstream, item, out)
        else:
            self._items.added(upstream, event, out)

    def _item_done(self, event: dict[str, Any], out: list[bytes]) -> None:
        item = event.get("item")
        upstream = upstream_index(event)
        calls = self._calls.calls
        call = calls.get(upstream)
        if call is None and is_call_item(item):
            assert isinstance(item, dict)
            call = calls[upstream] = CallItem.start({**item, call_key(item): ""}, ended=True)
        if call is not None:
            self._calls.done(call, item, out)
        else:
            self._items.close(upstream, item if isinstance(item, dict) else None, out)

    # -- the round's end -----------------------------------------------------------------------

    def _finish_items(self, out: list[bytes]) -> None:
        """Every call and item the upstream left open is completed (SPEC §4)."""
        self._calls.finish(out)
        for upstream in self._items.open:
            self._items.close(upstream, None, out)

    def _completed(self, event: dict[str, Any], out: list[bytes]) -> None:
        response = event.get("response")
        if isinstance(response, dict):
            listed = response.get("output")
            self._items.upstream_output = listed if isinstance(listed, list) else []
            self.carry.add_usage(response.get("usage"))
        self._finish_items(out)
        self._adopt_final(response)
        if replays_only(self.ids):
            replays = list(self.ids.choice(0).replays)
            round_items = self._items.round_items()
            self.followup = RoundFollowup(replays, self._calls.replayed, round_items)
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
        streamed = [*self._items.streamed(), *self._calls.streamed()]
        for index, item in final_items(streamed, listed).items():
            self.carry.items[index] = item


# Runs of text deltas looked for in one read at most this many times: a read whose deltas
# keep failing the runs' checks goes to the general path whole, as it would without runs.
_RUNS_PER_READ = 8
_TEXT_DELTA_LINE = HEAD[: HEAD.index(b"\n") + 1]
_MAX_CUT = 64 * 1024  # a cut event held for the next read, at most (one delta is ~200 bytes)


def _cut_delta(piece: bytes) -> bool:
    """Is this the start of a text delta that a read cut (to wait for the next read while a
    lane is open, where the reader and the general path would take it otherwise)? Bounded:
    a longer piece goes to the reader."""
    return (
        len(piece) <= _MAX_CUT
        and piece.find(b"\n\n") < 0
        and _TEXT_DELTA_LINE.startswith(piece[: len(_TEXT_DELTA_LINE)])
    )


def _event_end(data: bytes, pos: int) -> int:
    """Where the event at `pos` ends (its blank line included), or the end of `data`."""
    end = data.find(b"\n\n", pos)
    return end + 2 if end >= 0 else len(data)


def _text_delta_end(data: bytes, pos: int) -> int:
    """Where the first event from `pos` that may be a text delta in OpenAI's framing ends (a
    lane may open after it), or the end of `data`."""
    found = data.find(_TEXT_DELTA_LINE, pos)
    return _event_end(data, found) if found >= 0 else len(data)


def upstream_index(event: dict[str, Any]) -> object:
    """The upstream's `output_index`, as a key (any JSON may arrive: a list is not hashable)."""
    return key_of(event.get("output_index"))


def call_key(item: dict[str, Any]) -> str:
    return "input" if item.get("type") == "custom_tool_call" else "arguments"


__all__ = ["ResponsesStream", "RoundFollowup", "StreamPhase", "StreamStateError", "encode_event"]
