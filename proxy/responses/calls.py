"""One `function_call` / `custom_tool_call` item of a Responses stream (SPEC §4, §8).

A call collects what the upstream sends for it in any shape (whole arguments in
`output_item.added`, deltas, a `.done` with the whole arguments, deltas that repeat what was
already there, no `.done` at all) as one text, and hands the client the canonical events:
`output_item.added` with empty arguments, argument deltas, one `.done` with the whole text,
`output_item.done` with the whole item. It is *held* (nothing reaches the client) while its
client id cannot be decided: no raw `call_id` yet, or a possible replay or in-response
duplicate whose arguments must be complete first.

Every field of the item but its ids and its text reaches the client as the upstream sent it
(SPEC §8): `status` too, which a program-made call keeps at `"in_progress"` when done
(QUIRKS.md). Only where the upstream sent no status for an event the proxy writes (an added
event for a call first seen done, a done event for a call it never ended, a recovered call)
does the proxy say where the item stands.

The text grows by fragments kept in a list, and whether it is complete yet is asked of an
incremental scanner (`JsonCompleteness`) after a fragment that ends in a closing bracket: each
character is looked at a bounded number of times, so the work stays linear in the text's
length however it is cut (SPEC §6). Its length is bounded (`proxy.core.bounds`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

from proxy.core.bounds import check_arguments
from proxy.core.ids import normalize_raw_id
from proxy.core.jsoncomplete import JsonCompleteness, Progress, is_complete_json
from proxy.core.jsontext import dumps

# Per item kind: the key of its text, its delta event and its done event.
_GRAMMAR = {
    "function_call": (
        "arguments",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
    ),
    "custom_tool_call": (
        "input",
        "response.custom_tool_call_input.delta",
        "response.custom_tool_call_input.done",
    ),
}


# The upstream sent no `status` for this stage of the item.
NO_STATUS: Final = object()

_CLOSING = ("}", "]")  # only after one of these can a text have become complete JSON


def is_call_item(item: object) -> bool:
    return isinstance(item, dict) and item.get("type") in _GRAMMAR


def is_call_event(kind: str) -> bool:
    return kind.startswith(
        ("response.function_call_arguments.", "response.custom_tool_call_input.")
    )


@dataclass(slots=True)
class CallItem:
    item: dict[str, Any]  # as the upstream last described it
    # The arguments (or custom input) so far, in pieces (`text` joins them) and their length.
    _parts: list[str] = field(default_factory=list)
    _length: int = 0
    # Whether the arguments are complete JSON, fed each piece once (`_unscanned` waits for
    # a piece that ends in a closing bracket).
    _json: JsonCompleteness = field(default_factory=JsonCompleteness)
    _unscanned: list[str] = field(default_factory=list)
    # Characters joined, compared or parsed beyond the scanner's own count (`work`).
    examined: int = 0
    complete: bool = False  # the text is whole enough to decide on (complete JSON, or closed)
    closed: bool = False  # the upstream said the text is whole (`.done`, the item's end)
    item_done: bool = False  # the upstream ended the item (or the round ended)
    echo: int = -1  # >= 0: deltas are repeating text already known up to here
    # Once delivered: where the client sees it, and how much of the text it has.
    index: int = -1
    client_call_id: str = ""
    client_item_id: str = ""
    sent: int = 0
    done_sent: bool = False
    item_sent: bool = False
    dropped: bool = False
    counted: bool = False  # counted among the round's calls (SPEC §6's bound)
    extra: list[dict[str, Any]] = field(default_factory=list)  # other events while held
    # The `status` of the upstream's added item and of its final description (NO_STATUS:
    # none sent), each kept for the client's event of that stage (SPEC §8).
    added_status: object = NO_STATUS
    done_status: object = NO_STATUS

    @classmethod
    def start(cls, item: dict[str, Any], *, ended: bool = False) -> CallItem:
        """A call from its first description: its added item, or with `ended` its final one
        (a done event with no added event before it, an item of a whole body)."""
        call = cls(dict(item))
        status = item.get("status", NO_STATUS)
        if ended:
            call.done_status = status
        else:
            call.added_status = status
        whole = item.get(call.key)
        if isinstance(whole, str) and whole:
            # Whole arguments in output_item.added: deltas that follow may repeat them.
            call.text = whole
            call.echo = 0
            call.complete = call.kind == "function_call" and is_complete_json(whole)
            call._unscanned.append(whole)
        return call

    @property
    def text(self) -> str:
        """The whole text so far (its pieces joined once, then kept as one)."""
        parts = self._parts
        if len(parts) > 1:
            self.examined += self._length
            self._parts = parts = ["".join(parts)]
        return parts[0] if parts else ""

    @text.setter
    def text(self, value: str) -> None:
        check_arguments(len(value))
        self._parts = [value] if value else []
        self._length = len(value)

    @property
    def work(self) -> int:
        """Characters examined for the text so far, all steps together (tests check that it
        stays linear in the text's length)."""
        return self.examined + self._json.examined

    @property
    def kind(self) -> str:
        return str(self.item.get("type"))

    @property
    def key(self) -> str:
        return _GRAMMAR[self.kind][0]

    @property
    def delta_type(self) -> str:
        return _GRAMMAR[self.kind][1]

    @property
    def done_type(self) -> str:
        return _GRAMMAR[self.kind][2]

    @property
    def name(self) -> str:
        name = self.item.get("name")
        return name if isinstance(name, str) else ""

    @property
    def raw_id(self) -> str | None:
        return normalize_raw_id(self.item.get("call_id"))

    @property
    def delivered(self) -> bool:
        return self.index >= 0

    def arguments_text(self) -> str:
        return self.final_text()

    def final_text(self) -> str:
        """The whole text: `{}` for a function call that never got any arguments."""
        if not self.text.strip() and self.kind == "function_call":
            return "{}"
        return self.text

    def finish_text(self) -> None:
        """The text is final: empty arguments become `{}` (SPEC §4), sent as a last delta."""
        self.text = self.final_text()
        self.complete = True

    def add_delta(self, delta: str) -> None:
        """A fragment; a repeat of text already known, or a final flush of all of it, adds
        only what is new (SPEC §4)."""
        if self.echo >= 0:
            # No fragment was added while deltas echo: the text is the one piece `start` set.
            self.examined += len(delta)
            if self.text.startswith(delta, self.echo):
                self.echo += len(delta)
                return
            self.echo = -1
        if self._is_flush(delta):
            delta = delta[self._length :]
        if not delta:
            return
        check_arguments(self._length + len(delta))
        self._parts.append(delta)
        self._length += len(delta)
        if self.kind != "function_call" or self.complete:
            return
        self._unscanned.append(delta)
        # Only after a closing bracket can the text have become complete: the scan catches
        # up then, over the pieces it has not seen (each character once).
        if self._json.state is not Progress.NEVER and delta.rstrip()[-1:] in _CLOSING:
            self._scan()

    def _is_flush(self, delta: str) -> bool:
        """A fragment that is on its own complete JSON and starts with all the text so far."""
        if not self._length or len(delta) < self._length:
            return False  # cannot start with all of it: neither is looked at
        self.examined += len(delta)
        return delta.startswith(self.text) and is_complete_json(delta)

    def _scan(self) -> None:
        unscanned = self._unscanned
        pending = unscanned[0] if len(unscanned) == 1 else "".join(unscanned)
        self._unscanned = []
        if self._json.feed(pending) is not Progress.CLOSED:
            return
        self.examined += self._length
        if is_complete_json(self.text):
            self.complete = True
        else:
            self._json.give_up()

    def add_whole(self, whole: object) -> None:
        """The whole text from a `.done` or the item's end: it completes the call; what it adds
        beyond the fragments (all of it when none came) becomes the call's text."""
        if isinstance(whole, str) and len(whole) >= self._length and whole.startswith(self.text):
            self.examined += len(whole)
            self.text = whole
        elif isinstance(whole, dict):
            self.add_whole(dumps(whole).decode())
            return
        # Closed: no fragment is read after this (`RoundCalls._delta`), so `echo` is not either.
        self.complete = self.closed = True

    def update_item(self, item: dict[str, Any]) -> None:
        """The upstream's later description of the item (its `output_item.done`). Its `type`
        stays what opened the call: a done event that names another type cannot turn a call
        whose header and arguments went out into something else."""
        text_key = self.key
        self.done_status = item.get("status", NO_STATUS)
        for key, value in item.items():
            if key in (text_key, "type"):
                continue
            if value not in (None, "") or key not in self.item:
                self.item[key] = value

    def unsent(self) -> str:
        """The text the client lacks (`text[sent:]`), taken from the last pieces only."""
        missing = self._length - self.sent
        self.sent = self._length
        if missing <= 0:
            return ""
        parts = self._parts
        if len(parts) == 1:
            return parts[0][-missing:]
        pieces: list[str] = []
        at = len(parts)
        need = missing
        while need > 0:
            at -= 1
            pieces.append(parts[at])
            need -= len(parts[at])
        pieces.reverse()
        piece = pieces[0] if len(pieces) == 1 else "".join(pieces)
        self.examined += len(piece)
        return piece[-missing:] if need else piece

    def client_item(self, *, done: bool) -> dict[str, Any]:
        """The item as the client sees it: its ids, all its text once it is done, and the
        status the upstream gave that stage (the proxy's own word only where it gave none)."""
        item = dict(self.item)
        item["id"] = self.client_item_id
        item["call_id"] = self.client_call_id
        item[self.key] = self.final_text() if done else ""
        status = self.done_status if done else self.added_status
        if status is NO_STATUS:
            status = "completed" if done else "in_progress"
        item["status"] = status
        return item

    def client_final(self, final: dict[str, Any]) -> dict[str, Any]:
        """The upstream's final description of the call (its `response.completed` item) as
        the client gets it: every field the upstream sent there (the stream's where it left
        one out), with the ids and the text the client saw (SPEC §8)."""
        item = {**self.client_item(done=True), **final}
        item["type"] = self.kind
        item["id"] = self.client_item_id
        item["call_id"] = self.client_call_id
        item[self.key] = self.final_text()
        return item
