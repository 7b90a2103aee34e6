"""SPEC §5, §8: the follow-up round of a replay-only response (`followup.py`) at the edges
the mutation audit found unpinned: the exact shape of the two messages it adds, and a
replayed call whose arguments are JSON but not an object."""

from __future__ import annotations

from typing import Any

from proxy.core.ids import mint_client_id
from tests.anthropic.anthropic_wire import (
    assistant,
    end,
    request,
    results,
    run,
    start,
    text,
    tool,
    tool_use,
)

LS = {"command": "ls"}
PREFIX = 'Duplicate tool call id "functions.Bash:0" was already handled'


def followup_of(args: Any) -> list[dict[str, Any]]:
    """The two messages the follow-up adds, for a replay of a Bash call with these arguments."""
    minted = mint_client_id(1, 0, "abcd", "functions.Bash:0", "toolu_")
    history = (assistant(tool_use(minted, "Bash", args)), results(minted))
    first = start() + text(0, "Again.") + tool(1, "functions.Bash:0", "Bash", args) + end()
    final = start() + text(0, "Done.") + end("end_turn")
    [body] = run(request(*history), [first, final]).followups
    added: list[dict[str, Any]] = body["messages"][-2:]
    return added


def test_the_follow_up_adds_the_assistant_turn_and_a_user_turn_of_tool_results() -> None:
    [turn, answer] = followup_of(LS)
    assert turn == {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Again."},
            {"type": "tool_use", "id": "functions.Bash:1", "name": "Bash", "input": LS},
        ],
    }
    assert answer["role"] == "user" and set(answer) == {"role", "content"}
    [result] = answer["content"]
    assert set(result) == {"type", "tool_use_id", "is_error", "content"}
    assert (result["type"], result["tool_use_id"], result["is_error"]) == (
        "tool_result",
        "functions.Bash:1",
        True,
    )
    assert result["content"].startswith(PREFIX)


def test_a_replayed_call_whose_arguments_are_not_an_object_is_sent_with_an_empty_input() -> None:
    # Anthropic's tool_use input must be an object: a JSON array would make the upstream
    # refuse the follow-up.
    [turn, _] = followup_of([1, 2])
    assert turn["content"][1]["input"] == {}
