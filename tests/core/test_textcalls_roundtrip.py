"""Every text-call format, differentially: calls written in the format are read back exactly.

For random tool names and random argument objects, each writer below writes the calls as a
model would in that format (written here from the format's description, not with the
simulator's writers), the scanner reads the text back, and the arguments must be the same
JSON (compared as canonical JSON, so `1` and `1.0` differ). The same text fed in pieces (a
character at a time, and at random cuts) must read the same. Then the negatives: the markup
cut short, naming no offered tool, or a marker in prose goes out byte for byte, and a cut
text is never read as a call other than one it fully contains.

What each format can express (the restrictions on the generated values):
- every format: tool names are identifiers; strings hold no markup (no `<` or `[` before a
  letter, `/`, `|`, `!` or U+FF5C), since a format's own end marker inside a value ends its
  block (such a block is not read as a call: it stays text);
- JSON formats (Hermes, Kimi, DeepSeek V3/V3.1, Functionary, Llama 3 and 4, Mistral, LM Studio,
  harmony, xLAM, Granite, InternLM2, Jamba, MiniMax-M1, Nemotron, Apertus, Cohere, LongCat,
  Phi-4-mini, a whole-message call): any JSON object;
- Python call syntax (Llama 4, LFM2, OLMo 3, a whole-message call list): keyword names are
  identifiers (values: any JSON value, written as Python literals or in JSON's spelling);
- FunctionGemma: keys are names at every depth (values: any JSON value, strings between
  `<escape>` tokens);
- formats that write each parameter between tags (Qwen3-coder, Seed-OSS, GLM, MiniMax, DSML):
  parameter names are identifiers; the proxy does not see the tools' schemas, so a string
  that reads as JSON (`"42"`, `"true"`, ignoring surrounding whitespace) is that JSON value,
  except in DSML, whose `string="true"` says it is a string; one newline either side of a
  value is the template's (Qwen3-coder writes it), so in the others a string that starts or
  ends with a newline is not exact.
"""

from __future__ import annotations

import json
import keyword
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.core.textcalls import RecoveredCall, TextCallScanner
from proxy.core.textcalls.formats import FORMATS, MARKERS
from proxy.core.textcalls.whole import FORMATS as WHOLE_FORMATS

Args = dict[str, Any]
Call = tuple[str, Args]

_MARKUP = re.compile("[<\\[][A-Za-z/|!\uff5c]")
_SPECIAL = ['"', "\\", "\n", "\r", "\t", "'", "<", "[", "{", "}", "]", ">", "é", "\u2028", "\x00"]
STRINGS = st.text(
    st.one_of(st.characters(exclude_categories=["Cs"]), st.sampled_from(_SPECIAL)), max_size=12
).filter(lambda s: _MARKUP.search(s) is None)
IDENTIFIERS = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,11}", fullmatch=True).filter(
    lambda s: not keyword.iskeyword(s)
)
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    STRINGS,
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(STRINGS, inner, max_size=3),
    max_leaves=8,
)
JSON_ARGS = st.dictionaries(STRINGS, VALUES, max_size=4)
PYTHON_ARGS = st.dictionaries(IDENTIFIERS, VALUES, max_size=4)


def _reads_as_json(text: str) -> bool:
    try:
        orjson.loads(text.strip())
    except orjson.JSONDecodeError:
        return False
    return True


def _tag_value(typed: bool, newlines: bool) -> st.SearchStrategy[Any]:
    """A parameter between tags: not a string that reads as JSON unless the tag says it is a
    string (`typed`), no newline at either end unless the template writes one (`newlines`)."""

    def fits(value: Any) -> bool:
        if not isinstance(value, str):
            return True
        if not newlines and (value.startswith("\n") or value.endswith("\n")):
            return False
        return typed or not _reads_as_json(value)

    return VALUES.filter(fits)


def _tag_args(typed: bool = False, newlines: bool = False) -> st.SearchStrategy[Args]:
    return st.dictionaries(IDENTIFIERS, _tag_value(typed, newlines), max_size=4)


# --- writers ---------------------------------------------------------------------------------


def dump(value: Any, style: int) -> str:
    """JSON as models write it: compact, spaced, or indented and ASCII-escaped."""
    if style == 0:
        return orjson.dumps(value).decode()
    if style == 1:
        return json.dumps(value, ensure_ascii=False)
    return json.dumps(value, indent=2)


