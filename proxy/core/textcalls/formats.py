"""The table of text-call formats. A new format joins by adding an entry here (and its tests,
and its markup in the simulator's `leak_markup`); the scanner reads nothing else.

An entry says where a block starts (its marker), where it ends (an end marker, or the end of
the JSON value that follows the marker), what its body may start with (so prose that
mentions a marker is released at once), and how its body becomes calls. Entries that share a
start marker share its end too, and their parsers are tried in order on the block's body
(`<tool_call>` holds Hermes JSON, Qwen3-coder's `<function=...>` with parameters or with a
JSON object (Functionary v3.1, Llama 3.1's custom format), or GLM's name and pairs). A parser
takes a body only if it reads all of it (tagged.py): a body that fits none stays text.

Reasoning a model writes into its text (Seed-OSS's `<seed:think>`, with the server's reasoning
parser off) is a quiet span (QUIET_SPANS): it goes out as text as it comes, and markup inside
it is the model thinking about a call, not making one, so no block opens there.

The one form without a marker, a whole message that is nothing but a JSON call, is the
scanner's other stage (whole.py): it can only be decided against the whole content.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from proxy.core.textcalls import jsonish, tagged
from proxy.core.textcalls.checks import Check, call_id, either, literal, named, then
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
        either(literal("["), then(named("[ARGS]", space_before=False), literal("{"))),
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


def _markers(
    formats: tuple[Format, ...], quiet: tuple[tuple[str, str], ...]
) -> Mapping[str, Marker]:
    grouped: dict[str, list[Format]] = {}
    for fmt in formats:
        grouped.setdefault(fmt.start, []).append(fmt)
    markers = {}
    for start, group in grouped.items():
        ends = {(f.end, f.ends_with_content) for f in group}
        if len(ends) != 1:
            raise ValueError(f"formats starting with {start!r} disagree on how they end")
        [(end, ends_with_content)] = ends
        check = either(*(f.check for f in group))
        markers[start] = Marker(start, end, tuple(group), ends_with_content, check)
    for start, end in quiet:
        if start in markers:
            raise ValueError(f"{start!r} both opens calls and a quiet span")
        markers[start] = Marker(start, end, (), False, literal(""), quiet=True)
    return MappingProxyType(markers)


MARKERS = _markers(FORMATS, QUIET_SPANS)
