"""Chat Completions' follow-up request (SPEC §5): the previous request, this round's assistant
message with the replayed calls, and one `tool` message per replay."""

from __future__ import annotations

from typing import Any

from proxy.core.guard import GuardState, Replay, plan_followup
from proxy.core.ledger import HistoryFacts


def build_followup(
    upstream_body: dict[str, Any],
    facts: HistoryFacts,
    guard: GuardState,
    content: str,
    replays: list[Replay],
    reasoning: dict[str, str] | None = None,
) -> tuple[dict[str, Any], HistoryFacts]:
    """Chat Completions' follow-up: the previous upstream request + this round's assistant
    message (its text, its reasoning in the fields the upstream sent it in, its replayed
    calls) + one `tool` message per replay. Returns the body and the facts of its history."""
    answers, new_facts = plan_followup(facts, guard, replays)
    tool_calls = [
        {
            "id": answer.upstream_id,
            "type": "function",
            "function": {"name": answer.replay.name, "arguments": answer.replay.arguments},
        }
        for answer in answers
    ]
    tool_messages = [
        {"role": "tool", "tool_call_id": answer.upstream_id, "content": answer.text}
        for answer in answers
    ]
    # A thinking model (Kimi, DeepSeek) refuses a tool-call turn without its reasoning.
    assistant: dict[str, Any] = {"role": "assistant", "content": content, **(reasoning or {})}
    assistant["tool_calls"] = tool_calls
    body = {**upstream_body, "messages": [*upstream_body["messages"], assistant, *tool_messages]}
    return body, new_facts
