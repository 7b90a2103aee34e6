"""What one client response carries across its upstream rounds (SPEC §5, §8).

A follow-up round reads as the same response: one `response.created` (the first round's),
output indexes and sequence numbers that go on from the earlier rounds, and one
`response.completed` whose `output` holds every delivered item of every round, with usage
summed and the first round's response id. The head gate lives here too: events that show
the user nothing (`response.created`, `response.in_progress`) wait for the next event, so
that a replay loop found before anything visible is still a plain HTTP error.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from proxy.core.jsontext import dumps
from proxy.core.usage import add_usage
from proxy.responses.ids import CallIds

QUIET_EVENTS = frozenset({"response.created", "response.in_progress", "response.queued"})
# The response object's identity: a follow-up round's events take the first round's.
IDENTITY_KEYS = ("id", "created_at", "model")


# A tuple, not `int | str | ...`: the union would be built again at every call.
_HASHABLE = (int, str, float, type(None))


def key_of(value: object) -> object:
    """A JSON value as a dict key (an index that is a list or object is not hashable)."""
    return value if isinstance(value, _HASHABLE) else repr(value)


def encode(event: dict[str, Any]) -> bytes:
    """One Responses event in OpenAI's framing: its type as the `event:` line, then its data."""
    kind = event.get("type")
    head = b"event: " + str(kind).encode() + b"\n" if isinstance(kind, str) else b""
    return head + b"data: " + dumps(event) + b"\n\n"


@dataclass(slots=True)
class ResponseCarry:
    call_ids: CallIds
    envelope: dict[str, Any] | None = None  # the first round's response object
    seq: int = 0  # the next sequence_number the client gets
    next_index: int = 0  # the next output_index the client gets
    items: dict[int, dict[str, Any]] = field(default_factory=dict)  # delivered, by index
    usage: dict[str, Any] | None = None
    released: bool = False  # some bytes of this response were handed out
    pending: list[bytes] = field(default_factory=list)  # quiet events waiting (head gate)
    rounds: int = 0

    def emit(self, event: dict[str, Any], out: list[bytes]) -> None:
        """Number the event and hand it out (a quiet one may wait for the next)."""
        event["sequence_number"] = self.seq
        self.seq += 1
        data = encode(event)
        if not self.released and event.get("type") in QUIET_EVENTS:
            self.pending.append(data)
            return
        self.release(out)
        out.append(data)

    def release(self, out: list[bytes]) -> None:
        if self.pending:
            out.extend(self.pending)
            self.pending.clear()
        self.released = True

    def add_usage(self, usage: object) -> None:
        self.usage = add_usage(self.usage, usage)

    def response(self, upstream: object, status: str) -> dict[str, Any]:
        """The response object of a lifecycle event, as the first round named it."""
        base = dict(upstream) if isinstance(upstream, dict) else {}
        for key in IDENTITY_KEYS:
            if self.envelope is not None and key in self.envelope:
                base[key] = self.envelope[key]
        base.setdefault("object", "response")
        base["status"] = status
        return base

    def output(self) -> list[dict[str, Any]]:
        return [self.items[index] for index in sorted(self.items)]
