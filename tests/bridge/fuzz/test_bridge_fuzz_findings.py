"""What fuzzing the bridges found (SPEC §9), each pinned by a plain example: the request
mappings refused what they could not serve with an exception other than a 400, sent the
upstream histories it cannot read, named client-made strings in a response header as they
were, and quoted whole client values in their refusals."""

from __future__ import annotations

import re
from typing import Any

import pytest

from proxy.bridge.anthropic_chat import new_anthropic_over_chat
from proxy.bridge.responses_chat.exchange import new_responses_over_chat
from proxy.core.errors import ClientRequestError
from proxy.core.rounds import RouteRules
from tests.bridge.fuzz.fuzz_grammar import check_chat_request

JSON = dict[str, Any]
HEADER_SAFE = re.compile(r"[\x21-\x7e]{1,64}")


def entropy(n: int) -> bytes:
    return b"\x11" * n


def responses(body: JSON, rules: RouteRules | None = None) -> Any:
    return new_responses_over_chat(body, b"", rules or RouteRules(), entropy)


def anthropic(body: JSON, rules: RouteRules | None = None) -> Any:
    return new_anthropic_over_chat(body, b"", rules or RouteRules(), entropy)


# SPEC §11: with request_repair on (the default) such histories are repaired instead
# (tests/bridge/test_request_repair.py).
UNREPAIRED = RouteRules(request_repair=False)


def call(call_id: object) -> JSON:
    return {"type": "function_call", "call_id": call_id, "name": "shell", "arguments": "{}"}


def output(call_id: object) -> JSON:
    return {"type": "function_call_output", "call_id": call_id, "output": "ok"}


def user(text: str) -> JSON:
    return {"type": "message", "role": "user", "content": text}


def tool_use(tool_id: object) -> JSON:
    return {"type": "tool_use", "id": tool_id, "name": "Bash", "input": {}}


def tool_result(tool_id: object) -> JSON:
    return {"type": "tool_result", "tool_use_id": tool_id, "content": "ok"}


# -- a 400, not a crash ------------------------------------------------------------------------


@pytest.mark.parametrize("include", [{}, [{"a": 1}], [["x"]], {"reasoning": True}])
def test_responses_include_of_any_shape_is_named_not_a_crash(include: object) -> None:
    """`include` holding objects made the mapping raise TypeError (a 500)."""
    exchange = responses({"input": "hi", "include": include})
    check_chat_request(exchange.upstream_request)
    assert any(name.startswith("include") for name in exchange.dropped)


# -- with request_repair off, histories a Chat upstream cannot read are refused, as the client's
# own API refuses them ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("items", "named"),
    [
        ([user("go"), call("call_a")], "call_a"),  # a call without its output
        ([user("go"), call("call_a"), user("and?")], "call_a"),
        ([user("go"), output("call_z")], "call_z"),  # an output without its call
        ([user("go"), call("call_a"), output("call_b")], "call_b"),
        ([user("go"), call("call_a"), output("call_a"), output("call_a")], "call_a"),
    ],
)
def test_responses_unpaired_calls_and_outputs_are_refused(items: list[JSON], named: str) -> None:
    with pytest.raises(ClientRequestError) as refused:
        responses({"input": items}, UNREPAIRED)
    assert refused.value.status == 400
    assert named in refused.value.message


@pytest.mark.parametrize("call_id", [None, "", 7, {"a": 1}])
def test_responses_call_ids_must_be_strings(call_id: object) -> None:
    """A missing, empty or non-string call_id went upstream as it was (`null`, `""`)."""
    for items in ([user("go"), call(call_id), output(call_id)], [user("go"), output(call_id)]):
        with pytest.raises(ClientRequestError, match="call_id"):
            responses({"input": items})


def test_responses_paired_history_is_still_served() -> None:
    items = [user("go"), call("call_a"), call("call_b"), output("call_b"), output("call_a")]
    chat = check_chat_request(responses({"input": items}).upstream_request)
    assert [m.get("tool_call_id") for m in chat["messages"][2:]] == ["call_a", "call_b"]


@pytest.mark.parametrize(
    ("messages", "named"),
    [
        (
            [
                {"role": "user", "content": "go"},
                {"role": "assistant", "content": [tool_use("toolu_a")]},
            ],
            "toolu_a",
        ),
        (
            [
                {"role": "user", "content": "go"},
                {"role": "assistant", "content": [tool_use("toolu_a")]},
                {"role": "user", "content": "no result"},
            ],
            "toolu_a",
        ),
        ([{"role": "user", "content": [tool_result("toolu_z")]}], "toolu_z"),
    ],
)
def test_anthropic_unpaired_tool_use_and_results_are_refused(
    messages: list[JSON], named: str
) -> None:
    with pytest.raises(ClientRequestError) as refused:
        anthropic({"messages": messages}, UNREPAIRED)
    assert named in refused.value.message


