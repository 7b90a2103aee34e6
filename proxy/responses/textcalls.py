"""Tool calls leaked into a message's `output_text` (SPEC §8): recovered as call items.

Each text part of a message goes through the shared `TextCallScanner` (only when the request
offered tools, the same gate as Chat Completions): its text flows on as deltas without the
markup, and the calls it held become `function_call` items delivered right after the message.
The message's `.done` events and its final item carry the text the client received.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from proxy.core.notes import DeltaRepaired, Note
from proxy.core.textcalls import RecoveredCall, Segment, TextCallScanner
from proxy.responses.carry import key_of

TEXT_EVENTS = frozenset(
    {"response.output_text.delta", "response.output_text.done", "response.content_part.done"}
)
Recovered = Callable[[object, list[dict[str, Any]], list[bytes]], None]


class MessageTextCalls:
    def __init__(self, offered: frozenset[str], notes: list[Note], recovered: Recovered):
        self._offered = offered
        self._notes = notes
        self._recovered = recovered
        self._scanners: dict[tuple[object, object], TextCallScanner] = {}
        self._texts: dict[tuple[object, object], list[str]] = {}
        self._calls: dict[object, list[dict[str, Any]]] = {}

    def in_call(self) -> bool:
        """Does a part's scanner hold text that is part of a possible leaked call (SPEC §4)?"""
        return any(scanner.in_call for scanner in self._scanners.values())

    def rewrite(self, upstream: object, event: dict[str, Any]) -> list[dict[str, Any]]:
        """The events the client gets for this text event of the message at `upstream`."""
        key = (upstream, key_of(event.get("content_index")))
        kind = event.get("type")
        if kind == "response.output_text.delta":
            delta = event.get("delta")
            text = (
                self._take(upstream, key, self._scanner(key).feed(delta))
                if isinstance(delta, str)
                else ""
            )
            return [{**event, "delta": text}] if text else []
        if kind == "response.output_text.done":
            rest = (
                self._take(upstream, key, self._scanner(key).end()) if key in self._scanners else ""
            )
            out = [self._delta_like(event, rest)] if rest else []
            if key in self._texts:
                event = {**event, "text": "".join(self._texts[key])}
            return [*out, event]
        part = event.get("part")
        if key in self._texts and isinstance(part, dict) and part.get("type") == "output_text":
            event = {**event, "part": {**part, "text": "".join(self._texts[key])}}
        return [event]

    def final_item(self, upstream: object, item: dict[str, Any]) -> dict[str, Any]:
        """The message as the client received it: its text parts without the markup."""
        content = item.get("content")
        if not isinstance(content, list) or not any(key[0] == upstream for key in self._texts):
            return item
        parts = []
        for index, part in enumerate(content):
            key = (upstream, index)
            if key in self._texts and isinstance(part, dict) and part.get("type") == "output_text":
                part = {**part, "text": "".join(self._texts[key])}
            parts.append(part)
        return {**item, "content": parts}

    def after_item(self, upstream: object, out: list[bytes]) -> None:
        """The message ended: the calls its text held are delivered now."""
        for key in [k for k in self._scanners if k[0] == upstream]:
            self._take(upstream, key, self._scanners.pop(key).end())
        calls = self._calls.pop(upstream, [])
        if calls:
            self._recovered(upstream, calls, out)

    def rest(self, upstream: object, item_id: object) -> list[dict[str, Any]]:
        """The message at `upstream` ends without its parts' `output_text.done` (an upstream
        that sends only `output_item.done`, or a body that ends): the text its scanners still
        hold, as the deltas that send it. A part whose `.done` came has none left."""
        out = []
        for key in [k for k in self._scanners if k[0] == upstream]:
            text = self._take(upstream, key, self._scanners[key].end())
            if text:
                ref = {"item_id": item_id, "output_index": upstream, "content_index": key[1]}
                out.append(self._delta_like(ref, text))
        return out

    def part(
        self, upstream: object, event: dict[str, Any]
    ) -> tuple[TextCallScanner, list[str]] | None:
        """The scanner of a text event's part and the text it released so far, while it
        holds nothing back (None: it holds some, or the part has none yet)."""
        key = (upstream, key_of(event.get("content_index")))
        scanner, texts = self._scanners.get(key), self._texts.get(key)
        if scanner is None or texts is None or scanner.holding:
            return None
        return scanner, texts

    def _scanner(self, key: tuple[object, object]) -> TextCallScanner:
        scanner = self._scanners.get(key)
        if scanner is None:
            scanner = self._scanners[key] = TextCallScanner(self._offered)
        return scanner

    def _take(self, upstream: object, key: tuple[object, object], segments: list[Segment]) -> str:
        text = []
        for segment in segments:
            if isinstance(segment, RecoveredCall):
                self._notes.append(DeltaRepaired(kind="text_tool_call", detail=segment.format))
                self._calls.setdefault(upstream, []).append(recovered_item(segment))
            else:
                text.append(segment)
        joined = "".join(text)
        self._texts.setdefault(key, []).append(joined)
        return joined

    @staticmethod
    def _delta_like(event: dict[str, Any], text: str) -> dict[str, Any]:
        delta = {
            k: v for k, v in event.items() if k in ("item_id", "output_index", "content_index")
        }
        return {"type": "response.output_text.delta", **delta, "delta": text, "logprobs": []}


def recovered_item(call: RecoveredCall) -> dict[str, Any]:
    item: dict[str, Any] = {"type": "function_call", "name": call.name, "arguments": call.arguments}
    if call.raw_id is not None:
        item["call_id"] = call.raw_id
    return item
