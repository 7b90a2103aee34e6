"""The upstream's final items in the client's `response.completed` (SPEC §8).

The client's final `output` lists exactly the items it was streamed, under the ids it saw.
Where the upstream's own final event lists an item, that description is the newer one (a
reasoning or compaction item's `encrypted_content`, a `fingerprint`, a call's `status`): the
client gets it, with only the ids changed as the stream changed them. Items the upstream left
out are built from the stream; items it lists that the client never got (dropped replays and
duplicates) stay out.

Which final item describes which streamed one: the client's `output_index` says nothing here
(it is dense over what was delivered, so every drop shifts it). The upstream's item `id` says
it best where it names one item of the round only; otherwise the item's place in the final
list, which is the upstream's `output_index` in its stream, where that index was used once.
Either way the item must be of the same type, name no other item's id, and (a call) no other
`call_id`: anything that does not fit keeps the streamed item.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from proxy.core.ids import normalize_raw_id

ClientItem = Callable[[dict[str, Any]], dict[str, Any]]


@dataclass(frozen=True, slots=True)
class Streamed:
    """One item the client received in this round, as the upstream named it in the stream."""

    index: int  # the client's output_index
    upstream: object  # the upstream's output_index (as a key)
    kind: object  # its `type`
    item_id: object  # the item `id` the upstream gave it
    call_id: str | None  # a call's raw `call_id` (None: not a call, or none issued)
    client: ClientItem  # an upstream final item -> the client's (ids as the stream made them)


def final_items(streamed: list[Streamed], output: object) -> dict[int, dict[str, Any]]:
    """The client's items, by client index, that the upstream's final `output` describes."""
    if not isinstance(output, list) or not output or not streamed:
        return {}
    match = _Matcher(streamed, output)
    found: dict[int, dict[str, Any]] = {}
    # Ids first, so that an item placed by position cannot take one an id names.
    for entry in streamed:
        match.take(entry, match.by_id(entry), found)
    for entry in streamed:
        if entry.index not in found:
            match.take(entry, match.by_place(entry), found)
    return found


def _named(value: object) -> bool:
    return isinstance(value, str) and bool(value)


class _Matcher:
    def __init__(self, streamed: list[Streamed], output: list[Any]) -> None:
        self.output = output
        self.taken: set[int] = set()
        self.streamed_ids = Counter(e.item_id for e in streamed if _named(e.item_id))
        self.places = Counter(e.upstream for e in streamed)
        final_ids = Counter(
            item["id"] for item in output if isinstance(item, dict) and _named(item.get("id"))
        )
        self.positions = {
            item["id"]: at
            for at, item in enumerate(output)
            if isinstance(item, dict) and _named(item.get("id")) and final_ids[item["id"]] == 1
        }

    def by_id(self, entry: Streamed) -> int | None:
        """Where the final list has the one item of this id, if the round streamed one too."""
        if not _named(entry.item_id) or self.streamed_ids[entry.item_id] != 1:
            return None
        return self.positions.get(entry.item_id)

    def by_place(self, entry: Streamed) -> int | None:
        """The item at the upstream's output_index, if the stream used that index once."""
        at = entry.upstream
        if type(at) is not int or not 0 <= at < len(self.output) or self.places[at] != 1:
            return None
        return at

    def take(self, entry: Streamed, at: int | None, found: dict[int, dict[str, Any]]) -> None:
        if at is None or at in self.taken:
            return
        final = self.output[at]
        if not isinstance(final, dict) or not self._fits(entry, final):
            return
        self.taken.add(at)
        found[entry.index] = entry.client(final)

    def _fits(self, entry: Streamed, final: dict[str, Any]) -> bool:
        """The same type, and no id that names another item or call."""
        if final.get("type") != entry.kind:
            return False
        final_id = final.get("id")
        if (
            _named(final_id)
            and final_id != entry.item_id
            and (_named(entry.item_id) or final_id in self.streamed_ids)
        ):
            return False
        raw = normalize_raw_id(final.get("call_id"))
        return entry.call_id is None or raw is None or raw == entry.call_id
