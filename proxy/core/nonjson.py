"""SPEC §4: a `data:` line that is not a JSON object, one rule for every surface and bridge.

OpenAI never sends such a line (`data: 42`, `data: "x"`, `data: [1]`, `data: null`, a line cut
short or with a broken UTF-8 byte) and the SDKs raise on it. Each stream core reads its events
with `read_object`; a line that is not an object goes to its `NonJsonRule`, which answers in
one of two ways:

- no tool call is open: the line becomes an SSE comment carrying the same text (and its
  `event:` line, as a comment too), which the core puts in its place in the order of events;
  it is counted (`count`) and noted (`deltas_repaired_total{kind="non_json_data"}`);
- a tool call is open (its arguments not yet complete, or leaked markup held by a text-call
  scanner): the line may have carried a fragment of that call, and a call completed without
  it would be a call the model did not make (`rm -rf build/cache-x` become `rm -rf build`).
  The round is broken instead (`broken`): the exchange ends the client's stream with the
  surface's `upstream_stream_error` event, after what was already sent.

`[DONE]` is not this rule's: each surface reads it first.
"""

from __future__ import annotations

from typing import Any

import orjson

from proxy.core.errors import UpstreamStreamError
from proxy.core.notes import DeltaRepaired, Note
from proxy.core.sse import encode_comment

BROKEN_CALL_MESSAGE = (
    "the upstream sent a line that is not JSON while a tool call was open; it may have carried "
    "part of the call's arguments, so the call cannot be completed as the model made it"
)


def read_object(data: bytes) -> dict[str, Any] | None:
    """The JSON object an event's data holds, or None where it holds anything else."""
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    return value if type(value) is dict else None


class NonJsonRule:
    """One round's answers to data lines that are not a JSON object."""

    __slots__ = ("_notes", "broken", "count")

    def __init__(self, notes: list[Note]) -> None:
        self._notes = notes  # the round core's own list of decisions
        self.count = 0  # lines turned into comments
        self.broken: UpstreamStreamError | None = None  # a line arrived inside an open call

    def answer(self, data: bytes, other: tuple[bytes, ...], call_open: bool) -> bytes | None:
        """The comment that replaces the line; None when a call is open and the round is
        broken (`broken` says why)."""
        if call_open:
            self.broken = UpstreamStreamError(BROKEN_CALL_MESSAGE)
            return None
        self.count += 1
        self._notes.append(DeltaRepaired(kind="non_json_data"))
        return encode_comment(data, other)


__all__ = ["BROKEN_CALL_MESSAGE", "NonJsonRule", "read_object"]