@pytest.mark.parametrize("tool_id", [None, "", 3])
def test_anthropic_tool_ids_must_be_strings(tool_id: object) -> None:
    messages = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [tool_use(tool_id)]},
        {"role": "user", "content": [tool_result(tool_id)]},
    ]
    with pytest.raises(ClientRequestError, match="id"):
        anthropic({"messages": messages})


# -- what a response header and a refusal carry -------------------------------------------------


def test_dropped_names_are_header_safe() -> None:
    """Unknown fields are named in `x-toolcall-proxy-dropped-tools`: a line break in one (or
    any control character) made the server refuse to send the response's head."""
    extra = {"a\r\nset-cookie: x": 1, "x" * 500: 2, "é": 3}
    for exchange in (
        responses({"input": "hi", **extra}),
        anthropic({"messages": [{"role": "user", "content": "hi"}], **extra}),
    ):
        assert len(exchange.dropped) == 3
        assert all(HEADER_SAFE.fullmatch(name) for name in exchange.dropped), exchange.dropped


def test_dropped_names_are_bounded() -> None:
    extra = {f"field_{n}": n for n in range(100)}
    exchange = responses({"input": "hi", **extra})
    assert len(exchange.dropped) <= 32
    assert exchange.dropped[-1].endswith("more")


@pytest.mark.parametrize(
    "message",
    [{"role": "x" * 10_000, "content": "hi"}, {"role": {"k": "y" * 10_000}, "content": [7]}],
)
def test_anthropic_refusals_quote_values_short(message: JSON) -> None:
    with pytest.raises(ClientRequestError) as refused:
        anthropic({"messages": [message]})
    assert len(refused.value.message) < 200


# -- what the client reads is UTF-8 -------------------------------------------------------------

CUT_INSIDE_A_CHARACTER = (
    b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m",'
    b'"choices":[{"index":0,"delta":{"role":"assistant","content":"hi"},"finish_reason":null}]}'
    b'\n\ndata: {"choices":[{"index":0,"delta":{"content":"caf\xc3'  # ends inside "é"
)


@pytest.mark.parametrize("factory", [new_responses_over_chat, new_anthropic_over_chat])
def test_a_stream_cut_inside_a_character_reaches_the_client_as_utf8(factory: Any) -> None:
    """The Chat exchange hands on a last line that is not JSON as an SSE comment, with the
    bytes it had: cut inside a UTF-8 character, they made the client's bytes invalid UTF-8,
    on which the openai and anthropic SDKs raise UnicodeDecodeError."""
    body = {"model": "m", "input": "hi", "messages": [{"role": "user", "content": "hi"}]}
    exchange = factory({**body, "stream": True}, b"", RouteRules(), entropy)
    exchange.begin_round(stream=True)
    out = b""
    for event in exchange.feed(CUT_INSIDE_A_CHARACTER) + exchange.end():
        out += event if isinstance(event, bytes) else getattr(event, "data", b"")
    text = out.decode("utf-8")  # raised before
    assert "caf\ufffd" in text  # the comment is still there, its cut character replaced


# -- tool_choice names only a tool the upstream is offered ---------------------------------------


@pytest.mark.parametrize(
    "choice",
    [
        {"type": "function", "name": "apply_patch"},  # not among the request's tools
        {"type": "function", "name": "web_search"},  # a hosted tool, left out
        {"type": "custom", "name": "shell", "namespace": "ns"},  # another tool's namespace
    ],
)
def test_responses_tool_choice_of_a_tool_not_offered_is_named(choice: JSON) -> None:
    """A `tool_choice` naming a function the Chat body does not offer went upstream, which
    refuses it (OpenAI: the function is not in `tools`)."""
    tools = [{"type": "function", "name": "shell"}, {"type": "web_search"}]
    exchange = responses({"input": "hi", "tools": tools, "tool_choice": choice})
    chat = check_chat_request(exchange.upstream_request)
    assert "tool_choice" not in chat and "tool_choice" in exchange.dropped


def test_responses_tool_choice_of_an_offered_tool_is_kept() -> None:
    tools = [{"type": "function", "name": "shell"}]
    choice = {"type": "function", "name": "shell"}
    exchange = responses({"input": "hi", "tools": tools, "tool_choice": choice})
    chat = check_chat_request(exchange.upstream_request)
    assert chat["tool_choice"] == {"type": "function", "function": {"name": "shell"}}
