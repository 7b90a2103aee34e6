"""A block becomes calls only with exactly the arguments it holds (issue #46: never a wrong call).

A reader that met body text it does not understand used to leave it out and return the call
anyway: `<function=f>{"arg1": 1}</function>` (Functionary v3.1, Llama 3.1's custom format) was
read by the Qwen3-coder reader as `f` with `{}`, and the agent ran `f` with arguments the model
never gave. Now a body is read whole by the format that fits it, or it stays text, byte for
byte. Also Seed-OSS: its `<seed:tool_call>` wrapper leaves the text with its call, and a call
quoted in its `<seed:think>` reasoning is not made.
"""

from __future__ import annotations

from typing import Any
from unittest import mock

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.core.textcalls import RecoveredCall, TextCallScanner
from proxy.core.textcalls import scanner as scanner_module
from tests.core.test_textcalls import REQUEST, client_view, run_stream, sse

OFFERED = frozenset({"f", "g", "special_function"})


def read(text: str, offered: frozenset[str] = OFFERED) -> list[Any]:
    """Text and calls as (format, name, arguments), the same fed whole and a character at a
    time."""
    results = []
    for cuts in ([], list(range(1, len(text)))):
        scanner = TextCallScanner(offered)
        out: list[Any] = []
        previous = 0
        for cut in [*cuts, len(text)]:
            out += scanner.feed(text[previous:cut])
            previous = cut
        out += scanner.end()
        joined: list[Any] = []
        for s in out:
            if isinstance(s, RecoveredCall):
                joined.append((s.format, s.name, orjson.loads(s.arguments)))
            elif joined and isinstance(joined[-1], str):
                joined[-1] += s
            elif s:
                joined.append(s)
        results.append(joined)
    assert results[0] == results[1]
    return results[0]


@pytest.mark.parametrize(
    "text",
    [
        '<function=special_function>{"arg1": 1}</function>',
        '<tool_call><function=special_function>{"arg1": 1}</function></tool_call>',
        '<tool_call>\n<function=special_function>\n{"arg1": 1}\n</function>\n</tool_call>',
    ],
)
def test_a_json_object_body_is_the_calls_arguments(text: str) -> None:
    assert read(text) == [("functionary", "special_function", {"arg1": 1})]


def test_the_json_body_is_passed_on_as_the_model_wrote_it() -> None:
    scanner = TextCallScanner(OFFERED)
    [call] = scanner.feed('<function=f>{"b": 2.50, "a": "\\u00e9"}</function>') + scanner.end()
    assert isinstance(call, RecoveredCall) and call.arguments == '{"b": 2.50, "a": "\\u00e9"}'


@pytest.mark.parametrize("text", ["<function=f></function>", "<function=f>\n \n</function>"])
def test_a_function_with_nothing_inside_is_a_call_without_arguments(text: str) -> None:
    assert read(text) == [("qwen3-coder", "f", {})]


