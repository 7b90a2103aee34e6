"""The follow-up request of a replay-only round on Responses (SPEC §5, §8).

The previous upstream request's `input`, then the round's items (what the client already
received: messages, reasoning), then each replayed call under a fresh upstream id in the
route's dialect, then one `function_call_output` (or `custom_tool_call_output`) per replay
whose output starts with `Duplicate tool call id "<raw id>" was already handled`.
"""

from __future__ import annotations

from typing import Any

from proxy.chat.guard import GuardState, Replay, plan_followup
from proxy.chat.ledger import HistoryFacts


def input_items(body: dict[str, Any]) -> list[Any]:
    """`input` as a list of items (a plain string is one user message)."""
    items = body.get("input")
    if isinstance(items, list):
        return items
    if isinstance(items, str):
        return [{"type": "message", "role": "user", "content": items}]
    return []


def build_followup(
    upstream_body: dict[str, Any],
    facts: HistoryFacts,
    guard: GuardState,
    round_items: list[dict[str, Any]],
    replays: list[Replay],
    replayed_items: list[dict[str, Any]],
) -> tuple[dict[str, Any], HistoryFacts]:
    """Raises ReplayLoopDetected when one more round is one too many (the breaker)."""
    answers, new_facts = plan_followup(facts, guard, replays)
    calls: list[dict[str, Any]] = []
    outputs: list[dict[str, Any]] = []
    for answer, item in zip(answers, replayed_items, strict=True):
        kind = "custom_tool_call" if item.get("type") == "custom_tool_call" else "function_call"
        text_key = "input" if kind == "custom_tool_call" else "arguments"
        calls.append(
            {
                "type": kind,
                "call_id": answer.upstream_id,
                "name": answer.replay.name,
                text_key: answer.replay.arguments,
            }
        )
        outputs.append(
            {"type": f"{kind}_output", "call_id": answer.upstream_id, "output": answer.text}
        )
    items = [*input_items(upstream_body), *round_items, *calls, *outputs]
    return {**upstream_body, "input": items}, new_facts
