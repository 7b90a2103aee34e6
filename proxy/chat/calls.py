"""The tool calls of one choice in a stream: deltas to call slots, slots to OpenAI's shape.

Rules (SPEC §4):
- Calls are told apart by `(choice, index)`; the fallbacks for servers that number calls
  otherwise are one small function each in `ChoiceCalls._route`: a missing index, an index no
  call has, several calls at one index, a complete call's index reused.
- A call is *open* until its arguments form a complete JSON value (`jsoncomplete`), decided
  incrementally so that the work stays linear in the arguments' length.
- Each delivered call gets one header (id, type, name, the arguments so far), then bare
  argument fragments. The header waits only until its client id can be decided (SPEC §2): a
  raw id, or complete arguments, or the choice's end; a possible replay or in-response
  duplicate waits for complete arguments.
"""

from __future__ import annotations

from enum import Enum, auto
from typing import Any, NamedTuple

import orjson

from proxy.core.decide import UNPARSED, ChoiceIds, ResponseIds, Verdict
from proxy.core.ids import normalize_raw_id
from proxy.core.jsoncomplete import JsonCompleteness, Progress, is_complete_json
from proxy.core.jsontext import dumps
from proxy.core.notes import DeltaRepaired, IdRewritten, Note
from proxy.core.textcalls import RecoveredCall


class SlotState(Enum):
    PENDING = auto()  # header not sent yet (id undecided, or held as a possible replay)
    LIVE = auto()  # header sent; fragments are forwarded as they arrive
    DROPPED = auto()  # duplicate or replay: the client never sees it


# Enum members read through their class cost an EnumType.__getattr__ call each on Python
# 3.11; these are read for every argument fragment.
_PENDING = SlotState.PENDING
_LIVE = SlotState.LIVE
_DROPPED = SlotState.DROPPED
_NEVER = Progress.NEVER
_CLOSED = Progress.CLOSED
_DELIVER = Verdict.DELIVER
_CLOSING = ("}", "]")  # only after one of these can arguments have become complete
_OPENING = ("{", "[")


class CallSlot:
    """One tool call as the upstream streams it."""

    __slots__ = (
        "_json",
        "_length",
        "_parts",
        "_unscanned",
        "client_index",
        "complete",
        "examined",
        "name_",
        "raw_id",
        "state",
        "value",
        "waits",
    )

    def __init__(self) -> None:
        self.raw_id: str | None = None
        self.name_: str | None = None
        self._parts: list[str] = []
        self._length = 0
        self._json = JsonCompleteness()
        self._unscanned: list[str] = []  # fragments the completeness scan has not seen yet
        self.complete = False
        self.state = _PENDING
        self.client_index = -1
        # Its raw id may repeat an answered or an earlier call: it waits for complete
        # arguments (needs_hold only ever turns true within a round, and the raw id of a
        # call that has one never changes), so its fragments need not ask again.
        self.waits = False
        # Characters joined, compared or parsed for the arguments beyond the completeness
        # scan's own count: with it, linear in the arguments' length (tests check it).
        self.examined = 0
        # What the arguments hold, from the parse that found them complete (the replay check
        # compares it, not a second parse); UNPARSED until then and once they change.
        self.value: object = UNPARSED

    @property
    def name(self) -> str:
        return self.name_ or ""

    @property
    def work(self) -> int:
        """Characters examined for this call's arguments so far, all steps together."""
        return self.examined + self._json.examined

    def arguments_text(self) -> str:
        if len(self._parts) > 1:
            self._parts = ["".join(self._parts)]
            self.examined += self._length
        return self._parts[0] if self._parts else ""

    def set_arguments(self, text: str) -> None:
        self._parts = [text]
        self._length = len(text)
        self.value = UNPARSED

    def add_arguments(self, fragment: str) -> None:
        if self.complete:  # what follows complete arguments is kept, not scanned
            self._parts.append(fragment)
            self._length += len(fragment)
            self.value = UNPARSED  # they changed: parsed again when decided
            return
        self.add_open_fragment(fragment)
        # Only after a closing bracket can the arguments have become complete: the scan
        # catches up then, over the fragments it has not seen (each character once).
        if self._json.state is _NEVER or fragment.rstrip()[-1:] not in _CLOSING:
            return
        pending = self._unscanned[0] if len(self._unscanned) == 1 else "".join(self._unscanned)
        self._unscanned = []
        if self._json.feed(pending) is _CLOSED:
            text = self.arguments_text()
            self.examined += len(text)
            try:
                self.value = orjson.loads(text)
            except orjson.JSONDecodeError:
                self._json.give_up()
            else:
                self.complete = True

    def add_open_fragment(self, fragment: str) -> None:
        """`add_arguments` without its completeness check, for a fragment of open arguments
        that ends in no closing bracket (the caller has looked): it cannot complete them, so
        the scan waits for a later one."""
        self._parts.append(fragment)
        self._length += len(fragment)
        if self._json.state is not _NEVER:
            self._unscanned.append(fragment)

    @property
    def flushes_close(self) -> bool:
        """Would a final flush of its arguments end in a closing bracket? It would when they
        begin (after JSON whitespace) with an opening one: a flush starts with them and is
        complete JSON. With no arguments yet nothing is a flush (`is_flush`)."""
        parts = self._parts
        return not parts or parts[0].lstrip(" \t\n\r")[:1] in _OPENING

    def is_flush(self, fragment: str) -> bool:
        """SPEC §4: is `fragment`, after some arguments, on its own a complete JSON value that
        starts with all of them (a server's final flush of the whole arguments)?"""
        if not self._parts or len(fragment) < self._length:
            return False  # cannot start with them: no need to look at either
        self.examined += len(fragment)
        return fragment.startswith(self.arguments_text()) and is_complete_json(fragment)


