"""Tool calls leaked into text (sans-IO): one fixture per format, whole and split everywhere."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from proxy.chat.history import translate_request
from proxy.chat.message import sanitize_completion
from proxy.chat.stream import StreamSanitizer
from proxy.core.decide import ResponseIds
from proxy.core.guard import GuardState
from proxy.core.textcalls import RecoveredCall, TextCallScanner
from proxy.simulator.profiles import LEAK_FORMATS, WHOLE_MESSAGE_LEAKS, PlannedCall, leak_markup

OFFERED = frozenset({"run_shell_command", "read_file"})
CALLS = (
    PlannedCall("run_shell_command", '{"command": "ls -la"}', None),
    PlannedCall("read_file", '{"path": "/tmp/é.txt"}', None),
)


def scan_in_pieces(text: str, cuts: list[int]) -> list[Any]:
    scanner = TextCallScanner(OFFERED)
    out: list[Any] = []
    previous = 0
    for cut in [*cuts, len(text)]:
        out += scanner.feed(text[previous:cut])
        previous = cut
    out += scanner.end()
    return normalize(out)


def normalize(segments: list[Any]) -> list[Any]:
    """Adjacent text pieces are one text (how they were cut is not part of the contract)."""
    out: list[Any] = []
    for seg in segments:
        if isinstance(seg, str) and out and isinstance(out[-1], str):
            out[-1] += seg
        elif not (isinstance(seg, str) and not seg):
            out.append(seg)
    return out


def calls_for(fmt: str) -> tuple[PlannedCall, ...]:
    return CALLS[:1] if fmt == "llama" else CALLS  # <|python_tag|> carries one call


def around(fmt: str, markup: str, before: str, after: str) -> tuple[str, list[str]]:
    """The text with prose around the markup, and the prose expected back (none around a
    format that must be the whole message)."""
    if fmt in WHOLE_MESSAGE_LEAKS:
        return markup, []
    return before + markup + after, [before, after]


@pytest.mark.parametrize("fmt", LEAK_FORMATS)
def test_each_format_recovered_whole_and_at_every_split(fmt: str) -> None:
    calls = calls_for(fmt)
    text, prose = around(fmt, leak_markup(fmt, calls), "Before. ", " After.")
    whole = scan_in_pieces(text, [])
    recovered = [s for s in whole if isinstance(s, RecoveredCall)]
    assert [(c.name, orjson.loads(c.arguments)) for c in recovered] == [
        (c.name, orjson.loads(c.arguments)) for c in calls
    ]
    assert [s for s in whole if isinstance(s, str)] == prose
    for cut in range(1, len(text)):
        assert scan_in_pieces(text, [cut]) == whole, cut
    assert scan_in_pieces(text, list(range(1, len(text)))) == whole


def test_kimi_call_keeps_its_raw_id_for_replay_detection() -> None:
    [call] = [
        s for s in scan_in_pieces(leak_markup("kimi", CALLS[:1]), []) if not isinstance(s, str)
    ]
    assert call.raw_id == "functions.run_shell_command:0"


@pytest.mark.parametrize(
    "text",
    [
        "Use the <tool_call> tag to call tools, like <tool_call>this</tool_call>.",
        "a < b and c > d, [TOOL x] and <function=f> prose",
        '<tool_call>{"name": "rm_rf", "arguments": {}}</tool_call>',  # not an offered tool
        '<tool_call>{"name": "read_file", "arguments": {"path": </tool_call>',  # broken JSON
        '<|python_tag|>{"name": "read_file", "parameters": {"path": "/x"',  # never completes
        "<tool_call>",
        "<|tool_calls_section_begin|> not kimi",
        # complete blocks of the newer formats that are not calls of an offered tool
        '<minimax:tool_call><invoke name="rm_rf"><parameter name="x">1</parameter></invoke>'
        "</minimax:tool_call>",
        '<minimax:tool_call><invoke name="read_file">oops</invoke></minimax:tool_call>',
        "<tool_call>rm_rf<arg_key>x</arg_key><arg_value>1</arg_value></tool_call>",
        "<tool_call>read_file<arg_key>x</arg_key>oops</tool_call>",
        '[TOOL_REQUEST]{"name": "read_file", "arguments": [1]}[END_TOOL_REQUEST]',
        '<|python_start|>[read_file(path=open("/etc/passwd"))]<|python_end|>',  # not a literal
        '<|python_start|>[read_file("/x")]<|python_end|>',  # positional
        "<|python_start|>[read_file(**{'path': '/x'})]<|python_end|>",
        "<|python_start|>[read_file(path={1, 2})]<|python_end|>",  # a set has no JSON form
        "<|channel|>commentary to=functions.rm_rf <|constrain|>json<|message|>{}<|call|>",
        "<|channel|>commentary to=browser.search <|constrain|>json<|message|>{}<|call|>",
        "<|channel|>commentary to=functions.read_file <|constrain|>json<|message|>[1]<|call|>",
        '<\uff5cDSML\uff5cfunction_calls><\uff5cDSML\uff5cinvoke name="read_file">'
        '<\uff5cDSML\uff5cparameter name="path" string="true">/x</\uff5cDSML\uff5cparameter>'
        "</\uff5cDSML\uff5cinvoke>",  # never closed
    ],
)
def test_text_that_is_not_a_valid_offered_call_stays_exactly_as_it_came(text: str) -> None:
    for cuts in ([], list(range(1, len(text)))):
        assert scan_in_pieces(text, cuts) == [text]


@pytest.mark.parametrize(
    "text",
    [
        "see <tool_call> here",
        "wrap it in <minimax:tool_call> tags",
        "Llama 4 writes <|python_start|> then code",
        "LM Studio uses [TOOL_REQUEST] markers",
        "DeepSeek writes <\uff5cDSML\uff5cfunction_calls> blocks",
        "<|channel|>analysis<|message|>The user wants the weather.<|end|>",
        "<|start|>assistant<|channel|>final<|message|>Hi",
        "Mistral writes [TOOL_CALLS] first",
    ],
)
def test_prose_mentioning_a_marker_is_released_without_waiting_for_the_end(text: str) -> None:
    scanner = TextCallScanner(OFFERED)
    assert "".join(str(s) for s in scanner.feed(text)) == text
    assert not scanner.holding


def recovered(text: str) -> list[Any]:
    """Calls as (format, name, arguments), and text, from `text` fed whole and char by char."""
    whole = scan_in_pieces(text, [])
    assert scan_in_pieces(text, list(range(1, len(text)))) == whole
    return [
        (s.format, s.name, orjson.loads(s.arguments)) if isinstance(s, RecoveredCall) else s
        for s in whole
    ]


def test_harmony_call_whose_end_token_the_server_left_out_ends_with_the_content() -> None:
    # <|call|> is a stop token: servers that keep special tokens still leave it out.
    text = '<|channel|>commentary to=functions.read_file <|constrain|>json<|message|>{"path": "/x"}'
    assert recovered(text) == [("harmony", "read_file", {"path": "/x"})]


def test_harmony_reasoning_stays_text_and_the_call_after_it_is_recovered() -> None:
    analysis = "<|channel|>analysis<|message|>Need the file.<|end|>"
    call = (
        "<|start|>assistant to=functions.read_file<|channel|>commentary json<|message|>"
        '{"path": "/x"}<|call|>'
    )
    assert recovered(analysis + call) == [analysis, ("harmony", "read_file", {"path": "/x"})]


def test_dsml_parameters_typed_by_their_string_attribute_and_json_invokes() -> None:
    d = "\uff5cDSML\uff5c"
    text = (
        f'<{d}function_calls>\n<{d}invoke name="read_file">\n'
        f'<{d}parameter name="path" string="true">007</{d}parameter>\n'
        f'<{d}parameter name="limit" string="false">10</{d}parameter>\n</{d}invoke>\n'
        f'<{d}invoke name="run_shell_command">\n{{"command": "ls"}}\n</{d}invoke>\n'
        f"</{d}function_calls>"
    )
    assert recovered(text) == [
        ("deepseek-dsml", "read_file", {"path": "007", "limit": 10}),
        ("deepseek-dsml", "run_shell_command", {"command": "ls"}),
    ]


def test_glm_values_json_or_text_and_a_call_without_arguments() -> None:
    text = (
        "<tool_call>read_file<arg_key>path</arg_key><arg_value>/x y</arg_value>"
        "<arg_key>lines</arg_key><arg_value>[1, 2]</arg_value></tool_call>"
        "<tool_call>run_shell_command\n</tool_call>"
    )
    assert recovered(text) == [
        ("glm", "read_file", {"path": "/x y", "lines": [1, 2]}),
        ("glm", "run_shell_command", {}),
    ]


def test_llama4_pythonic_calls_with_literal_values() -> None:
    text = "<|python_start|>[read_file(path='/x', opts={'n': [1, None, True]})]<|python_end|>"
    assert recovered(text) == [
        ("llama4", "read_file", {"path": "/x", "opts": {"n": [1, None, True]}})
    ]


def test_mistral_named_form() -> None:
    text = 'Sure.[TOOL_CALLS]read_file[ARGS]{"path": "/x"} done'
    assert recovered(text) == ["Sure.", ("mistral", "read_file", {"path": "/x"}), " done"]


def test_a_real_call_inside_a_failed_block_is_still_recovered() -> None:
    # The outer block ends at the first </tool_call> and is not JSON; its body is scanned again.
    inner = '<tool_call>{"name": "read_file", "arguments": {"path": "/x"}}</tool_call>'
    text = '<tool_call>{"broken": ' + inner + " tail"
    assert recovered(text) == [
        '<tool_call>{"broken": ',
        ("hermes", "read_file", {"path": "/x"}),
        " tail",
    ]


def test_nothing_offered_means_nothing_recovered() -> None:
    scanner = TextCallScanner(frozenset())
    text = leak_markup("hermes", CALLS)
    assert normalize(scanner.feed(text) + scanner.end()) == [text]


# --- through the stream and message cores --------------------------------------------------------

REQUEST = {
    "model": "qwen",
    "messages": [{"role": "user", "content": "go"}],
    "tools": [{"type": "function", "function": {"name": n}} for n in sorted(OFFERED)],
}


def sse(pieces: list[str], finish: str = "stop") -> bytes:
    def chunk(delta: dict[str, Any], reason: str | None = None) -> bytes:
        body = {
            "id": "c",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": reason}],
        }
        return b"data: " + orjson.dumps(body) + b"\n\n"

    out = chunk({"role": "assistant", "content": ""})
    out += b"".join(chunk({"content": p}) for p in pieces)
    return out + chunk({}, finish) + b"data: [DONE]\n\n"


def run_stream(data: bytes, step: int | None, text_tool_calls: bool = True) -> list[dict[str, Any]]:
    translated = translate_request(REQUEST, "auto")
    core = StreamSanitizer(
        ResponseIds(translated.facts, "auto", GuardState(), lambda: "abcd"),
        text_tool_calls=text_tool_calls,
    )
    out = []
    pieces = [data] if step is None else [data[i : i + step] for i in range(0, len(data), step)]
    for piece in pieces:
        out += core.feed(piece)
    out += core.end()
    raw = b"".join(out)
    assert raw.endswith(b"data: [DONE]\n\n")
    return [orjson.loads(e[6:]) for e in raw.split(b"\n\n") if e.startswith(b"data: {")]


def client_view(events: list[dict[str, Any]]) -> tuple[str, list[tuple[str, str, str]], str]:
    content, calls, finish = "", {}, ""
    for event in events:
        for choice in event["choices"]:
            delta = choice["delta"]
            content += delta.get("content") or ""
            for tc in delta.get("tool_calls", []):
                slot = calls.setdefault(tc["index"], ["", "", ""])
                slot[0] += tc.get("id", "")
                slot[1] += tc.get("function", {}).get("name", "")
                slot[2] += tc.get("function", {}).get("arguments", "")
            finish = choice.get("finish_reason") or finish
    return content, [tuple(v) for _, v in sorted(calls.items())], finish  # type: ignore[misc]


@pytest.mark.parametrize("fmt", LEAK_FORMATS)
def test_stream_recovers_calls_split_at_every_byte(fmt: str) -> None:
    calls = calls_for(fmt)
    markup = leak_markup(fmt, calls)
    text, prose = around(fmt, markup, "Let me look. ", "")
    pieces = [
        text[: len(text) - len(markup)],
        *(markup[i : i + 7] for i in range(0, len(markup), 7)),
    ]
    data = sse([p for p in pieces if p])
    expected = client_view(run_stream(data, None))
    content, got_calls, finish = expected
    assert content == "".join(prose)
    assert finish == "tool_calls"
    # SPEC §2.2: the random half, then the digest of the raw id (tests/core/test_ids.py)
    assert [(c[0][:-4], c[1], orjson.loads(c[2])) for c in got_calls] == [
        (f"call_1_{i}_abcd", c.name, orjson.loads(c.arguments)) for i, c in enumerate(calls)
    ]
    assert client_view(run_stream(data, 1)) == expected


def test_stream_content_without_markers_is_forwarded_byte_for_byte() -> None:
    data = sse(["plain ", "text"])
    translated = translate_request(REQUEST, "auto")
    core = StreamSanitizer(
        ResponseIds(translated.facts, "auto", GuardState()), text_tool_calls=True
    )
    assert b"".join(core.feed(data) + core.end()) == data


def test_stream_with_text_tool_calls_off_leaves_markup() -> None:
    markup = leak_markup("hermes", CALLS)
    content, calls, finish = client_view(run_stream(sse([markup]), None, text_tool_calls=False))
    assert content == markup and calls == [] and finish == "stop"


def test_non_streaming_message_recovers_calls() -> None:
    translated = translate_request(REQUEST, "auto")
    ids = ResponseIds(translated.facts, "auto", GuardState(), lambda: "abcd")
    body = {
        "id": "x",
        "choices": [
            {
                "index": 0,
                "finish_reason": "stop",
                "message": {
                    "role": "assistant",
                    "content": "Sure. " + leak_markup("deepseek", CALLS),
                },
            }
        ],
    }
    result = sanitize_completion(body, ids, text_tool_calls=True)
    message = result.body["choices"][0]["message"]
    assert message["content"] == "Sure. "
    assert [c["id"][:-4] for c in message["tool_calls"]] == ["call_1_0_abcd", "call_1_1_abcd"]
    assert result.body["choices"][0]["finish_reason"] == "tool_calls"