@pytest.mark.parametrize(
    "text",
    [
        # Qwen3-coder's parameters with text around or between them, or JSON beside them
        "<function=f>junk<parameter=a>1</parameter></function>",
        "<function=f><parameter=a>1</parameter>junk</function>",
        "<function=f><parameter=a>1</parameter>junk<parameter=b>2</parameter></function>",
        '<function=f><parameter=a>1</parameter>{"b": 2}</function>',
        '<function=f>{"b": 2}<parameter=a>1</parameter></function>',
        "<function=f><parameter=a>1</parameter><parameter=a>2</parameter></function>",
        "<tool_call><function=f>text, not parameters</function></tool_call>",
        # a JSON body that is not one object, whole
        '<function=f>{"a": 1} and more</function>',
        '<function=f>{"a": 1}{"b": 2}</function>',
        "<function=f>[1, 2]</function>",
        '<function=f>"text"</function>',
        '<function=f>{"a": 1</function>',
        # Seed-OSS
        '<seed:tool_call><function=f>{"a": 1}x</function></seed:tool_call>',
        # GLM
        "<tool_call>f<arg_key>a</arg_key><arg_value>1</arg_value>junk</tool_call>",
        "<tool_call>f<arg_key>a</arg_key><arg_value>1</arg_value>"
        "<arg_key>a</arg_key><arg_value>2</arg_value></tool_call>",
        # MiniMax and DSML
        '<minimax:tool_call><invoke name="f"><parameter name="a">1</parameter></invoke>'
        "junk</minimax:tool_call>",
        '<minimax:tool_call><invoke name="f"><parameter name="a">1</parameter>'
        '<parameter name="a">2</parameter></invoke></minimax:tool_call>',
        '<minimax:tool_call><invoke name="f">{"a": 1} x</invoke></minimax:tool_call>',
        # DeepSeek V3.1: text between two calls
        "<\uff5ctool\u2581calls\u2581begin\uff5c>"
        '<\uff5ctool\u2581call\u2581begin\uff5c>f<\uff5ctool\u2581sep\uff5c>{"a": 1}'
        "<\uff5ctool\u2581call\u2581end\uff5c>junk"
        '<\uff5ctool\u2581call\u2581begin\uff5c>g<\uff5ctool\u2581sep\uff5c>{"b": 2}'
        "<\uff5ctool\u2581call\u2581end\uff5c><\uff5ctool\u2581calls\u2581end\uff5c>",
        # Kimi: a call id with text in it
        "<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0 junk"
        '<|tool_call_argument_begin|>{"a": 1}<|tool_call_end|><|tool_calls_section_end|>',
        # call objects with a key the readers do not know, or both argument keys
        '<tool_call>{"name": "f", "args": {"a": 1}}</tool_call>',
        '<tool_call>{"name": "f", "arguments": {}, "parameters": {"a": 1}}</tool_call>',
        '[TOOL_CALLS][{"name": "f", "input": {"a": 1}}]',
        '[TOOL_REQUEST]{"name": "f", "params": {"a": 1}}[END_TOOL_REQUEST]',
        '<|python_tag|>{"name": "f", "parameters": {}, "arguments": {"a": 1}}',
        '<|python_start|>{"name": "f", "kwargs": {"a": 1}}<|python_end|>',
    ],
)
def test_a_body_no_reader_reads_whole_stays_text_byte_for_byte(text: str) -> None:
    assert read(text) == [text]


@pytest.mark.parametrize("end", ["", "<|call|>"])
def test_a_harmony_call_without_its_json_is_no_call(end: str) -> None:
    # <|call|> is a stop token servers leave out: content that ends at <|message|> was cut
    # where the arguments begin, it did not give none.
    text = f"<|channel|>commentary to=functions.f <|constrain|>json<|message|>{end}"
    assert read(text) == [text]


def test_text_between_kimi_calls_stays_text_and_the_calls_are_exact() -> None:
    call = '<|tool_call_begin|>functions.{0}:{1}<|tool_call_argument_begin|>{{"a": {1}}}'
    first, second = call.format("f", 0), call.format("g", 1)
    text = (
        f"<|tool_calls_section_begin|>{first}<|tool_call_end|>junk{second}<|tool_call_end|>"
        "<|tool_calls_section_end|>"
    )
    # The section is not read (it has text in it); each call in it is, on its own.
    assert read(text) == [
        "<|tool_calls_section_begin|>",
        ("kimi", "f", {"a": 0}),
        "junk",
        ("kimi", "g", {"a": 1}),
        "<|tool_calls_section_end|>",
    ]


def test_text_beside_a_seed_function_stays_text_and_the_function_is_exact() -> None:
    function = "<function=f><parameter=a>1</parameter></function>"
    call = ("qwen3-coder", "f", {"a": 1})  # read on its own, as a bare <function=...>
    assert read(f"<seed:tool_call>junk{function}</seed:tool_call>") == [
        "<seed:tool_call>junk",
        call,
        "</seed:tool_call>",
    ]
    assert read(f"<seed:tool_call>{function}x</seed:tool_call>") == [
        "<seed:tool_call>",
        call,
        "x</seed:tool_call>",
    ]


