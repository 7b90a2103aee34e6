"""SPEC §9: a bridge refuses, in its client's words, a history whose calls and answers do not
pair (the mutation audit found the unanswered call named, and a history that ends with
calls, unpinned). Through both client APIs' mappings."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.bridge.anthropic_chat import messages_to_chat
from proxy.bridge.responses_chat import responses_to_chat
from proxy.core.errors import ClientRequestError
from tests.bridge.responses_chat.wire import body, call, output, user

JSON = dict[str, Any]


def responses_refusal(*items: JSON) -> str:
    with pytest.raises(ClientRequestError) as raised:
        responses_to_chat(body(*items))
    return raised.value.message


@pytest.mark.parametrize(
    "after", [[user("and now?")], []], ids=["before-a-user-message", "at-the-end"]
)
def test_responses_names_the_first_call_left_without_output(after: list[JSON]) -> None:
    items = [user("go"), call("call_one"), call("call_two", '{"cmd":"pwd"}'), *after]
    assert responses_refusal(*items).startswith(
        "No tool output found for function call 'call_one'."
    )


def test_responses_names_the_second_call_when_the_first_has_its_output() -> None:
    items = [user("go"), call("call_one"), call("call_two", '{"cmd":"pwd"}')]
    message = responses_refusal(*items, output("call_one"), user("next"))
    assert message.startswith("No tool output found for function call 'call_two'.")


def anthropic_body(messages: list[JSON]) -> JSON:
    return {"model": "m", "max_tokens": 16, "messages": messages}


def tool_use(tool_id: str) -> JSON:
    return {"type": "tool_use", "id": tool_id, "name": "Bash", "input": {"command": "ls"}}


@pytest.mark.parametrize(
    "after",
    [[{"role": "user", "content": "and now?"}], []],
    ids=["before-a-user-message", "at-the-end"],
)
def test_anthropic_names_the_first_tool_use_left_without_result(after: list[JSON]) -> None:
    assistant: JSON = {
        "role": "assistant",
        "content": [tool_use("toolu_one"), tool_use("toolu_two")],
    }
    messages = [{"role": "user", "content": "go"}, assistant, *after]
    with pytest.raises(ClientRequestError) as raised:
        messages_to_chat(anthropic_body(messages))
    assert raised.value.message.startswith(
        "`tool_use` ids were found without `tool_result` blocks immediately after: 'toolu_one'."
    )
