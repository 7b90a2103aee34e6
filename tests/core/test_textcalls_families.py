"""The families of issue #46 part 2, case by case: the shapes the serving engines' own parser
tests use (vLLM, SGLang, llama.cpp, Ollama), read exactly, and their near misses passed on
byte for byte (the round trip in test_textcalls_roundtrip.py writes every format at random).
"""

from __future__ import annotations

import pytest

from proxy.core.textcalls import TextCallScanner
from tests.core.test_textcalls_exact import read

ARG = {"arg1": 1}


@pytest.mark.parametrize(
    ("text", "want"),
    [
        # Mistral v11, and Small 3.2 with the call id
        (
            'Sure.[TOOL_CALLS]special_function{"arg1": 1}',
            ["Sure.", ("mistral", "special_function", ARG)],
        ),
        (
            '[TOOL_CALLS]f{"a": 1}[TOOL_CALLS]g{"b": "x"}',
            [("mistral", "f", {"a": 1}), ("mistral", "g", {"b": "x"})],
        ),
        (
            '[TOOL_CALLS]special_function[CALL_ID]123456789[ARGS]{"arg1": 1}',
            [("mistral", "special_function", ARG)],
        ),
        # Llama 3 JSON, parallel calls separated by `;`
        (
            '{"name": "f", "parameters": {"a": 1}}; {"name": "g", "parameters": {"b": 2}}',
            [("json", "f", {"a": 1}), ("json", "g", {"b": 2})],
        ),
        # pythonic, the whole message
        (
            "[f(a=1, b='it''s'), g(c=[1, {'k': None}], d=-2.5, e=True)]",
            [
                ("pythonic", "f", {"a": 1, "b": "its"}),
                ("pythonic", "g", {"c": [1, {"k": None}], "d": -2.5, "e": True}),
            ],
        ),
        ("  [f()]\n", [("pythonic", "f", {})]),
        # xLAM
        (
            '<think>I should call f.</think>\n\n[{"name": "f", "arguments": {"a": 1}}]',
            ["<think>I should call f.</think>", ("xlam", "f", {"a": 1})],
        ),
        ('```json\n[{"name": "f", "arguments": {"a": 1}}]\n```', [("xlam", "f", {"a": 1})]),
        ('```\n{"name": "f", "arguments": {}}\n```', [("xlam", "f", {})]),
        (
            '<tool_call>[{"name": "f", "arguments": {}}, {"name": "g", "arguments": {}}]'
            "</tool_call>",
            [("xlam", "f", {}), ("xlam", "g", {})],
        ),
        # Granite
        (
            'On it. <|tool_call|>[{"name": "f", "arguments": {"a": 1}}]',
            ["On it. ", ("granite", "f", {"a": 1})],
        ),
        # InternLM2
        (
            'Sure<|action_start|><|plugin|>\n{"name": "f", "parameters": {"a": 1}}<|action_end|>',
            ["Sure", ("internlm", "f", {"a": 1})],
        ),
        # Jamba, Hunyuan, Apriel; MiniMax-M1
        (
            '<tool_calls>[{"name": "f", "arguments": {"a": 1}}]</tool_calls>',
            [("jamba", "f", {"a": 1})],
        ),
        (
            '<tool_calls>\n{"name": "f", "arguments": {"a": 1}}\n'
            '{"name": "g", "arguments": {}}\n</tool_calls>',
            [("minimax-m1", "f", {"a": 1}), ("minimax-m1", "g", {})],
        ),
        # Phi-4-mini and FireFunction
        (
            'functools[{"name": "f", "arguments": {"a": 1}}]',
            [("phi4-mini", "f", {"a": 1})],
        ),
        # Nemotron
        (
            '<TOOLCALL>[{"name": "f", "arguments": {"a": 1}}]</TOOLCALL>',
            [("nemotron", "f", {"a": 1})],
        ),
        # LFM2: pythonic between its tokens, text after
        (
            '<|tool_call_start|>[f(location="Paris")]<|tool_call_end|>It\'s sunny.',
            [("lfm2", "f", {"location": "Paris"}), "It's sunny."],
        ),
        # Apertus (its suffix may be left out: the content ends the block)
        (
            'I will check. <|tools_prefix|>[{"f": {"city": "Paris"}}, {"g": {}}]<|tools_suffix|>',
            ["I will check. ", ("apertus", "f", {"city": "Paris"}), ("apertus", "g", {})],
        ),
        ('<|tools_prefix|>[{"f": {}}]', [("apertus", "f", {})]),
        # Cohere Command R7B / A
        (
            '<|START_ACTION|>[{"tool_call_id": "0", "tool_name": "f", "parameters": {"a": 1}}]'
            "<|END_ACTION|>",
            [("cohere", "f", {"a": 1})],
        ),
        # OLMo 3: one call a line, JSON's spellings
        (
            "<function_calls>f(a=true, b=null)\ng(c='x')</function_calls>",
            [("olmo3", "f", {"a": True, "b": None}), ("olmo3", "g", {"c": "x"})],
        ),
        # FunctionGemma
        (
            "<start_function_call>call:f{city:<escape>Paris, FR<escape>,days:3,"
            "opts:{metric:true,tags:[<escape>a<escape>]}}<end_function_call>",
            [
                (
                    "functiongemma",
                    "f",
                    {"city": "Paris, FR", "days": 3, "opts": {"metric": True, "tags": ["a"]}},
                )
            ],
        ),
        # LongCat
        (
            '<longcat_tool_call>{"name": "f", "arguments": {"a": 1}}</longcat_tool_call>',
            [("longcat", "f", {"a": 1})],
        ),
    ],
)
def test_each_family_is_read_exactly(text: str, want: list[object]) -> None:
    assert read(text) == want


