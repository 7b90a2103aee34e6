"""SPEC §4, §5, §8, §9: the Responses bridge's stream at the edges the mutation audit found
unpinned: a keep-alive of several comment lines, a data line that is JSON but no chunk, a loop
after only such lines reached the client, choices other than the first or without an index, a
usage chunk whose `choices` is `null`, an error chunk's code and message, and the items a
failed response lists."""

from __future__ import annotations

from typing import Any, cast

import pytest

from proxy.core.events import LoopDetected
from proxy.core.exchange import RoundExchange
from tests.bridge.responses_chat.test_stream import answered_ls
from tests.bridge.responses_chat.wire import body, run
from tests.chat.helpers import chunk, finish, header, role, sse, text, usage_chunk
from tests.responses.helpers import parse

JSON = dict[str, Any]


def test_a_keep_alive_of_several_comment_lines_reaches_the_client_as_it_came() -> None:
    upstream = sse(b": one\n: two", role(), text("Hi"), finish("stop"))
    client = run(body(), [[upstream]]).client
    assert client.startswith(b": one\n: two\n\n")
    assert parse(client)[-1]["type"] == "response.completed"


def test_a_data_line_that_is_json_but_no_chunk_becomes_a_comment_line_by_line() -> None:
    upstream = sse(role(), b"data: [1,\ndata: 2]", text("Hi"), finish("stop"))
    client = run(body(), [[upstream]]).client
    assert client.startswith(b": [1,\n: 2]\n\n")
    assert parse(client)[-1]["response"]["output"][0]["content"][0]["text"] == "Hi"


def looping(upstream: bytes) -> Any:
    _, request = answered_ls()
    replay = sse(
        upstream,
        role(),
        chunk({"tool_calls": [header(0, "functions.shell:0", "shell", '{"cmd":"ls"}')]}),
        finish(),
    )
    return run(request, [[replay], [replay], [replay], [replay]])


def test_a_loop_after_a_line_that_is_no_chunk_is_still_a_plain_error() -> None:
    """SPEC §4, §5: the Chat core makes `data: [1]` a comment, which shows nothing and waits
    with the head: nothing reached the client, so the loop is the surface's plain error."""
    result = looping(b"data: [1]")
    assert result.client == b""
    assert isinstance(result.end, LoopDetected)
    assert result.end.before_first_byte


def test_a_loop_after_only_a_keep_alive_reached_the_client_is_in_stream() -> None:
    """A keep-alive goes out at once (it keeps the connection open): the loop after it is
    in the stream."""
    result = looping(b": keep-alive")
    assert result.client.startswith(b": keep-alive\n\n")
    assert isinstance(result.end, LoopDetected)
    assert not result.end.before_first_byte
    exchange = cast(RoundExchange, result.exchange)
    events = parse(result.client + exchange.stream_error(result.end.error))
    assert events[-1]["type"] == "response.failed"


def failed(upstream: bytes) -> JSON:
    events = parse(run(body(), [[upstream]]).client)
    assert events[-1]["type"] == "response.failed"
    response: JSON = events[-1]["response"]
    return response


def test_a_failed_response_lists_the_items_that_were_done() -> None:
    error = {"error": {"message": "overloaded", "code": "busy"}}
    call = header(0, "call_1", "shell", '{"cmd":')
    response = failed(sse(role(), text("Let me look."), chunk({"tool_calls": [call]}), error))
    # The message closed when the call began; the call never finished.
    assert [item["type"] for item in response["output"]] == ["message"]
    assert response["output"][0]["content"][0]["text"] == "Let me look."
    assert response["error"] == {"code": "busy", "message": "overloaded"}


def test_a_failed_response_before_any_item_lists_none() -> None:
    response = failed(sse(role(), {"error": {"message": "no"}}))
    assert response["output"] == []
    assert response["error"] == {"code": "server_error", "message": "no"}


def output_text(upstream: bytes) -> str:
    events = parse(run(body(), [[upstream]]).client)
    assert events[-1]["type"] == "response.completed"
    items = events[-1]["response"]["output"]
    assert [item["type"] for item in items] == ["message"]
    return str(items[0]["content"][0]["text"])


def test_only_the_first_choice_becomes_the_response() -> None:
    both = {
        "choices": [
            {"index": 0, "delta": {"content": "A"}},
            {"index": 1, "delta": {"content": "B"}},
        ]
    }
    assert output_text(sse(role(), both, text("C"), finish("stop"))) == "AC"


def test_a_choice_without_an_index_is_the_first() -> None:
    no_index = {"choices": [{"delta": {"content": "A"}}]}
    assert output_text(sse(role(), no_index, finish("stop"))) == "A"


def test_a_usage_chunk_with_null_choices_gives_the_usage() -> None:
    usage = usage_chunk(7, 2, choices=None)
    events = parse(run(body(), [[sse(role(), text("Hi"), finish("stop"), usage)]]).client)
    response = events[-1]["response"]
    assert response["output"][0]["content"][0]["text"] == "Hi"
    assert (response["usage"]["input_tokens"], response["usage"]["output_tokens"]) == (7, 2)


@pytest.mark.parametrize(
    ("error", "said"),
    [
        ({"code": 503, "message": "busy"}, {"code": "server_error", "message": "busy"}),
        ({"code": "busy"}, {"code": "busy", "message": ""}),
    ],
    ids=["numeric-code", "no-message"],
)
def test_an_error_chunk_says_a_string_code_and_its_message_or_nothing(
    error: JSON, said: JSON
) -> None:
    assert failed(sse(role(), {"error": error}))["error"] == said


def test_the_responses_head_is_in_progress_with_no_output() -> None:
    events = parse(run(body(), [[sse(role(), text("Hi"), finish("stop"))]]).client)
    assert [e["type"] for e in events[:2]] == ["response.created", "response.in_progress"]
    for event in events[:2]:
        assert (event["response"]["status"], event["response"]["output"]) == ("in_progress", [])


@pytest.mark.parametrize("reasoning", [{"reasoning": ""}, {"reasoning": {"text": "no"}}])
def test_empty_or_non_text_reasoning_opens_no_reasoning_item(reasoning: JSON) -> None:
    upstream = sse(role(), chunk({**reasoning, "content": "Hi"}), finish("stop"))
    events = parse(run(body(), [[upstream]]).client)
    assert not any(e["type"].startswith("response.reasoning") for e in events)
    assert output_text(upstream) == "Hi"
