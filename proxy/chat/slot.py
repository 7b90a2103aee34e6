"""One tool call's arguments as the upstream streams them (SPEC §4), and its delivery state.

A call is *open* until its arguments form a complete JSON value (`jsoncomplete`), decided
incrementally so that the work stays linear in the arguments' length: the scan catches up
only after a fragment that ends in a closing bracket, over the fragments it has not seen.
The arguments' length is bounded (SPEC §6, `proxy.core.bounds`): a fragment that would take
them past it breaks the round (`CallBoundExceeded`) and is not kept.
`ChoiceCalls` (calls.py) routes deltas to slots and decides their headers.
"""

from __future__ import annotations

from enum import Enum, auto

import orjson

from proxy.core.bounds import CALL_ARGUMENTS_LIMIT, check_arguments
from proxy.core.decide import UNPARSED
from proxy.core.jsoncomplete import JsonCompleteness, Progress, is_complete_json


class SlotState(Enum):
    PENDING = auto()  # header not sent yet (id undecided, or held as a possible replay)
    LIVE = auto()  # header sent; fragments are forwarded as they arrive
    DROPPED = auto()  # duplicate or replay: the client never sees it


# Enum members read through their class cost an EnumType.__getattr__ call each on Python
# 3.11; these are read for every argument fragment.
_PENDING = SlotState.PENDING
_NEVER = Progress.NEVER
_CLOSED = Progress.CLOSED
CLOSING = ("}", "]")  # only after one of these can arguments have become complete
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
        "order",
        "raw_id",
        "state",
        "value",
        "waits",
    )

    def __init__(self, order: int = 0) -> None:
        self.order = order  # its place among its choice's calls, in the order they started
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
        check_arguments(len(text))
        self._parts = [text]
        self._length = len(text)
        self.value = UNPARSED

    def add_arguments(self, fragment: str) -> None:
        if self.complete:  # what follows complete arguments is kept, not scanned
            check_arguments(self._length + len(fragment))
            self._parts.append(fragment)
            self._length += len(fragment)
            self.value = UNPARSED  # they changed: parsed again when decided
            return
        self.add_open_fragment(fragment)
        # Only after a closing bracket can the arguments have become complete: the scan
        # catches up then, over the fragments it has not seen (each character once).
        if self._json.state is _NEVER or fragment.rstrip()[-1:] not in CLOSING:
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
        check_arguments(self._length + len(fragment))
        self._parts.append(fragment)
        self._length += len(fragment)
        if self._json.state is not _NEVER:
            self._unscanned.append(fragment)

    def exceeds_bound(self, fragment: str) -> bool:
        """Would `fragment` take the arguments past their bound (SPEC §6)?"""
        return self._length + len(fragment) > CALL_ARGUMENTS_LIMIT

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