def test_two_functions_in_one_tool_call_are_not_merged_into_one_call() -> None:
    # The block's one <function=...> used to run to the last </function>, and the parameters
    # of both were read as one call of the first.
    text = (
        "<tool_call><function=f><parameter=a>1</parameter></function>"
        "<function=g><parameter=b>2</parameter></function></tool_call>"
    )
    assert read(text) == [
        "<tool_call>",
        ("qwen3-coder", "f", {"a": 1}),
        ("qwen3-coder", "g", {"b": 2}),
        "</tool_call>",
    ]


# --- Seed-OSS ------------------------------------------------------------------------------------

SEED_CALL = (
    "<seed:tool_call>\n<function=f>\n<parameter=path>/tmp/a b</parameter>\n"
    "<parameter=n>3</parameter>\n</function>\n</seed:tool_call>"
)


def test_seed_call_leaves_the_text_with_its_wrapper() -> None:
    assert read("I'll look.\n" + SEED_CALL + "\n") == [
        "I'll look.\n",
        ("seed-oss", "f", {"path": "/tmp/a b", "n": 3}),
        "\n",
    ]


def test_seed_block_with_two_functions_is_two_calls() -> None:
    text = (
        "<seed:tool_call><function=f><parameter=a>1</parameter></function>\n"
        "<function=g></function></seed:tool_call>"
    )
    assert read(text) == [("seed-oss", "f", {"a": 1}), ("seed-oss", "g", {})]


def test_a_call_quoted_in_seed_reasoning_is_not_made_and_the_real_one_is() -> None:
    thinking = f"<seed:think>The user wants it. I will write {SEED_CALL} next.</seed:think>"
    assert read(thinking + "Sure.\n" + SEED_CALL) == [
        thinking + "Sure.\n",
        ("seed-oss", "f", {"path": "/tmp/a b", "n": 3}),
    ]


def test_seed_reasoning_that_never_ends_is_all_text() -> None:
    text = "<seed:think>maybe <function=f>{}</function> or " + SEED_CALL
    assert read(text) == [text]


def test_seed_reasoning_streams_out_as_it_comes() -> None:
    scanner = TextCallScanner(OFFERED)
    assert scanner.feed("<seed:think>Let me") == ["<seed:think>Let me"]
    assert not scanner.holding  # plain text of the reasoning needs no look
    assert scanner.feed(" call <function=f>") == [" call <function=f>"]
    assert scanner.feed("{}</function> </seed:th") == ["{}</function> </seed:th"]
    assert scanner.holding  # the end may be coming
    assert scanner.feed("ink>") == ["ink>"]


# --- through the Chat Completions stream ---------------------------------------------------------


def test_stream_reads_the_json_body_not_empty_arguments() -> None:
    text = 'On it. <function=read_file>{"path": "/x"}</function>'
    data = sse([text[i : i + 5] for i in range(0, len(text), 5)])
    content, calls, finish = client_view(run_stream(data, None))
    assert content == "On it. " and finish == "tool_calls"
    assert [(c[1], orjson.loads(c[2])) for c in calls] == [("read_file", {"path": "/x"})]
    assert client_view(run_stream(data, 1)) == (content, calls, finish)
    assert REQUEST["tools"]  # read_file is offered there


QUIET_FRAGMENTS = st.sampled_from(
    [
        "word ",
        "<seed:think>",
        "<seed:",
        "think>",
        "</seed:think>",
        "</seed:",
        "</",
        "<",
        "<function=f>",
        '{"a": 1}</function>',
        "<seed:tool_call><function=f><parameter=a>1</parameter></function></seed:tool_call>",
    ]
)


@settings(max_examples=300, deadline=None)
@given(pieces=st.lists(st.lists(QUIET_FRAGMENTS, max_size=4).map("".join), max_size=10))
def test_the_shortcut_answers_as_the_stages_do_in_and_around_reasoning(pieces: list[str]) -> None:
    def fed() -> list[list[Any]]:
        scanner = TextCallScanner(OFFERED)
        return [scanner.feed(piece) for piece in pieces] + [scanner.end()]

    with mock.patch.object(scanner_module, "SHORTCUT", False):
        expected = fed()
    assert fed() == expected
    text = "".join(pieces)
    out = [s for feed in expected for s in feed]
    if not any(isinstance(s, RecoveredCall) for s in out):
        assert "".join(out) == text  # nothing dropped