def raw(value: Any, style: int) -> str:
    """A parameter between tags: strings as they are, anything else as JSON."""
    return value if isinstance(value, str) else dump(value, style)


def call_object(call: Call, key: str, style: int) -> str:
    name, args = call
    # Some models write the arguments as a JSON string.
    value: Any = dump(args, style) if style == 2 else args
    return dump({"name": name, key: value}, style % 2)


def w_kimi_section(calls: list[Call], style: int) -> str:
    inner = "".join(
        f"<|tool_call_begin|>functions.{n}:{i}<|tool_call_argument_begin|>{dump(a, style)}"
        "<|tool_call_end|>"
        for i, (n, a) in enumerate(calls)
    )
    return f"<|tool_calls_section_begin|>{inner}<|tool_calls_section_end|>"


def w_kimi_calls(calls: list[Call], style: int) -> str:
    return "".join(
        f"<|tool_call_begin|>functions.{n}:{i} <|tool_call_argument_begin|>{dump(a, style)}"
        "<|tool_call_end|>"
        for i, (n, a) in enumerate(calls)
    )


def w_hermes(calls: list[Call], style: int) -> str:
    return "".join(
        f"<tool_call>\n{call_object(c, 'arguments', style)}\n</tool_call>" for c in calls
    )


def _qwen_function(call: Call, style: int) -> str:
    name, args = call
    params = "".join(f"<parameter={k}>\n{raw(v, style)}\n</parameter>\n" for k, v in args.items())
    return f"<function={name}>\n{params}</function>"


def w_qwen3_coder(calls: list[Call], style: int) -> str:
    return "".join(f"<tool_call>\n{_qwen_function(c, style)}\n</tool_call>" for c in calls)


def w_qwen3_coder_bare(calls: list[Call], style: int) -> str:
    return "".join(_qwen_function(c, style) for c in calls)


def w_functionary(calls: list[Call], style: int) -> str:
    return "".join(f"<function={n}>{dump(a, style)}</function>" for n, a in calls)


def w_functionary_wrapped(calls: list[Call], style: int) -> str:
    return "".join(
        f"<tool_call>\n<function={n}>{dump(a, style)}</function>\n</tool_call>" for n, a in calls
    )


def w_seed(calls: list[Call], style: int) -> str:
    def function(call: Call) -> str:
        name, args = call
        params = "".join(f"<parameter={k}>{raw(v, style)}</parameter>\n" for k, v in args.items())
        return f"<function={name}>\n{params}</function>"

    return "".join(f"<seed:tool_call>\n{function(c)}\n</seed:tool_call>" for c in calls)


def w_glm(calls: list[Call], style: int) -> str:
    def pairs(args: Args) -> str:
        return "".join(
            f"<arg_key>{k}</arg_key>\n<arg_value>{raw(v, style)}</arg_value>\n"
            for k, v in args.items()
        )

    return "".join(f"<tool_call>{n}\n{pairs(a)}</tool_call>" for n, a in calls)


_BAR, _SP = "\uff5c", "\u2581"
_DS_BEGIN, _DS_END = (
    f"<{_BAR}tool{_SP}calls{_SP}begin{_BAR}>",
    f"<{_BAR}tool{_SP}calls{_SP}end{_BAR}>",
)
_DS_CALL, _DS_SEP = f"<{_BAR}tool{_SP}call{_SP}begin{_BAR}>", f"<{_BAR}tool{_SP}sep{_BAR}>"
_DS_CALL_END = f"<{_BAR}tool{_SP}call{_SP}end{_BAR}>"


def w_deepseek_v3(calls: list[Call], style: int) -> str:
    inner = "\n".join(
        f"{_DS_CALL}function{_DS_SEP}{n}\n```json\n{dump(a, style)}\n```{_DS_CALL_END}"
        for n, a in calls
    )
    return f"{_DS_BEGIN}{inner}{_DS_END}"


def w_deepseek_v31(calls: list[Call], style: int) -> str:
    inner = "".join(f"{_DS_CALL}{n}{_DS_SEP}{dump(a, style)}{_DS_CALL_END}" for n, a in calls)
    return f"{_DS_BEGIN}{inner}{_DS_END}"


