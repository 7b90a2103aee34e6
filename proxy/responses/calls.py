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
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

from proxy.core.ids import normalize_raw_id
from proxy.core.jsoncomplete import is_complete_json
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


def is_call_item(item: object) -> bool:
    return isinstance(item, dict) and item.get("type") in _GRAMMAR


def is_call_event(kind: str) -> bool:
    return kind.startswith(
        ("response.function_call_arguments.", "response.custom_tool_call_input.")
    )


@dataclass(slots=True)
class CallItem:
    item: dict[str, Any]  # as the upstream last described it
    text: str = ""  # the arguments (or custom input) so far
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
        return call

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
            if self.text.startswith(delta, self.echo):
                self.echo += len(delta)
                return
            self.echo = -1
        if self.text and delta.startswith(self.text) and is_complete_json(delta):
            delta = delta[len(self.text) :]
        self.text += delta
        if self.kind == "function_call" and not self.complete:
            self.complete = is_complete_json(self.text)

    def add_whole(self, whole: object) -> None:
        """The whole text from a `.done` or the item's end: it completes the call; what it adds
        beyond the fragments (all of it when none came) becomes the call's text."""
        if isinstance(whole, str) and whole.startswith(self.text):
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
        piece = self.text[self.sent :]
        self.sent = len(self.text)
        return piece

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
