"""SPEC §9: an Anthropic request as Chat's, at the edges the mutation audit found unpinned:
an empty system prompt, refusals in Anthropic's words (bad `messages`, bad content, a role,
unpaired tool blocks), `tool_choice` with nothing to apply to, `disable_parallel_tool_use`
with `none`, stop sequences that are no list, and `metadata.user_id` that is no string."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.bridge.anthropic_chat import messages_to_chat
from proxy.core.errors import ClientRequestError

JSON = dict[str, Any]
BASH = {"name": "Bash", "input_schema": {"type": "object"}}
HI = [{"role": "user", "content": "hi"}]


def chat_of(**fields: Any) -> tuple[JSON, tuple[str, ...]]:
    body: JSON = {"model": "m", "max_tokens": 16, "messages": HI, **fields}
    return messages_to_chat(body)


def refusal(**fields: Any) -> str:
    with pytest.raises(ClientRequestError) as raised:
        chat_of(**fields)
    return raised.value.message


@pytest.mark.parametrize("system", ["", [], None], ids=["empty", "no-blocks", "null"])
def test_an_empty_system_prompt_adds_no_system_message(system: object) -> None:
    chat, _ = chat_of(system=system)
    assert chat["messages"] == HI


def test_a_system_prompt_that_is_no_string_or_blocks_is_refused() -> None:
    assert refusal(system=5) == "a system message's content must be a string or a list of blocks"


@pytest.mark.parametrize(
    ("messages", "message"),
    [
        ("hi", "`messages` must be a list"),
        (["hi"], "every message must be an object"),
        ([{"role": "tool", "content": "x"}], "unknown message role 'tool'"),
        (
            [{"role": "assistant", "content": 5}],
            "a assistant message's content must be a string or a list of blocks",
        ),
    ],
    ids=["not-a-list", "not-an-object", "role", "content"],
)
def test_a_malformed_conversation_is_refused_in_words(messages: object, message: str) -> None:
    assert refusal(messages=messages) == message


def use(tool_id: str) -> JSON:
    return {"type": "tool_use", "id": tool_id, "name": "Bash", "input": {}}


def result(tool_id: str) -> JSON:
    return {"type": "tool_result", "tool_use_id": tool_id, "content": "ok"}


def test_unpaired_tool_blocks_are_refused_with_anthropics_whole_message() -> None:
    unanswered = [*HI, {"role": "assistant", "content": [use("toolu_1")]}, *HI]
    assert refusal(messages=unanswered) == (
        "`tool_use` ids were found without `tool_result` blocks immediately after: "
        "'toolu_1'. Each `tool_use` block must have a corresponding `tool_result` block in "
        "the next message."
    )
    unexpected = [{"role": "user", "content": [result("toolu_9")]}]
    assert refusal(messages=unexpected) == (
        "unexpected `tool_use_id` found in `tool_result` blocks: 'toolu_9'. Each "
        "`tool_result` block must have a corresponding `tool_use` block in the previous "
        "message."
    )


@pytest.mark.parametrize(
    ("fields", "chat", "dropped"),
    [
        ({"tool_choice": {"type": "auto"}}, {}, ("tool_choice",)),
        ({"tools": [BASH], "tool_choice": "auto"}, {}, ("tool_choice",)),
        (
            {"tools": [BASH], "tool_choice": {"type": "none", "disable_parallel_tool_use": True}},
            {"tool_choice": "none"},
            (),
        ),
        (
            {"tools": [BASH], "tool_choice": {"type": "any", "disable_parallel_tool_use": True}},
            {"tool_choice": "required", "parallel_tool_calls": False},
            (),
        ),
    ],
    ids=["no-tools", "not-an-object", "none-keeps-parallel", "any-without-parallel"],
)
def test_tool_choice(fields: JSON, chat: JSON, dropped: tuple[str, ...]) -> None:
    mapped, named = chat_of(**fields)
    assert {k: mapped[k] for k in ("tool_choice", "parallel_tool_calls") if k in mapped} == chat
    assert named == dropped


@pytest.mark.parametrize(
    ("fields", "chat", "dropped"),
    [
        ({"stop_sequences": "END"}, {}, ()),
        ({"stop_sequences": ["END"]}, {"stop": ["END"]}, ()),
        ({"metadata": {"user_id": 5, "team": "a"}}, {}, ("metadata.team",)),
        ({"metadata": {"user_id": "u1"}}, {"user": "u1"}, ()),
    ],
    ids=["stops-not-a-list", "stops", "user-id-not-a-string", "user-id"],
)
def test_stop_sequences_and_user_id(fields: JSON, chat: JSON, dropped: tuple[str, ...]) -> None:
    mapped, named = chat_of(**fields)
    assert {k: mapped[k] for k in ("stop", "user") if k in mapped} == chat
    assert named == dropped


def test_system_prompts_and_messages_keep_their_text_and_name_what_they_drop() -> None:
    image = {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}}
    cached = {"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}
    chat, dropped = chat_of(
        system="Be brief.",
        messages=[
            {"role": "system", "content": [{"type": "text", "text": "Mid."}, image]},
            {"role": "user", "content": [cached]},
        ],
    )
    assert chat["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "system", "content": "Mid."},
        {"role": "user", "content": "hi"},
    ]
    assert dropped == ("system:image", "cache_control")