def _invokes(calls: list[Call], tag: str, typed: bool, style: int) -> str:
    out = []
    for name, args in calls:
        params = []
        for k, v in args.items():
            attr = f' string="{"true" if isinstance(v, str) else "false"}"' if typed else ""
            params.append(f'<{tag}parameter name="{k}"{attr}>{raw(v, style)}</{tag}parameter>\n')
        out.append(f'<{tag}invoke name="{name}">\n{"".join(params)}</{tag}invoke>\n')
    return "".join(out)


def w_minimax(calls: list[Call], style: int) -> str:
    return f"<minimax:tool_call>\n{_invokes(calls, '', False, style)}</minimax:tool_call>"


_DSML = "\uff5cDSML\uff5c"


def w_dsml(calls: list[Call], style: int) -> str:
    return f"<{_DSML}function_calls>\n{_invokes(calls, _DSML, True, style)}</{_DSML}function_calls>"


def w_dsml_json(calls: list[Call], style: int) -> str:
    """DeepSeek V3.2 may write an invoke's arguments as one JSON object."""
    inner = "".join(
        f'<{_DSML}invoke name="{n}">\n{dump(a, style)}\n</{_DSML}invoke>\n' for n, a in calls
    )
    return f"<{_DSML}function_calls>\n{inner}</{_DSML}function_calls>"


def w_llama(calls: list[Call], style: int) -> str:
    return "".join("<|python_tag|>" + call_object(c, "parameters", style) for c in calls)


def w_llama4(calls: list[Call], style: int) -> str:
    items = [call_object(c, "parameters", style) for c in calls]
    body = items[0] if len(items) == 1 else f"[{', '.join(items)}]"
    return f"<|python_start|>{body}<|python_end|>"


def w_llama4_pythonic(calls: list[Call], style: int) -> str:
    def call(c: Call) -> str:
        return f"{c[0]}({', '.join(f'{k}={v!r}' for k, v in c[1].items())})"

    return f"<|python_start|>[{', '.join(call(c) for c in calls)}]<|python_end|>"


def w_llama4_unended(calls: list[Call], style: int) -> str:
    """<|python_end|> is a stop token: servers may leave it out (the content ends the call)."""
    return w_llama4_pythonic(calls, style).removesuffix("<|python_end|>")


def w_mistral(calls: list[Call], style: int) -> str:
    return f"[TOOL_CALLS][{', '.join(call_object(c, 'arguments', style) for c in calls)}]"


def w_mistral_named(calls: list[Call], style: int) -> str:
    return "".join(f"[TOOL_CALLS]{n}[ARGS]{dump(a, style)}" for n, a in calls)


def w_lmstudio(calls: list[Call], style: int) -> str:
    return "".join(
        f"[TOOL_REQUEST]{call_object(c, 'arguments', style)}[END_TOOL_REQUEST]" for c in calls
    )


def w_harmony(calls: list[Call], style: int) -> str:
    return "<|start|>assistant".join(
        f"<|channel|>commentary to=functions.{n} <|constrain|>json<|message|>{dump(a, style)}"
        "<|call|>"
        for n, a in calls
    )


def w_harmony_start(calls: list[Call], style: int) -> str:
    return "".join(
        f"<|start|>assistant to=functions.{n}<|channel|>commentary json<|message|>"
        f"{dump(a, style)}<|call|>"
        for n, a in calls
    )


def w_harmony_unended(calls: list[Call], style: int) -> str:
    """<|call|> is a stop token too: the last call may end with the content."""
    return w_harmony(calls, style).removesuffix("<|call|>")


def w_json(calls: list[Call], style: int) -> str:
    items = [call_object(c, "parameters" if style else "arguments", style) for c in calls]
    return items[0] if len(items) == 1 else f"[{', '.join(items)}]"


def w_json_semicolons(calls: list[Call], style: int) -> str:
    """Llama 3's parallel calls: call objects separated by `;`."""
    return ("; " if style else ";").join(call_object(c, "parameters", style) for c in calls)


def w_mistral_v11(calls: list[Call], style: int) -> str:
    return "".join(f"[TOOL_CALLS]{n}{dump(a, style)}" for n, a in calls)


