"""The follow-up request of a replay-only round on Responses (SPEC §5, §8).

The previous upstream request's `input`, then the round's items (what the client already
received: messages, reasoning), then each replayed call under a fresh upstream id in the
route's dialect, then one `function_call_output` (or `custom_tool_call_output`) per replay
whose output starts with `Duplicate tool call id "<raw id>" was already handled`.
"""

from __future__ import annotations

from typing import Any

from proxy.core.guard import GuardState, Replay, plan_followup
from proxy.core.ledger import HistoryFacts


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
    """Raises ReplayLoopDetected when one more round is one too many (the breaker).

    In a `conversation` the upstream already appended the round's items (the replayed call
    under the id it issued): the follow-up sends only the answers, under that id, so the
    conversation holds no unanswered call and nothing twice."""
    answers, new_facts = plan_followup(facts, guard, replays)
    if upstream_body.get("conversation") is not None:
        stored = [
            {
                "type": f"{_kind(item)}_output",
                "call_id": answer.replay.raw_id,
                "output": answer.text,
            }
            for answer, item in zip(answers, replayed_items, strict=True)
        ]
        return {**upstream_body, "input": stored}, new_facts
    calls: list[dict[str, Any]] = []
    outputs: list[dict[str, Any]] = []
    for answer, item in zip(answers, replayed_items, strict=True):
        kind = _kind(item)
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


def _kind(item: dict[str, Any]) -> str:
    return "custom_tool_call" if item.get("type") == "custom_tool_call" else "function_call"