@pytest.mark.parametrize(
    "text",
    [
        # Python that is not literal calls is never evaluated, and never a call
        "[f(a=__import__('os').system('x'))]",
        "[f(a=open('/etc/passwd'))]",
        "[f(1)]",
        "[f(**{'a': 1})]",
        "[f(a={1, 2})]",
        "[f(a=b'x')]",
        "[f(a=1e999)]",
        "[f(a=2**70)]",
        "[f(a=1)] and some words",
        "[os.system(a=1)]",
        # JSON calls with text around or between them
        '{"name": "f", "parameters": {}}; junk',
        '{"name": "f", "parameters": {}};',
        'functools[{"name": "f", "arguments": {}}] and more',
        '```json\n[{"name": "f", "arguments": {}}]\n``` and more',
        '```python\n[{"name": "f", "arguments": {}}]\n```',
        # near misses of each body
        '[TOOL_CALLS]f{"a": 1',
        '[TOOL_CALLS]f junk{"a": 1}',
        '<|tools_prefix|>[{"f": {}, "g": {}}]<|tools_suffix|>',
        '<|tools_prefix|>[{"f": [1]}]<|tools_suffix|>',
        '<|START_ACTION|>[{"tool_name": "f", "parameters": {}, "extra": 1}]<|END_ACTION|>',
        "<function_calls>f(a=1)\nprint('x') or g()</function_calls>",
        "<function_calls>f(a=1)\nx = 2</function_calls>",
        "<start_function_call>call:f{a:Paris}<end_function_call>",
        "<start_function_call>call:f{a:<escape>x<escape>} junk<end_function_call>",
        '<tool_calls>[{"name": "f", "arguments": {}}] junk</tool_calls>',
        '<TOOLCALL>{"name": "f", "arguments": {}}</TOOLCALL>',
        '<|action_start|><|plugin|>{"name": "f", "args": {}}<|action_end|>',
        # markup cut short
        "<|tool_call_start|>[f(a=1)",
        '<|START_ACTION|>[{"tool_name": "f", "parameters": {}}]',
        "[f(a=1), g(",
        # prose that mentions a marker
        "The </think> tag ends reasoning; [1] is a citation.",
        "Use <tool_calls> to list calls, or <TOOLCALL> in Nemotron.",
        "functools is a module",
    ],
)
def test_near_misses_pass_byte_for_byte(text: str) -> None:
    assert read(text) == [text]


def test_a_tool_not_offered_is_no_call() -> None:
    for text in (
        "[h(a=1)]",
        '[TOOL_CALLS]h{"a": 1}',
        '<|tools_prefix|>[{"h": {}}]<|tools_suffix|>',
        "<start_function_call>call:h{}<end_function_call>",
        '{"name": "f", "parameters": {}}; {"name": "h", "parameters": {}}',
    ):
        assert read(text) == [text]


def test_a_pythonic_message_is_held_only_while_it_can_be_a_call() -> None:
    scanner = TextCallScanner(frozenset({"f"}))
    assert scanner.feed("[Note(see below)] ") == []  # a name and `(`: may be a call list
    assert scanner.feed("is prose") == ["[Note(see below)] is prose"]
    for prose in ("[1] prose", "[Note (see below)] prose", "[Note] prose"):
        scanner = TextCallScanner(frozenset({"f"}))
        assert scanner.feed(prose) == [prose]


def test_a_whole_message_form_is_in_a_call_once_its_value_opens() -> None:
    # SPEC §4: a broken line inside a possible call ends the stream; prose that merely starts
    # with a form's first letter is not a call.
    scanner = TextCallScanner(frozenset({"f"}))
    assert scanner.feed("f") == [] and not scanner.in_call
    assert scanner.feed('unctools[{"name"') == [] and scanner.in_call
    scanner = TextCallScanner(frozenset({"f"}))
    assert scanner.feed("[") == [] and scanner.in_call
    scanner = TextCallScanner(frozenset({"f"}))
    assert scanner.feed("fo") == ["fo"] and not scanner.in_call