def w_mistral_call_id(calls: list[Call], style: int) -> str:
    return "".join(
        f"[TOOL_CALLS]{n}[CALL_ID]{i:09d}[ARGS]{dump(a, style)}" for i, (n, a) in enumerate(calls)
    )


def python_value(value: Any, style: int) -> str:
    """A value in Python's syntax; style 1 as JSON, which reads as Python with JSON's `true`,
    `false` and `null` (OLMo 3 writes those)."""
    return json.dumps(value) if style == 1 else repr(value)


def python_call(call: Call, style: int) -> str:
    name, args = call
    return f"{name}({', '.join(f'{k}={python_value(v, style)}' for k, v in args.items())})"


def w_pythonic(calls: list[Call], style: int) -> str:
    return f"[{', '.join(python_call(c, style) for c in calls)}]"


def w_lfm2(calls: list[Call], style: int) -> str:
    return f"<|tool_call_start|>{w_pythonic(calls, style)}<|tool_call_end|>"


def w_olmo3(calls: list[Call], style: int) -> str:
    return f"<function_calls>{chr(10).join(python_call(c, style) for c in calls)}</function_calls>"


def _call_list(calls: list[Call], style: int) -> str:
    return f"[{', '.join(call_object(c, 'arguments', style) for c in calls)}]"


def w_phi4_mini(calls: list[Call], style: int) -> str:
    return f"functools{_call_list(calls, style)}"


def w_xlam_fenced(calls: list[Call], style: int) -> str:
    return f"```{'json' if style != 1 else ''}\n{_call_list(calls, style)}\n```"


def w_xlam_tool_call(calls: list[Call], style: int) -> str:
    return f"<tool_call>{_call_list(calls, style)}</tool_call>"


XLAM_THINK = "<think>The user wants it.</think>"


def w_xlam_think(calls: list[Call], style: int) -> str:
    return f"{XLAM_THINK}\n{_call_list(calls, style)}"


def w_granite(calls: list[Call], style: int) -> str:
    return f"<|tool_call|>{_call_list(calls, style)}"


def w_internlm(calls: list[Call], style: int) -> str:
    return "".join(
        f"<|action_start|><|plugin|>\n{call_object(c, 'parameters', style)}<|action_end|>"
        for c in calls
    )


def w_jamba(calls: list[Call], style: int) -> str:
    return f"<tool_calls>{_call_list(calls, style)}</tool_calls>"


def w_minimax_m1(calls: list[Call], style: int) -> str:
    lines = "\n".join(call_object(c, "arguments", style % 2) for c in calls)
    return f"<tool_calls>\n{lines}\n</tool_calls>"


def w_nemotron(calls: list[Call], style: int) -> str:
    return f"<TOOLCALL>{_call_list(calls, style)}</TOOLCALL>"


def w_apertus(calls: list[Call], style: int) -> str:
    return f"<|tools_prefix|>{dump([{n: a} for n, a in calls], style)}<|tools_suffix|>"


def w_cohere(calls: list[Call], style: int) -> str:
    actions = [
        {"tool_call_id": str(i), "tool_name": n, "parameters": a} for i, (n, a) in enumerate(calls)
    ]
    return f"<|START_ACTION|>{dump(actions, style)}<|END_ACTION|>"


def gemma_value(value: Any) -> str:
    if isinstance(value, str):
        return f"<escape>{value}<escape>"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{gemma_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(gemma_value(v) for v in value) + "]"
    return orjson.dumps(value).decode()


def w_functiongemma(calls: list[Call], style: int) -> str:
    return "".join(
        f"<start_function_call>call:{n}{gemma_value(a)}<end_function_call>" for n, a in calls
    )


def w_longcat(calls: list[Call], style: int) -> str:
    return "".join(
        f"<longcat_tool_call>{call_object(c, 'arguments', style)}</longcat_tool_call>"
        for c in calls
    )


# FunctionGemma's keys are names at every depth.
GEMMA_VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(IDENTIFIERS, inner, max_size=3),
    max_leaves=8,
)
GEMMA_ARGS = st.dictionaries(IDENTIFIERS, GEMMA_VALUES, max_size=4)


@dataclass(frozen=True)
class Writer:
    format: str  # the name the scanner reports
    write: Callable[[list[Call], int], str]
    args: st.SearchStrategy[Args] = JSON_ARGS
    many: bool = True  # can write several calls
    whole: bool = False  # the text must be the whole message
    tail: bool = True  # text may follow it (False: it ends with the content)
    lead: str = ""  # the markup's start that stays text before the calls


