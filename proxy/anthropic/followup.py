"""The follow-up round of a replay-only response, in Anthropic's messages (SPEC §5, §8).

The previous upstream request, then an assistant message with the round's blocks (text and
thinking as the upstream sent them) and the replayed calls as tool_use blocks under fresh
upstream ids in the route's dialect, then a user message with one `tool_result` per replay,
`is_error: true`, whose text starts with `Duplicate tool call id "<raw id>" was already
handled`. Which ids are fresh and what the breaker allows is the shared guard's decision.
"""

from __future__ import annotations

from typing import Any

import orjson

from proxy.core.guard import GuardState, Replay, plan_followup
from proxy.core.ledger import HistoryFacts


def _input(arguments: str) -> object:
    try:
        value = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def build_followup(
    upstream_body: dict[str, Any],
    facts: HistoryFacts,
    guard: GuardState,
    blocks: list[dict[str, Any]],
    replays: list[Replay],
) -> tuple[dict[str, Any], HistoryFacts]:
    """The follow-up request's body and the facts of its history."""
    answers, new_facts = plan_followup(facts, guard, replays)
    calls = [
        {
            "type": "tool_use",
            "id": answer.upstream_id,
            "name": answer.replay.name,
            "input": _input(answer.replay.arguments),
        }
        for answer in answers
    ]
    results = [
        {
            "type": "tool_result",
            "tool_use_id": answer.upstream_id,
            "is_error": True,
            "content": answer.text,
        }
        for answer in answers
    ]
    assistant = {"role": "assistant", "content": [*blocks, *calls]}
    user = {"role": "user", "content": results}
    messages = [*upstream_body["messages"], assistant, user]
    return {**upstream_body, "messages": messages}, new_facts
