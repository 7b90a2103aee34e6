"""Core behaviours that no other test pinned, each checked on what the client receives.

Every test here was shown failing on a small change to the core that breaks exactly its
behaviour (a mutation audit found them unguarded), so a reshaping of the core that breaks one
of them is noticed. They feed `StreamSanitizer` upstream bytes, or `sanitize_completion` a
whole response, and assert on the output only.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from proxy.chat.message import sanitize_completion
from proxy.chat.stream import StreamSanitizer
from tests.chat.helpers import (
    Setup,
    assert_well_formed,
    call_summary,
    calls,
    chunk,
    content_of,
    feed_reads,
    finish,
    finish_reasons,
    minted,
    parse_sse,
    request,
    role,
    run,
    sse,
    text,
    tool,
)

# -- a stream that opens with `choices: []` ------------------------------------------------------

# What Azure OpenAI sends first: the prompt's content-filter results, no choices, empty id.
AZURE_FILTER_CHUNK = {
    "choices": [],
    "created": 0,
    "id": "",
    "model": "",
    "object": "",
    "prompt_filter_results": [
        {"prompt_index": 0, "content_filter_results": {"hate": {"filtered": False}}}
    ],
}


@pytest.mark.parametrize(
    "first",
    [AZURE_FILTER_CHUNK, {**AZURE_FILTER_CHUNK, "id": "chatcmpl-1"}],
    ids=["empty-id", "with-id"],
)
def test_stream_opening_with_no_choices_and_ending_without_finish_gets_one(
    first: dict[str, Any],
) -> None:
    """SPEC §4: a body that ends cleanly without `finish_reason` is completed, also when its
    first chunk carried no choice (the choice is only seen in later, unparsed chunks)."""
    upstream = sse(first, role(), text("Hello"), text(" there."), done=False)
    result = run(lambda: Setup().core(), upstream)
    assert content_of(result.events) == "Hello there."
    assert finish_reasons(result.events) == ["stop"]
    assert result.events[-1].is_done
    assert_well_formed(result.events)


# -- leaked text calls ------------------------------------------------------------------------

GET_TIME = {"type": "function", "function": {"name": "get_time", "parameters": {}}}
KIMI_EMPTY_ARGS = (
    "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_time:0"
    "<|tool_call_argument_begin|>{args}<|tool_call_end|><|tool_calls_section_end|>"
)


def text_calls_core(body: dict[str, Any]) -> StreamSanitizer:
    return StreamSanitizer(Setup(body=body).ids(), text_tool_calls=True)


@pytest.mark.parametrize("args", ["", "  "], ids=["empty", "blank"])
def test_kimi_markup_with_empty_arguments_is_recovered_in_a_stream(args: str) -> None:
    markup = KIMI_EMPTY_ARGS.format(args=args)
    pieces = [markup[i : i + 7] for i in range(0, len(markup), 7)]  # markers split across chunks
    upstream = sse(role(), text("Checking. "), *(text(p) for p in pieces), finish("stop"))
    body = request(tools=[GET_TIME])
    out = feed_reads(text_calls_core(body), [upstream])
    events = parse_sse(out)
    assert content_of(events) == "Checking. "
    assert call_summary(events) == [(minted(1, 0, "functions.get_time:0"), "get_time", "{}")]
    assert finish_reasons(events) == ["tool_calls"]
    assert_well_formed(events)


@pytest.mark.parametrize("args", ["", "  "], ids=["empty", "blank"])
def test_kimi_markup_with_empty_arguments_is_recovered_in_a_whole_response(args: str) -> None:
    message = {"role": "assistant", "content": "Checking. " + KIMI_EMPTY_ARGS.format(args=args)}
    body = {"choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}
    ids = Setup(body=request(tools=[GET_TIME])).ids()
    result = sanitize_completion(body, ids, text_tool_calls=True)
    choice = result.body["choices"][0]
    assert choice["message"]["content"] == "Checking. "
    assert [
        (c["id"], c["function"]["name"], c["function"]["arguments"])
        for c in choice["message"]["tool_calls"]
    ] == [(minted(1, 0, "functions.get_time:0"), "get_time", "{}")]
    assert choice["finish_reason"] == "tool_calls"


BLOCK_CAP = 256 * 1024  # characters an unterminated text-call block may be held for


def test_unterminated_text_call_block_is_held_up_to_256_kib_then_released_as_text() -> None:
    """A leaked block that never ends must not hold the client's content hostage: up to the
    cap it may still become a call (held), one character past it, it is released as text,
    whole, and text after it flows at once."""
    body = request(tools=[GET_TIME])
    core = text_calls_core(body)
    opening = "<|tool_call_begin|>functions.get_time:0<|tool_call_argument_begin|>{"
    received: list[str] = []

    def feed(piece: str) -> None:
        out = b"".join(core.feed(sse(text(piece), done=False)))
        received.append(content_of(parse_sse(out)))

    feed("Before. ")
    assert received == ["Before. "]
    block = [opening]
    feed(opening)
    filler = 16 * 1024
    while sum(map(len, block)) + filler <= BLOCK_CAP:
        block.append("x" * filler)
        feed(block[-1])
    rest = BLOCK_CAP - sum(map(len, block))
    block.append("y" * rest)
    feed(block[-1])
    assert sum(map(len, block)) == BLOCK_CAP
    assert "".join(received) == "Before. ", "a block within the cap is held"
    feed("z")  # one past the cap
    assert received[-1] == "".join(block) + "z", "past the cap the block leaves as text, whole"
    feed(" After.")
    assert received[-1] == " After."
    out = b"".join(core.feed(sse(finish("stop"))))
    events = parse_sse(out)
    assert finish_reasons(events) == ["stop"] and events[-1].is_done


# -- arguments -------------------------------------------------------------------------------


@pytest.mark.parametrize("blank", ["", " ", "\n\t "], ids=["empty", "space", "whitespace"])
def test_blank_arguments_become_empty_object_in_a_whole_response(blank: str) -> None:
    call = {
        "id": "call_Ab3De5Gh7Jk9Lm1No3Pq5Rs",
        "type": "function",
        "function": {"name": "get_time", "arguments": blank},
    }
    message = {"role": "assistant", "content": None, "tool_calls": [call]}
    body = {"choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}]}
    result = sanitize_completion(body, Setup().ids())
    delivered = result.body["choices"][0]["message"]["tool_calls"]
    assert [c["function"]["arguments"] for c in delivered] == ["{}"]


@pytest.mark.parametrize("blank", ["", " ", "\n\t "], ids=["empty", "space", "whitespace"])
def test_blank_arguments_parse_as_empty_object_in_a_stream(blank: str) -> None:
    """The streamed counterpart of the test above: what the client reassembles parses as {}."""
    upstream = sse(
        calls(tool(index=0, id="call_Ab3De5Gh7Jk9Lm1No3Pq5Rs", type="function", name="get_time")),
        calls(tool(index=0, arguments=blank)),
        finish(),
    )
    result = run(lambda: Setup().core(), upstream)
    [(_, name, arguments)] = call_summary(result.events)
    assert name == "get_time" and json.loads(arguments) == {}


# -- index-less deltas -----------------------------------------------------------------------


def test_nameless_second_item_of_an_index_less_delta_is_a_call_of_its_own() -> None:
    """SPEC §4: without `index`, several calls in one delta are told apart by position, so
    the second item never continues the first call, even when it carries no name and the
    first call's arguments are still incomplete."""
    first_id, second_id = "call_Ab3De5Gh7Jk9Lm1No3Pq5Rs", "call_Zy9Xw8Vu7Ts6Rq5Po4Nm3Lk2"
    items = [
        tool(id=first_id, type="function", name="get_time", arguments='{"tz":"UTC"'),
        tool(id=second_id, arguments='{"b":2}'),
    ]
    result = run(lambda: Setup().core(), sse(chunk({"tool_calls": items}), finish()))
    summary = call_summary(result.events)
    assert summary[0] == (first_id, "get_time", '{"tz":"UTC"')
    assert all('{"b":2}' not in arguments for _, _, arguments in summary)