WRITERS: dict[str, Writer] = {
    "kimi section": Writer("kimi", w_kimi_section),
    "kimi calls": Writer("kimi", w_kimi_calls),
    "hermes": Writer("hermes", w_hermes),
    "qwen3-coder": Writer("qwen3-coder", w_qwen3_coder, _tag_args(newlines=True)),
    "qwen3-coder bare": Writer("qwen3-coder", w_qwen3_coder_bare, _tag_args(newlines=True)),
    "functionary": Writer("functionary", w_functionary),
    "functionary in tool_call": Writer("functionary", w_functionary_wrapped),
    "seed-oss": Writer("seed-oss", w_seed, _tag_args()),
    "glm": Writer("glm", w_glm, _tag_args()),
    "deepseek v3": Writer("deepseek", w_deepseek_v3),
    "deepseek v3.1": Writer("deepseek", w_deepseek_v31),
    "deepseek-dsml": Writer("deepseek-dsml", w_dsml, _tag_args(typed=True)),
    "deepseek-dsml json": Writer("deepseek-dsml", w_dsml_json),
    "minimax": Writer("minimax", w_minimax, _tag_args()),
    "llama": Writer("llama", w_llama),
    "llama4": Writer("llama4", w_llama4),
    "llama4 pythonic": Writer("llama4", w_llama4_pythonic, PYTHON_ARGS),
    "llama4 pythonic unended": Writer("llama4", w_llama4_unended, PYTHON_ARGS, tail=False),
    "mistral": Writer("mistral", w_mistral),
    "mistral named": Writer("mistral", w_mistral_named),
    "lmstudio": Writer("lmstudio", w_lmstudio),
    "harmony": Writer("harmony", w_harmony),
    "harmony start": Writer("harmony", w_harmony_start),
    "harmony unended": Writer("harmony", w_harmony_unended, tail=False),
    "json": Writer("json", w_json, whole=True),
    "json semicolons": Writer("json", w_json_semicolons, whole=True),
    "mistral v11": Writer("mistral", w_mistral_v11),
    "mistral call id": Writer("mistral", w_mistral_call_id),
    "pythonic": Writer("pythonic", w_pythonic, PYTHON_ARGS, whole=True),
    "phi4-mini": Writer("phi4-mini", w_phi4_mini, whole=True),
    "xlam fenced": Writer("xlam", w_xlam_fenced, whole=True),
    "xlam tool_call": Writer("xlam", w_xlam_tool_call),
    "xlam after think": Writer("xlam", w_xlam_think, lead=XLAM_THINK),
    "granite": Writer("granite", w_granite),
    "internlm": Writer("internlm", w_internlm),
    "jamba": Writer("jamba", w_jamba),
    "minimax-m1": Writer("minimax-m1", w_minimax_m1),
    "nemotron": Writer("nemotron", w_nemotron),
    "lfm2": Writer("lfm2", w_lfm2, PYTHON_ARGS),
    "olmo3": Writer("olmo3", w_olmo3, PYTHON_ARGS),
    "apertus": Writer("apertus", w_apertus),
    "cohere": Writer("cohere", w_cohere),
    "functiongemma": Writer("functiongemma", w_functiongemma, GEMMA_ARGS),
    "longcat": Writer("longcat", w_longcat),
}
NAMES = sorted(WRITERS)


def test_every_format_of_the_table_has_a_writer() -> None:
    assert {f.name for f in FORMATS} | set(WHOLE_FORMATS) == {w.format for w in WRITERS.values()}


# --- reading ---------------------------------------------------------------------------------


def scan(text: str, offered: frozenset[str], cuts: list[int]) -> list[Any]:
    """Text and calls (as name, canonical arguments), adjacent text joined."""
    scanner = TextCallScanner(offered)
    out: list[Any] = []
    previous = 0
    for cut in [*sorted(set(cuts)), len(text)]:
        out += scanner.feed(text[previous:cut])
        previous = cut
    out += scanner.end()
    joined: list[Any] = []
    for segment in out:
        if isinstance(segment, RecoveredCall):
            joined.append(
                (segment.format, segment.name, canonical(orjson.loads(segment.arguments)))
            )
        elif joined and isinstance(joined[-1], str):
            joined[-1] += segment
        elif segment:
            joined.append(segment)
    return joined


