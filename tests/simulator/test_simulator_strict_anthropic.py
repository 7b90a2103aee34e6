"""The simulator's strict Anthropic rule (`strict=1`, SPEC §11): which histories Anthropic
refuses, and in which words (the message index of the turn whose ids are unanswered, or the
block of the result that answers nothing)."""

from __future__ import annotations

from typing import Any

from proxy.simulator.anthropic import unpaired


def use(use_id: str) -> dict[str, Any]:
    return {"type": "tool_use", "id": use_id, "name": "Bash", "input": {}}


def result(use_id: str) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": use_id, "content": "ok"}


TEXT = {"type": "text", "text": "go on"}


def test_a_paired_history_passes() -> None:
    body = {
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [TEXT, use("a"), use("b")]},
            {"role": "user", "content": [result("b"), result("a"), TEXT]},
            {"role": "assistant", "content": "done"},
        ]
    }
    assert unpaired(body) is None


def test_every_unanswered_id_of_the_turn_is_named_at_its_index() -> None:
    body = {
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [use("a"), use("b"), use("c")]},
            {"role": "user", "content": [result("b")]},
        ]
    }
    refusal = unpaired(body)
    assert refusal is not None
    assert refusal.startswith(
        "messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: "
        "a, c. "
    )


def test_a_result_one_message_too_late_is_refused() -> None:
    body = {
        "messages": [
            {"role": "assistant", "content": [use("a")]},
            {"role": "user", "content": [TEXT]},
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": [result("a")]},
        ]
    }
    assert (unpaired(body) or "").startswith("messages.0: `tool_use` ids were found")


def test_a_result_whose_call_is_not_in_the_message_before_is_named_by_its_block() -> None:
    body = {
        "messages": [
            {"role": "assistant", "content": [use("a")]},
            {"role": "user", "content": [result("a"), TEXT, result("x")]},
        ]
    }
    assert (unpaired(body) or "").startswith(
        "messages.1.content.2: unexpected `tool_use_id` found in `tool_result` blocks: x. "
    )


def test_a_history_that_ends_on_calls_is_refused() -> None:
    body = {
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [use("a")]},
        ]
    }
    assert (unpaired(body) or "").startswith("messages.1: `tool_use` ids were found")
