"""SPEC §9: an Anthropic conversation's blocks as Chat messages, at the edges the mutation
audit found unpinned: `cache_control` on an assistant block, a text block without text, a
user block with no Chat form, results for no call or twice for one, and an empty tool id."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.bridge.anthropic_chat import messages_to_chat
from proxy.core.errors import ClientRequestError

JSON = dict[str, Any]
CACHED = {"type": "ephemeral"}


def chat_of(messages: list[JSON]) -> tuple[list[JSON], tuple[str, ...]]:
    chat, dropped = messages_to_chat({"model": "m", "max_tokens": 16, "messages": messages})
    out: list[JSON] = chat["messages"]
    return out, dropped


def use(tool_id: str) -> JSON:
    return {"type": "tool_use", "id": tool_id, "name": "Bash", "input": {}}


def result(tool_id: str, content: str = "ok") -> JSON:
    return {"type": "tool_result", "tool_use_id": tool_id, "content": content}


def test_blocks_keep_their_text_and_name_what_has_no_chat_form() -> None:
    messages, dropped = chat_of(
        [
            {
                "role": "user",
                "content": [{"type": "text", "cache_control": CACHED}, {"type": "search_result"}],
            },
            {
                "role": "assistant",
                "content": [{"type": "text", "text": "A", "cache_control": CACHED}],
            },
            {"role": "user", "content": "next"},
        ]
    )
    assert messages == [
        {"role": "user", "content": ""},
        {"role": "assistant", "content": "A"},
        {"role": "user", "content": "next"},
    ]
    assert dropped == ("cache_control", "search_result")


@pytest.mark.parametrize(
    ("results", "named"),
    [(["toolu_1", "toolu_9"], "toolu_9"), (["toolu_1", "toolu_1"], "toolu_1")],
    ids=["for-no-call", "twice-for-one-call"],
)
def test_results_that_answer_no_call_are_refused_in_anthropics_words(
    results: list[str], named: str
) -> None:
    conversation: list[JSON] = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [use("toolu_1")]},
        {
            "role": "user",
            "content": [result(tool_id, f"ok {n}") for n, tool_id in enumerate(results)],
        },
    ]
    with pytest.raises(ClientRequestError) as raised:
        chat_of(conversation)
    assert raised.value.message.startswith(
        f"unexpected `tool_use_id` found in `tool_result` blocks: '{named}'."
    )


def test_an_empty_tool_id_is_refused() -> None:
    conversation: list[JSON] = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [use("")]},
    ]
    with pytest.raises(ClientRequestError) as raised:
        chat_of(conversation)
    assert raised.value.message == "every tool_use block needs an `id` string"
