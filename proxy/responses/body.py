"""Response direction on Responses, non-streaming (SPEC §8): the same decisions on `output`.

Call items get client `call_id`s and item `id`s, empty arguments become `{}`, object
arguments a JSON string; replays and in-response duplicates are removed; calls leaked into a
message's text become call items after it. A follow-up round's body is merged into the first
round's: the first round's id, every round's delivered items, usage summed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from proxy.core.decide import ResponseIds
from proxy.core.guard import Replay
from proxy.core.jsontext import dumps
from proxy.core.notes import DeltaRepaired, Note
from proxy.core.textcalls import RecoveredCall, TextCallScanner
from proxy.responses.calls import CallItem, is_call_item
from proxy.responses.carry import ResponseCarry
from proxy.responses.decide import decide_call, replays_only
from proxy.responses.textcalls import recovered_item


@dataclass(slots=True)
class BodyResult:
    output: list[dict[str, Any]]  # the items the client gets from this round
    changed: bool
    replays: list[Replay] = field(default_factory=list)  # set: a follow-up round is needed
    replayed_items: list[dict[str, Any]] = field(default_factory=list)
    round_items: list[dict[str, Any]] = field(default_factory=list)


def sanitize_output(
    body: dict[str, Any],
    ids: ResponseIds,
    carry: ResponseCarry,
    notes: list[Note],
    *,
    text_tool_calls: bool,
) -> BodyResult:
    output = body.get("output")
    if not isinstance(output, list):
        return BodyResult([], False)
    offered = ids.facts.offered_tools if text_tool_calls else frozenset()
    kept: list[dict[str, Any]] = []
    replayed: list[dict[str, Any]] = []
    changed = False
    for item in output:
        if not isinstance(item, dict):
            changed = True
            continue
        if not is_call_item(item):
            item_id = carry.call_ids.other_item_id(item.get("id"))
            if item_id != item.get("id"):
                item = {**item, "id": item_id}
                changed = True
            message, recovered = _recover(item, offered, notes)
            kept.append(message)
            if not recovered:
                continue
            changed = True
            kept.extend(_deliver(CallItem.start(c), ids, carry, notes, replayed) for c in recovered)
            continue
        changed = True
        call = CallItem.start(_stringified(item, notes), ended=True)
        delivered = _deliver(call, ids, carry, notes, replayed)
        kept.append(delivered)
    kept = [item for item in kept if item]
    result = BodyResult(kept, changed)
    if replays_only(ids):
        result.replays = list(ids.choice(0).replays)
        result.replayed_items = replayed
        # The round's other items as the client got them (a message without the calls it
        # leaked, which go upstream as call items): as a streamed round's follow-up has them.
        result.round_items = [item for item in kept if not is_call_item(item)]
    return result


def _stringified(item: dict[str, Any], notes: list[Note]) -> dict[str, Any]:
    key = "input" if item.get("type") == "custom_tool_call" else "arguments"
    value = item.get(key)
    if value is not None and not isinstance(value, str):
        notes.append(DeltaRepaired(kind="object_arguments"))
        return {**item, key: dumps(value).decode()}
    return item


def _deliver(
    call: CallItem,
    ids: ResponseIds,
    carry: ResponseCarry,
    notes: list[Note],
    replayed: list[dict[str, Any]],
) -> dict[str, Any]:
    """The call's item as the client gets it, or {} when it is dropped."""
    call.finish_text()
    if not decide_call(ids, carry.call_ids, call, notes, replayed):
        return {}
    return call.client_item(done=True)


def _recover(
    item: dict[str, Any], offered: frozenset[str], notes: list[Note]
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A message whose text holds call markup: the text without it, and the calls."""
    content = item.get("content")
    if not offered or item.get("type") != "message" or not isinstance(content, list):
        return item, []
    parts: list[Any] = []
    calls: list[dict[str, Any]] = []
    for part in content:
        if (
            not isinstance(part, dict)
            or part.get("type") != "output_text"
            or not isinstance(part.get("text"), str)
        ):
            parts.append(part)
            continue
        scanner = TextCallScanner(offered)
        segments = scanner.feed(part["text"]) + scanner.end()
        text = "".join(s for s in segments if isinstance(s, str))
        for segment in segments:
            if isinstance(segment, RecoveredCall):
                notes.append(DeltaRepaired(kind="text_tool_call", detail=segment.format))
                calls.append(recovered_item(segment))
        parts.append({**part, "text": text} if calls else part)
    return ({**item, "content": parts} if calls else item), calls