def canonical(value: Any) -> str:
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()


@st.composite
def written(draw: st.DrawFn, name: str) -> tuple[Writer, list[Call], str]:
    writer = WRITERS[name]
    count = draw(st.integers(1, 3)) if writer.many else 1
    names = draw(st.lists(IDENTIFIERS, min_size=count, max_size=count))
    calls = [(n, draw(writer.args)) for n in names]
    return writer, calls, writer.write(calls, draw(st.integers(0, 2)))


PROSE_BEFORE, PROSE_AFTER = "Let me check. ", "\nDone."

ROUND_TRIP = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.filter_too_much]
)


def expected(writer: Writer, calls: list[Call]) -> list[Any]:
    read = [(writer.format, n, canonical(a)) for n, a in calls]
    if writer.whole:
        return read
    before = PROSE_BEFORE + writer.lead
    return [before, *read, PROSE_AFTER] if writer.tail else [before, *read]


def framed(writer: Writer, markup: str) -> str:
    if writer.whole:
        return markup
    return PROSE_BEFORE + markup + (PROSE_AFTER if writer.tail else "")


@pytest.mark.parametrize("name", NAMES)
@ROUND_TRIP
@given(data=st.data())
def test_written_calls_are_read_back_exactly(name: str, data: st.DataObject) -> None:
    writer, calls, markup = data.draw(written(name))
    text = framed(writer, markup)
    offered = frozenset(n for n, _ in calls)
    want = expected(writer, calls)
    assert scan(text, offered, []) == want, text
    assert scan(text, offered, list(range(1, len(text)))) == want, text
    cuts = data.draw(st.lists(st.integers(1, max(1, len(text) - 1)), max_size=8))
    assert scan(text, offered, cuts) == want, (text, cuts)


@pytest.mark.parametrize("name", NAMES)
@ROUND_TRIP
@given(data=st.data())
def test_markup_cut_short_is_never_another_call(name: str, data: st.DataObject) -> None:
    """Markup cut anywhere: never a call it does not contain whole; no call: byte for byte."""
    writer, calls, markup = data.draw(written(name))
    cut = data.draw(st.integers(1, len(markup) - 1))
    text = PROSE_BEFORE + markup[:cut] if not writer.whole else markup[:cut]
    offered = frozenset(n for n, _ in calls)
    whole_calls = [(writer.format, n, canonical(a)) for n, a in calls]
    for cuts in ([], list(range(1, len(text)))):
        got = scan(text, offered, cuts)
        read = [s for s in got if not isinstance(s, str)]
        # A block cut short may hold complete calls of another start marker (a Kimi call in its
        # section, a <function=...> in its <tool_call>): those are read, exactly.
        assert all(call[1:] in [c[1:] for c in whole_calls] for call in read), (text, got)
        if not read:
            assert got == [text], text


@pytest.mark.parametrize("name", NAMES)
@ROUND_TRIP
@given(data=st.data())
def test_calls_of_tools_not_offered_stay_text(name: str, data: st.DataObject) -> None:
    writer, calls, markup = data.draw(written(name))
    text = framed(writer, markup)
    offered = frozenset({"some_other_tool"} - {n for n, _ in calls})
    assert scan(text, offered, []) == [text]
    assert scan(text, offered, list(range(1, len(text)))) == [text]


_PROSE_WORDS = st.lists(
    st.sampled_from([*"abc xyz.,:;!?\n", "tag", " the ", "<b>", "[1]", "é"]), max_size=12
).map("".join)


@settings(max_examples=200, deadline=None)
@given(
    marker=st.sampled_from(sorted(MARKERS)),
    before=_PROSE_WORDS,
    after=_PROSE_WORDS.filter(lambda s: s[:1].isalpha() or s[:1] == " "),
)
def test_prose_mentioning_a_marker_passes_byte_for_byte(
    marker: str, before: str, after: str
) -> None:
    text = f"{before}{marker} {after}"
    offered = frozenset({"read_file", "tag"})
    for cuts in ([], list(range(1, len(text)))):
        assert scan(text, offered, cuts) == [text]