class ToolDelta(NamedTuple):
    """One element of `delta.tool_calls`, read leniently (a tuple: one is built per delta)."""

    upstream_index: int | None
    raw_id: str | None
    name: str | None
    fragment: str
    position: int  # within its delta's `tool_calls`


class ChoiceCalls:
    """Routes one choice's tool-call deltas to slots and emits them in OpenAI's shape."""

    __slots__ = ("_by_index", "_last", "_notes", "_response", "ids", "index", "slots")

    def __init__(self, index: int, ids: ChoiceIds, response: ResponseIds, notes: list[Note]):
        self.index = index
        self.ids = ids
        self._response = response
        self._notes = notes
        self.slots: list[CallSlot] = []
        self._by_index: dict[int, CallSlot] = {}
        self._last: CallSlot | None = None

    def take(self, raw: object) -> list[dict[str, Any]]:
        """A delta's `tool_calls`: the deltas the client receives for them."""
        if isinstance(raw, dict):
            raw = [raw]
        if not isinstance(raw, list):
            self._note("malformed_tool_calls")
            return []
        if not raw:
            self._note("empty_tool_calls")
            return []
        out: list[dict[str, Any]] = []
        if len(raw) == 1:
            # Most deltas are one bare argument fragment of an open call: routed directly.
            slot = self._fragment_slot(raw[0])
            if slot is not None:
                fragment = raw[0]["function"]["arguments"]
                if fragment and slot.is_flush(fragment):
                    fragment = self._flushed(slot, fragment)
                self._grow(slot, fragment, out)
                return out
        for position, item in enumerate(raw):
            if not isinstance(item, dict):
                self._note("malformed_tool_call")
                continue
            self._take_one(self._read(item, position), out)
        return out

    def held_fragment(self, index: int, fragment: str) -> bool:
        """What `take` does with a bare fragment at `index` when that is a held call's (one
        that waits for complete arguments, SPEC §2.4): appends it, sending nothing, when it
        can neither complete the arguments nor be a final flush of them: it does not end in
        a closing bracket, and a flush would (`flushes_close`). False: nothing was done."""
        slot = self._by_index.get(index)
        if (
            slot is None
            or slot.state is not _PENDING
            or not slot.waits
            or slot.complete
            or not slot.flushes_close
            or not fragment
            or fragment.rstrip()[-1:] in _CLOSING
        ):
            return False
        slot.add_open_fragment(fragment)
        return True

    def held_index(self) -> int | None:
        """The upstream index of a call that waits for complete arguments, if any."""
        for index, slot in self._by_index.items():
            if slot.state is _PENDING and slot.waits and not slot.complete:
                return index
        return None

    def recovered(self, call: RecoveredCall, out: list[dict[str, Any]]) -> None:
        """A call recovered from markup in the text: complete from the start."""
        slot = self._new_slot(None)
        slot.raw_id = call.raw_id
        slot.name_ = call.name
        slot.add_arguments(call.arguments)
        slot.complete = True
        self._notes.append(DeltaRepaired(kind="text_tool_call", detail=call.format))
        self._try_header(slot, out, finishing=False)

    def finish(self, out: list[dict[str, Any]]) -> None:
        """The choice ends: decide what was held, and make every delivered call's arguments
        parseable ("{}" for none)."""
        for slot in self.slots:
            if slot.state is _PENDING:
                self._try_header(slot, out, finishing=True)
            elif slot.state is _LIVE and not slot.arguments_text().strip():
                slot.set_arguments("{}")
                self._note("empty_arguments")
                out.append({"index": slot.client_index, "function": {"arguments": "{}"}})

    # -- one delta -----------------------------------------------------------------------------

    def _read(self, item: dict[str, Any], position: int) -> ToolDelta:
        raw_index = item.get("index")
        fn = item.get("function")
        fn = fn if isinstance(fn, dict) else {}
        name = fn.get("name")
        arguments = fn.get("arguments")
        return ToolDelta(
            upstream_index=raw_index if type(raw_index) is int else None,
            raw_id=normalize_raw_id(item.get("id")),
            name=name if isinstance(name, str) and name else None,
            fragment=arguments if isinstance(arguments, str) else self._fragment(arguments),
            position=position,
        )

    def _fragment(self, arguments: object) -> str:
        """Arguments that are not a string: null adds nothing, an object is its JSON."""
        if arguments is None:
            return ""
        self._note("object_arguments")
        return dumps(arguments).decode()

    def _fragment_slot(self, item: object) -> CallSlot | None:
        """The open call `item` continues when it is a bare argument fragment (string
        arguments, no id, no name) at an index a call has; else None. `_route` would pick
        the same call: its fallbacks are for a missing or free index, an id or a name, or a
        complete call's index reused, and `_read` would read the same fragment."""
        if type(item) is not dict or item.get("id") is not None:
            return None
        fn = item.get("function")
        if type(fn) is not dict or fn.get("name") is not None:
            return None
        index = item.get("index")
        if type(index) is not int or type(fn.get("arguments")) is not str:
            return None
        slot = self._by_index.get(index)
        return slot if slot is not None and not slot.complete else None

    def _take_one(self, delta: ToolDelta, out: list[dict[str, Any]]) -> None:
        slot = self._route(delta)
        fragment = delta.fragment
        if fragment and slot.is_flush(fragment):
            fragment = self._flushed(slot, fragment)
        if delta.raw_id is not None or delta.name is not None:
            self._merge_identity(slot, delta)
        self._grow(slot, fragment, out)

    def _flushed(self, slot: CallSlot, fragment: str) -> str:
        """A final flush of the whole arguments: only what it adds (usually nothing)."""
        self._note("arguments_flush")
        return fragment[len(slot.arguments_text()) :]

    def _grow(self, slot: CallSlot, fragment: str, out: list[dict[str, Any]]) -> None:
        """`fragment` (what is left of it after a flush) joins `slot`'s arguments."""
        if fragment:
            slot.add_arguments(fragment)
            if slot.state is _LIVE:
                out.append({"index": slot.client_index, "function": {"arguments": fragment}})
        if slot.state is _PENDING and (slot.complete or not slot.waits):
            self._try_header(slot, out, finishing=False)
        if fragment and slot.complete and slot.raw_id is not None:
            # Later calls of this raw id waited for this one's arguments (SPEC §2.4).
            for other in self.slots:
                if other.state is _PENDING and other.raw_id == slot.raw_id:
                    self._try_header(other, out, finishing=False)

    def _merge_identity(self, slot: CallSlot, delta: ToolDelta) -> None:
        """SPEC §4: the first real id wins; id and name are sent once."""
        raw_id = delta.raw_id
        if raw_id is not None and raw_id != slot.raw_id:
            if slot.raw_id is None and slot.state is _PENDING:
                slot.raw_id = raw_id
            else:
                self._note("id_changed")
        elif raw_id is not None and slot.state is not _PENDING:
            self._note("repeated_fields")
        if delta.name is not None and slot.name_ is None:
            slot.name_ = delta.name

    # -- which call a delta belongs to (SPEC §4) ---------------------------------------------

    def _route(self, delta: ToolDelta) -> CallSlot:
        index = delta.upstream_index
        if index is None:
            return self._without_index(delta)
        slot = self._by_index.get(index)
        if slot is None:
            return self._at_free_index(delta, index)
        return self._at_taken_index(delta, index, slot)

    def _without_index(self, delta: ToolDelta) -> CallSlot:
        """A nameless delta (the first of its `tool_calls`) continues the open call; a named
        one, or a later one in the same delta, starts a call."""
        self._note("missing_index")
        last = self._last
        if delta.name is None and delta.position == 0 and last is not None and not last.complete:
            return last
        return self._new_slot(None)

    def _at_free_index(self, delta: ToolDelta, index: int) -> CallSlot:
        """A bare delta at an index no call has continues the one open call: SGLang numbers a
        call's first delta by its tool's position in the request's `tools`."""
        if delta.raw_id is None and delta.name is None:
            only = self._only_open()
            if only is not None:
                return self._remap(index, only)
        return self._new_slot(index)

    def _at_taken_index(self, delta: ToolDelta, index: int, slot: CallSlot) -> CallSlot:
        if slot.complete and delta.raw_id is None and delta.name is None:
            # A complete call is no longer open: a bare fragment (not a final flush; trailing
            # whitespace after the JSON stays where it was) belongs to the one open call, since
            # SGLang numbered that index by tool position and a later call reuses it.
            only = self._only_open()
            if only is not None and delta.fragment.strip() and not slot.is_flush(delta.fragment):
                return self._remap(index, only)
        if delta.name is not None and self._starts_parallel_call(delta, slot):
            # Servers that put every parallel call at index 0.
            self._note("parallel_calls_one_index")
            return self._new_slot(index)
        if delta.name is not None and slot.state is not _PENDING:
            self._note("repeated_fields")
        return slot

    @staticmethod
    def _starts_parallel_call(delta: ToolDelta, slot: CallSlot) -> bool:
        """A delta with a name starts another call when it brings a new id, or arguments
        after the call at this index is complete (and not a final flush)."""
        if delta.raw_id is not None and slot.raw_id is not None and delta.raw_id != slot.raw_id:
            return True
        return slot.complete and bool(delta.fragment) and not slot.is_flush(delta.fragment)

    def _only_open(self) -> CallSlot | None:
        open_slots = [slot for slot in self.slots if not slot.complete]
        return open_slots[0] if len(open_slots) == 1 else None

    def _remap(self, index: int, slot: CallSlot) -> CallSlot:
        self._note("index_remapped")
        self._by_index[index] = slot
        return slot

    def _new_slot(self, index: int | None) -> CallSlot:
        slot = CallSlot()
        self.slots.append(slot)
        self._last = slot
        if index is not None:
            self._by_index[index] = slot
        return slot

    # -- headers (SPEC §2) -------------------------------------------------------------------

    def _try_header(self, slot: CallSlot, out: list[dict[str, Any]], *, finishing: bool) -> None:
        if slot.name_ is None:
            if finishing:
                slot.state = _DROPPED
                self._note("nameless_call_dropped")
            return
        if not finishing and not self._decidable(slot):
            return
        if finishing and not slot.arguments_text().strip():
            slot.set_arguments("{}")
            self._note("empty_arguments")
        decision = self._response.decide(self.ids, slot.raw_id, slot, slot.value)
        if decision.verdict is not _DELIVER:
            slot.state = _DROPPED
            self._notes.append(decision.dropped(self.index, slot.name, slot.raw_id))
            return
        slot.state = _LIVE
        slot.client_index = decision.index
        if decision.reason is not None:
            self._notes.append(
                IdRewritten(
                    choice=self.index,
                    index=decision.index,
                    name=slot.name,
                    raw_id=slot.raw_id,
                    client_id=decision.client_id,
                    reason=decision.reason,
                )
            )
        out.append(
            {
                "index": decision.index,
                "id": decision.client_id,
                "type": "function",
                "function": {"name": slot.name, "arguments": slot.arguments_text()},
            }
        )

    def _decidable(self, slot: CallSlot) -> bool:
        """Before its choice ends, may this call's client id be decided now?"""
        raw_id = slot.raw_id
        if not slot.complete and raw_id is None:
            return False
        if not slot.complete and self._response.needs_hold(self.ids, raw_id, slot.name):
            slot.waits = True
            return False
        # SPEC §2.4: a second call of a raw id is compared with the first once both are
        # complete; parallel calls may interleave, so the first may still be streaming.
        return raw_id is None or not any(
            other is not slot
            and other.raw_id == raw_id
            and other.state is _LIVE
            and not other.complete
            for other in self.slots
        )

    def _note(self, kind: str) -> None:
        self._notes.append(DeltaRepaired(kind=kind))


def merge_fragments(deltas: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Adjacent fragments of one call in one chunk become one fragment."""
    merged: list[dict[str, Any]] = []
    for delta in deltas:
        previous = merged[-1] if merged else None
        if previous is not None and "id" not in delta and previous["index"] == delta["index"]:
            previous["function"] = {
                **previous["function"],
                "arguments": previous["function"]["arguments"] + delta["function"]["arguments"],
            }
            continue
        merged.append(delta)
    return merged
