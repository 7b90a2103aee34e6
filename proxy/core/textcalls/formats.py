"""The table of text-call formats. A new format joins by adding an entry here (and its tests,
and its markup in the simulator's `leak_markup`); the scanner reads nothing else.

An entry says where a block starts (its marker), where it ends (an end marker, or the end of
the JSON value that follows the marker), what its body may start with (so prose that
mentions a marker is released at once), and how its body becomes calls. Entries that share a
start marker share its end too, and their parsers are tried in order on the block's body
(`<tool_call>` holds xLAM's JSON array, Hermes JSON, Qwen3-coder's `<function=...>` with
parameters or with a JSON object (Functionary v3.1, Llama 3.1's custom format), or GLM's name
and pairs). A parser takes a body only if it reads all of it (tagged.py): a body that fits
none stays text. The body grammars are shared (jsonish.py, tagged.py): one call object or an
array of them, an array only, objects one after another, `name{json}`, parameters between
tags, a pythonic call list, FunctionGemma's keys and `<escape>` strings.

Reasoning a model writes into its text (Seed-OSS's `<seed:think>`, with the server's reasoning
parser off) is a quiet span (QUIET_SPANS): it goes out as text as it comes, and markup inside
it is the model thinking about a call, not making one, so no block opens there.

The forms without a marker, a whole message that is nothing but calls (JSON, pythonic,
`functools[...]`, a fenced block), are the scanner's other stage (whole.py): they can only be
decided against the whole content.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from proxy.core.textcalls import jsonish, tagged
from proxy.core.textcalls.checks import (
    IDENTIFIER,
    Check,
    call_id,
    either,
    literal,
    named,
    then,
)
from proxy.core.textcalls.model import Parsed


@dataclass(frozen=True, slots=True)
class Format:
    name: str
    start: str
    end: str | None  # None: the block ends where the JSON value its check opened ends
    parse: Callable[[str], list[Parsed]]  # the body, between the markers
    check: Check  # what the body may start with (for end=None: up to the value's bracket)
    # The model's end token is a stop token that servers leave out of the text (gpt-oss's
    # <|call|>, Llama 4's <|python_end|>): a block still open when the content ends is whole.
    ends_with_content: bool = False
    # The start marker is text of its own that the calls follow (xLAM's `</think>` ends the
    # reasoning it wrote): it stays in the text when the block becomes calls.
    keeps_start: bool = False


def _json_value() -> Check:
    return literal("{", "[")


_TOOL_CALL_END = "</tool_call>"
_HARMONY_CALL = ("commentary to=functions.", "analysis to=functions.")

FORMATS: tuple[Format, ...] = (
    Format(
        "kimi",
        "<|tool_calls_section_begin|>",
        "<|tool_calls_section_end|>",
        tagged.parse_kimi_section,
        literal(tagged.KIMI_CALL_BEGIN, "<|tool_calls_section_end|>"),
    ),
    Format(
        "kimi",
        tagged.KIMI_CALL_BEGIN,
        tagged.KIMI_CALL_END,
        tagged.parse_kimi_call,
        call_id(tagged.KIMI_ARGUMENT_BEGIN),
    ),
    # xLAM writes a JSON array where Hermes writes one object.
    Format("xlam", "<tool_call>", _TOOL_CALL_END, jsonish.parse_json_list, literal("[")),
    Format("hermes", "<tool_call>", _TOOL_CALL_END, jsonish.parse_json_calls, literal("{")),
    Format(
        "qwen3-coder", "<tool_call>", _TOOL_CALL_END, tagged.parse_qwen_coder, literal("<function=")
    ),
    Format(
        "functionary",
        "<tool_call>",
        _TOOL_CALL_END,
        tagged.parse_function_json,
        literal("<function="),
    ),
    # GLM writes the name right after the marker: prose (`<tool_call> tag`) is told apart.
    Format(
        "glm",
        "<tool_call>",
        _TOOL_CALL_END,
        tagged.parse_glm,
        named("<arg_key>", _TOOL_CALL_END, space_before=False),
    ),
    Format("qwen3-coder", "<function=", "</function>", tagged.parse_qwen_coder_bare, named(">")),
    Format("functionary", "<function=", "</function>", tagged.parse_function_json_bare, named(">")),
    Format(
        "seed-oss",
        "<seed:tool_call>",
        "</seed:tool_call>",
        tagged.parse_seed,
        literal("<function="),
    ),
    Format(
        "deepseek",
        tagged.DS_CALLS_BEGIN,
        tagged.DS_CALLS_END,
        tagged.parse_deepseek,
        literal(tagged.DS_CALL_BEGIN),
    ),
    Format(
        "deepseek-dsml",
        f"<{tagged.DSML}function_calls>",
        f"</{tagged.DSML}function_calls>",
        tagged.InvokeParser(tagged.DSML),
        literal(f"<{tagged.DSML}invoke"),
    ),
    Format(
        "minimax",
        "<minimax:tool_call>",
        "</minimax:tool_call>",
        tagged.InvokeParser(""),
        literal("<invoke"),
    ),
    Format("llama", "<|python_tag|>", None, jsonish.parse_json_calls, _json_value()),
    Format(
        "llama4",
        "<|python_start|>",
        "<|python_end|>",
        jsonish.parse_llama4,
        _json_value(),
        ends_with_content=True,
    ),
    Format(
        "mistral",
        "[TOOL_CALLS]",
        None,
        jsonish.parse_mistral,
        either(
            literal("["),  # before v11: an array of call objects
            named("{", space_before=False, space_after=False),  # v11: name{...}
            then(named("[ARGS]", space_before=False), literal("{")),
            then(
                named("[CALL_ID]", space_before=False),
                call_id("[ARGS]"),
                literal("{"),
            ),
        ),
    ),
    Format(
        "lmstudio",
        "[TOOL_REQUEST]",
        "[END_TOOL_REQUEST]",
        jsonish.parse_json_calls,
        literal("{"),
    ),
    Format(
        "harmony",
        "<|channel|>",
        "<|call|>",
        jsonish.parse_harmony,
        literal(*_HARMONY_CALL),
        ends_with_content=True,
    ),
    Format(
        "harmony",
        "<|start|>",
        "<|call|>",
        jsonish.parse_harmony,
        literal(*(f"assistant<|channel|>{c}" for c in _HARMONY_CALL), "assistant to=functions."),
        ends_with_content=True,
    ),  # xLAM: a JSON array right after the reasoning it wrote in the text.
    Format("xlam", "</think>", None, jsonish.parse_json_list, literal("["), keeps_start=True),
    Format("granite", "<|tool_call|>", None, jsonish.parse_json_list, literal("[")),
    Format(
        "internlm",
        "<|action_start|><|plugin|>",
        "<|action_end|>",
        jsonish.parse_json_calls,
        literal("{"),
    ),
    # Jamba, Hunyuan and Apriel write an array; MiniMax-M1 one call object a line.
    Format("jamba", "<tool_calls>", "</tool_calls>", jsonish.parse_json_list, literal("[")),
    Format("minimax-m1", "<tool_calls>", "</tool_calls>", jsonish.parse_json_lines, literal("{")),
    Format("nemotron", "<TOOLCALL>", "</TOOLCALL>", jsonish.parse_json_list, literal("[")),
    Format(
        "lfm2",
        "<|tool_call_start|>",
        "<|tool_call_end|>",
        jsonish.parse_llama4,
        literal("[", "{"),
    ),
    Format(
        "apertus",
        "<|tools_prefix|>",
        "<|tools_suffix|>",
        jsonish.parse_apertus,
        literal("["),
        ends_with_content=True,
    ),
    Format("cohere", "<|START_ACTION|>", "<|END_ACTION|>", jsonish.parse_cohere, literal("[")),
    Format(
        "olmo3",
        "<function_calls>",
        "</function_calls>",
        jsonish.parse_pythonic_lines,
        named("(", name=IDENTIFIER, space_after=False),
    ),
    Format(
        "functiongemma",
        "<start_function_call>",
        "<end_function_call>",
        tagged.parse_functiongemma,
        literal("call:"),
    ),
    Format(
        "longcat",
        "<longcat_tool_call>",
        "</longcat_tool_call>",
        jsonish.parse_json_calls,
        literal("{"),
    ),
)


# Reasoning written into the text, start and end: markup inside it is not a call.
QUIET_SPANS: tuple[tuple[str, str], ...] = (("<seed:think>", "</seed:think>"),)


@dataclass(frozen=True, slots=True)
class Marker:
    """The formats that one start marker may open, in the order their parsers are tried."""

    start: str
    end: str | None
    formats: tuple[Format, ...]
    ends_with_content: bool
    check: Check  # plausible when any of the formats is
    quiet: bool = False  # a quiet span: text up to `end`, no formats
    keeps_start: bool = False  # the start marker stays in the text before the calls


def _markers(
    formats: tuple[Format, ...], quiet: tuple[tuple[str, str], ...]
) -> Mapping[str, Marker]:
    grouped: dict[str, list[Format]] = {}
    for fmt in formats:
        grouped.setdefault(fmt.start, []).append(fmt)
    markers = {}
    for start, group in grouped.items():
        ends = {(f.end, f.ends_with_content, f.keeps_start) for f in group}
        if len(ends) != 1:
            raise ValueError(f"formats starting with {start!r} disagree on how they end")
        [(end, ends_with_content, keeps_start)] = ends
        check = either(*(f.check for f in group))
        markers[start] = Marker(
            start, end, tuple(group), ends_with_content, check, keeps_start=keeps_start
        )
    for start, end in quiet:
        if start in markers:
            raise ValueError(f"{start!r} both opens calls and a quiet span")
        markers[start] = Marker(start, end, (), False, literal(""), quiet=True)
    return MappingProxyType(markers)


MARKERS = _markers(FORMATS, QUIET_SPANS)
