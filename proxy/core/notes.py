"""What the core decided, for logs, metrics and `sanitize --explain` (never for control flow)."""

from __future__ import annotations

from dataclasses import dataclass


# Value objects: read-only by convention and hashed by value (unsafe_hash), not frozen: a
# frozen dataclass's __init__ sets each field through object.__setattr__, about twice the
# cost of building one, and these are built per call, per note or per event.
@dataclass(slots=True, kw_only=True, unsafe_hash=True, init=False)
class IdRewritten:
    choice: int
    index: int
    name: str
    raw_id: str | None
    client_id: str
    reason: str

    # Written out (init=False): mypyc compiles this one; the one dataclasses generates
    # would stay Python.
    def __init__(
        self,
        *,
        choice: int,
        index: int,
        name: str,
        raw_id: str | None,
        client_id: str,
        reason: str,
    ) -> None:
        self.choice = choice
        self.index = index
        self.name = name
        self.raw_id = raw_id
        self.client_id = client_id
        self.reason = reason


@dataclass(slots=True, kw_only=True, unsafe_hash=True, init=False)
class CallDropped:
    """A call the client never sees: an in-response duplicate or a replay."""

    choice: int
    name: str
    raw_id: str | None
    reason: str  # "duplicate_in_response" or "replay"
    # For a replay, which form of SPEC §5 its raw id matched ("upstream id" or "issued id").
    matched: str

    # Written out (init=False), the defaults here only: mypyc compiles this one; the
    # one dataclasses generates would stay Python.
    def __init__(
        self, *, choice: int, name: str, raw_id: str | None, reason: str, matched: str = ""
    ) -> None:
        self.choice = choice
        self.name = name
        self.raw_id = raw_id
        self.reason = reason
        self.matched = matched


@dataclass(slots=True, kw_only=True, unsafe_hash=True, init=False)
class DeltaRepaired:
    kind: str
    detail: str

    # Written out (init=False), the defaults here only: mypyc compiles this one; the
    # one dataclasses generates would stay Python.
    def __init__(self, *, kind: str, detail: str = "") -> None:
        self.kind = kind
        self.detail = detail


@dataclass(slots=True, kw_only=True, unsafe_hash=True, init=False)
class RepeatNoted:
    """SPEC §10: the request's last tool result carries the repeat guard's note."""

    count: int  # identical rounds at the end of the history
    tools: str  # their tool names, comma-separated

    # Written out (init=False): mypyc compiles this one; the one dataclasses generates
    # would stay Python.
    def __init__(self, *, count: int, tools: str) -> None:
        self.count = count
        self.tools = tools


Note = IdRewritten | CallDropped | DeltaRepaired | RepeatNoted


def explain(note: Note) -> str:
    """One human-readable line per decision."""
    match note:
        case IdRewritten():
            raw = "absent" if note.raw_id is None else repr(note.raw_id)
            return (
                f"choice {note.choice} call {note.index} ({note.name}): id {raw} -> "
                f"{note.client_id!r} ({note.reason})"
            )
        case CallDropped():
            why = f"{note.reason}, matched the {note.matched}" if note.matched else note.reason
            return f"choice {note.choice}: dropped call {note.name} id {note.raw_id!r} ({why})"
        case DeltaRepaired(kind="text_tool_call"):
            return f"recovered a tool call written as {note.detail} markup in the text"
        case DeltaRepaired():
            return f"repaired {note.kind}" + (f": {note.detail}" if note.detail else "")
        case RepeatNoted():
            return f"noted a repeat run: {note.tools} called {note.count} times, same result"
