"""A Responses round's items that are not calls (SPEC §8): messages, reasoning items (with
their `encrypted_content`), built-in tool items and unknown ones.

They pass unchanged but for their numbers: each gets a dense client `output_index` in
delivery order, an item `id` an earlier round already used is renamed, and a message's text
goes through the leaked-markup scanner when the request offered tools (textcalls.py). The
text of each content part is kept for an item the upstream never finishes, and one part's
plain deltas open a `TextLane` (lane.py) that takes the next ones from their bytes.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from proxy.responses.carry import ResponseCarry, key_of
from proxy.responses.final import Streamed
from proxy.responses.lane import TEXT_DELTA, TextLane
from proxy.responses.textcalls import TEXT_EVENTS, MessageTextCalls


class RoundItems:
    """The round's other items, by the upstream's output_index."""

    def __init__(self, carry: ResponseCarry, text_calls: MessageTextCalls | None) -> None:
        self.carry = carry
        self.text_calls = text_calls
        self.upstream_output: list[Any] = []  # the upstream's final `output`, once it came
        # The open text part's plain deltas, taken from their bytes; None after any event the
        # general path reads, which may change what the lane relies on.
        self.lane: TextLane | None = None
        self._index: dict[object, int] = {}  # the upstream's output_index -> the client's
        self._open: dict[object, dict[str, Any]] = {}  # items not done yet
        self._renamed: dict[object, object] = {}  # item ids repeated from an earlier round
        self._texts: dict[tuple[object, object], list[str]] = {}  # message text, by part
        # The items the client got: upstream index, client index, raw item id.
        self._others: list[tuple[object, int, object]] = []

    @property
    def open(self) -> list[object]:
        """The upstream indexes of the items not done yet."""
        return list(self._open)

    def client_index(self, upstream: object) -> int:
        index = self._index.get(upstream)
        if index is None:
            index = self._index[upstream] = self.carry.next_index
            self.carry.next_index += 1
        return index

    def added(self, upstream: object, event: dict[str, Any], out: list[bytes]) -> None:
        """An item's `output_item.added`."""
        item = event.get("item")
        event["output_index"] = self.client_index(upstream)
        if isinstance(item, dict):
            item_id = self.carry.call_ids.other_item_id(item.get("id"))
            if item_id != item.get("id"):
                self._renamed[upstream] = item_id
                event["item"] = item = {**item, "id": item_id}
            self._open[upstream] = item
        self.carry.emit(event, out)

    def event(self, upstream: object, event: dict[str, Any], out: list[bytes]) -> None:
        """One of the item's own events (a text delta, a content part, ...)."""
        kind = event.get("type")
        parsed = dict(event) if kind == TEXT_DELTA else None  # as it came, for a lane
        events = [event]
        if self.text_calls is not None and kind in TEXT_EVENTS:
            events = self.text_calls.rewrite(upstream, event)
        self._send(upstream, events, out)
        if parsed is not None and len(events) == 1:
            self.lane = self._text_lane(upstream, parsed, events[0])

    def _send(self, upstream: object, events: list[dict[str, Any]], out: list[bytes]) -> None:
        """The item's events as the client gets them: its ids and numbers, its text kept."""
        index = self.client_index(upstream)
        renamed = self._renamed.get(upstream)
        for each in events:
            if renamed is not None and "item_id" in each:
                each["item_id"] = renamed
            delta = each.get("delta")
            if each.get("type") == TEXT_DELTA and isinstance(delta, str):
                part = key_of(each.get("content_index"))
                self._texts.setdefault((upstream, part), []).append(delta)
            each["output_index"] = index
            self.carry.emit(each, out)

    def close(self, upstream: object, item: dict[str, Any] | None, out: list[bytes]) -> None:
        """An item's end: the client's `output_item.done`, and its place in the output."""
        added = self._open.pop(upstream, None)
        if self.text_calls is not None and added is not None:
            # A message that ends without its parts' `.done` events: the text their
            # scanners still hold goes out before its end (SPEC §8: nothing is dropped).
            self._send(upstream, self.text_calls.rest(upstream, added.get("id")), out)
        final = item if item is not None else self._fallback_item(upstream, added)
        raw_id = final.get("id")
        if upstream in self._renamed:
            final = {**final, "id": self._renamed[upstream]}
        if self.text_calls is not None:
            final = self.text_calls.final_item(upstream, final)
        index = self.client_index(upstream)
        self.carry.emit(
            {"type": "response.output_item.done", "output_index": index, "item": final}, out
        )
        self.carry.items[index] = final
        self._others.append((upstream, index, raw_id))
        if self.text_calls is not None:
            self.text_calls.after_item(upstream, out)

    def round_items(self) -> list[dict[str, Any]]:
        """The items the client got in this round, as it got them."""
        return [self.carry.items[index] for _, index, _ in self._others]

    def streamed(self) -> list[Streamed]:
        """The items the client received in this round, as the upstream named them."""
        return [
            Streamed(
                index,
                upstream,
                self.carry.items[index].get("type"),
                raw_id,
                None,
                partial(self._client_final, upstream, index),
            )
            for upstream, index, raw_id in self._others
        ]

    def _text_lane(
        self, upstream: object, parsed: dict[str, Any], client: dict[str, Any]
    ) -> TextLane | None:
        """A lane for the text deltas that follow one the general path wrote as `client`."""
        if not TextLane.fits(parsed, client):
            return None
        texts = self._texts[(upstream, key_of(client.get("content_index")))]
        if self.text_calls is None:
            return TextLane(parsed, client, None, (texts,))
        part = self.text_calls.part(upstream, client)
        if part is None:
            return None
        scanner, released = part
        return TextLane(parsed, client, scanner, (texts, released))

    def _fallback_item(self, upstream: object, added: dict[str, Any] | None) -> dict[str, Any]:
        """The item the upstream never finished: as its final output names it, else as it was
        added with the text the client got."""
        item = dict(added or {"type": "message", "role": "assistant"})
        listed_all = self.upstream_output
        if isinstance(upstream, int) and 0 <= upstream < len(listed_all):
            listed = listed_all[upstream]
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

    def _client_final(self, upstream: object, index: int, final: dict[str, Any]) -> dict[str, Any]:
        """The upstream's final description of a streamed item: over what the stream said,
        with the id the client saw and the text it got (SPEC §8)."""
        streamed = self.carry.items[index]
        item = {**streamed, **final}
        if "id" in streamed:
            item["id"] = streamed["id"]
        else:
            item.pop("id", None)  # the client saw none
        if self.text_calls is not None:
            item = self.text_calls.final_item(upstream, item)
        return item


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
