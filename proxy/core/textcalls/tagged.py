"""Parsers for the formats that write a call as tags (each gets the text between its markers).

Every parser returns the calls it read or raises NotACall; which tools were offered is the
scanner's concern, not theirs. A parser reads its body whole or not at all: text it does not
understand (between calls, between parameters, a JSON object where parameters go) makes the
body NotACall, never a call with that text left out. Only whitespace is skipped. A call with
nothing at all where its arguments go has no arguments (`{}`): that is what the model wrote.
"""

from __future__ import annotations

import re

from proxy.core.textcalls.model import NotACall, Parsed, json_arguments, json_value, tag_value

_ONLY_SPACE = re.compile(r"\s*\Z")


def _each(pattern: re.Pattern[str], text: str, what: str) -> list[re.Match[str]]:
    """The matches of `pattern` (which skips the whitespace before it) one right after another
    over all of `text`, with nothing but whitespace left over; anything else is NotACall."""
    found: list[re.Match[str]] = []
    at = 0
    while not _ONLY_SPACE.match(text, at):
        match = pattern.match(text, at)
        if match is None:
            raise NotACall(f"{what}: text the format does not have")
        found.append(match)
        at = match.end()
    return found


def _parameters(pairs: list[tuple[str, object]]) -> dict[str, object]:
    """Parameters by name; a name given twice is not one set of arguments."""
    params = dict(pairs)
    if len(params) != len(pairs):
        raise NotACall("a parameter given twice")
    return params


# --- Kimi K2: <|tool_calls_section_begin|> <|tool_call_begin|>functions.x:0
#     <|tool_call_argument_begin|>{...}<|tool_call_end|> ... <|tool_calls_section_end|>

KIMI_CALL_BEGIN = "<|tool_call_begin|>"
KIMI_CALL_END = "<|tool_call_end|>"
KIMI_ARGUMENT_BEGIN = "<|tool_call_argument_begin|>"
_KIMI_CALL = re.compile(
    r"\s*"
    + re.escape(KIMI_CALL_BEGIN)
    + r"\s*(.+?)\s*"
    + re.escape(KIMI_ARGUMENT_BEGIN)
    + "(.*?)"
    + re.escape(KIMI_CALL_END),
    re.S,
)


_KIMI_ID = re.compile(r"[\w.:\-]+")


def _kimi_call(call_id: str, args: str) -> Parsed:
    if _KIMI_ID.fullmatch(call_id) is None:
        raise NotACall("not a Kimi call id")
    name = call_id.split(".", 1)[1] if call_id.startswith("functions.") else call_id
    return (name.rsplit(":", 1)[0], json_arguments(args), call_id)


def parse_kimi_section(body: str) -> list[Parsed]:
    return [_kimi_call(m.group(1), m.group(2)) for m in _each(_KIMI_CALL, body, "Kimi section")]


def parse_kimi_call(body: str) -> list[Parsed]:
    call_id, sep, args = body.partition(KIMI_ARGUMENT_BEGIN)
    if not sep or not call_id.strip():
        raise NotACall("no Kimi call id")
    return [_kimi_call(call_id.strip(), args)]


# --- DeepSeek V3 and V3.1: FULLWIDTH VERTICAL LINE (U+FF5C), LOWER ONE EIGHTH BLOCK (U+2581)

DS_CALLS_BEGIN = "<\uff5ctool\u2581calls\u2581begin\uff5c>"
DS_CALLS_END = "<\uff5ctool\u2581calls\u2581end\uff5c>"
DS_CALL_BEGIN = "<\uff5ctool\u2581call\u2581begin\uff5c>"
_DS_CALL = re.compile(
    r"\s*"
    + re.escape(DS_CALL_BEGIN)
    + "(.*?)"
    + re.escape("<\uff5ctool\u2581sep\uff5c>")
    + "(.*?)"
    + re.escape("<\uff5ctool\u2581call\u2581end\uff5c>"),
    re.S,
)
_DS_FENCED = re.compile(r"\s*([^\n]+)\n```(?:json)?\s*(.*?)\s*```\s*", re.S)


def parse_deepseek(body: str) -> list[Parsed]:
    calls: list[Parsed] = []
    for match in _each(_DS_CALL, body, "DeepSeek calls"):
        head, rest = match.group(1).strip(), match.group(2)
        if head == "function":  # V3: the name on the first line, the JSON in a fenced block
            fenced = _DS_FENCED.fullmatch(rest)
            if fenced is None:
                raise NotACall("DeepSeek V3 call without its fenced JSON")
            name, args = fenced.group(1).strip(), fenced.group(2)
        else:  # V3.1: name, separator, JSON
            name, args = head, rest
        calls.append((name, json_arguments(args), None))
    return calls


# --- Qwen3-coder: <function=name><parameter=p>v</parameter></function>, inside <tool_call> or
#     bare; Seed-OSS: the same inside <seed:tool_call>; Functionary v3.1 and Llama 3.1's custom
#     format: <function=name>{"p": v}</function>, a JSON object where the parameters go.

_FUNCTION = r"\s*<function=([^>\s]+)>"
_ONE_FUNCTION = re.compile(_FUNCTION + r"(.*)</function>\s*", re.S)  # the whole body
_FUNCTIONS = re.compile(_FUNCTION + r"(.*?)</function>", re.S)  # one after another
_QWEN_PARAMETER = re.compile(r"\s*<parameter=([^>\s]+)>(.*?)</parameter>", re.S)


def _function(body: str) -> re.Match[str]:
    match = _ONE_FUNCTION.fullmatch(body)
    if match is None:
        raise NotACall("not a <function=...> block")
    return match


def _parameter_call(function: re.Match[str]) -> Parsed:
    """Parameters and whitespace, nothing else: nothing at all is a call without arguments."""
    pairs = _each(_QWEN_PARAMETER, function.group(2), "<function=...> parameters")
    params = _parameters([(p.group(1), tag_value(p.group(2))) for p in pairs])
    return (function.group(1), params, None)


def parse_qwen_coder(body: str) -> list[Parsed]:
    """The inside of `<tool_call>...</tool_call>`: one `<function=...>...</function>`."""
    return [_parameter_call(_function(body))]


def parse_qwen_coder_bare(body: str) -> list[Parsed]:
    """`<function=` was the start marker and `</function>` its end: put them back."""
    return parse_qwen_coder(f"<function={body}</function>")


def parse_seed(body: str) -> list[Parsed]:
    """The inside of `<seed:tool_call>...</seed:tool_call>`: `<function=...>` blocks."""
    return [_parameter_call(f) for f in _each(_FUNCTIONS, body, "Seed-OSS functions")]


def parse_function_json(body: str) -> list[Parsed]:
    """The inside of `<tool_call>...</tool_call>`: one `<function=...>{...}</function>`. The
    body is the arguments only if it is one JSON object, whole (an empty body is the
    parameter reader's: it is tried first)."""
    function = _function(body)
    if not function.group(2).strip():
        raise NotACall("no JSON arguments")
    return [(function.group(1), json_arguments(function.group(2)), None)]


def parse_function_json_bare(body: str) -> list[Parsed]:
    return parse_function_json(f"<function={body}</function>")


# --- GLM-4.5 to 4.7: <tool_call>name<arg_key>k</arg_key><arg_value>v</arg_value></tool_call>

_GLM_CALL = re.compile(r"\s*([\w.\-]+)\s*((?:<arg_key>.*)?)", re.S)
_GLM_PAIR = re.compile(r"\s*<arg_key>(.*?)</arg_key>\s*<arg_value>(.*?)</arg_value>", re.S)


def parse_glm(body: str) -> list[Parsed]:
    match = _GLM_CALL.fullmatch(body)
    if match is None:
        raise NotACall("not a GLM call")
    pairs = _each(_GLM_PAIR, match.group(2), "GLM <arg_key>/<arg_value> pairs")
    params = _parameters([(p.group(1).strip(), tag_value(p.group(2))) for p in pairs])
    return [(match.group(1), params, None)]


# --- <invoke name="..."><parameter name="p">v</parameter></invoke>: MiniMax-M2 plainly,
#     DeepSeek V3.2 with every tag prefixed by DSML between two U+FF5C (FULLWIDTH VERTICAL
#     LINE) and a `string="true|false"` attribute.

DSML = "\uff5cDSML\uff5c"


class InvokeParser:
    """Invoke blocks whose tags carry `prefix` (empty for MiniMax, DSML for DeepSeek V3.2)."""

    def __init__(self, prefix: str) -> None:
        p = re.escape(prefix)
        self._invoke = re.compile(rf'\s*<{p}invoke\s+name="([^"]+)"\s*>(.*?)</{p}invoke>', re.S)
        self._param = re.compile(
            rf'\s*<{p}parameter\s+name="([^"]+)"(?:\s+string="(true|false)")?\s*>(.*?)'
            rf"</{p}parameter>",
            re.S,
        )

    def __call__(self, body: str) -> list[Parsed]:
        return [
            (invoke.group(1), self._arguments(invoke.group(2)), None)
            for invoke in _each(self._invoke, body, "<invoke> blocks")
        ]

    def _arguments(self, inner: str) -> object:
        if inner.strip().startswith("{"):  # DeepSeek V3.2 may write the arguments as JSON
            value = json_value(inner.strip())
            if not isinstance(value, dict):
                raise NotACall("invoke arguments are not an object")
            return value
        pairs = []
        for param in _each(self._param, inner, "<invoke> parameters"):
            name, is_string, raw = param.groups()
            pairs.append((name, raw.strip("\n") if is_string == "true" else tag_value(raw)))
        return _parameters(pairs)


# --- FunctionGemma: <start_function_call>call:name{key:<escape>text<escape>,n:3}
#     <end_function_call>: strings between <escape> tokens, other values as JSON scalars,
#     objects in braces and lists in brackets of the same syntax.

ESCAPE = "<escape>"
_GEMMA_CALL = re.compile(r"\s*call:([\w.\-]+)(?=\{)")
_GEMMA_KEY = re.compile(r"\s*([\w.\-]+)\s*:\s*")
_GEMMA_SCALAR = re.compile(r"\s*([^,{}\[\]<\s]+)\s*")


def parse_functiongemma(body: str) -> list[Parsed]:
    head = _GEMMA_CALL.match(body)
    if head is None:
        raise NotACall("not a FunctionGemma call")
    args, end = _GemmaReader(body).mapping(head.end())
    if not _ONLY_SPACE.match(body, end):
        raise NotACall("text after a FunctionGemma call")
    return [(head.group(1), args, None)]


class _GemmaReader:
    """Reads the value syntax over `text`; each method returns the value and where it ends."""

    def __init__(self, text: str) -> None:
        self.text = text

    def mapping(self, pos: int) -> tuple[dict[str, object], int]:
        pos = self._expect("{", pos)
        out: dict[str, object] = {}
        if self._next_is("}", pos):
            return out, self._expect("}", pos)
        while True:
            key = _GEMMA_KEY.match(self.text, pos)
            if key is None or key.group(1) in out:
                raise NotACall("not a FunctionGemma key")
            out[key.group(1)], pos = self.value(key.end())
            if self._next_is("}", pos):
                return out, self._expect("}", pos)
            pos = self._expect(",", pos)

    def array(self, pos: int) -> tuple[list[object], int]:
        pos = self._expect("[", pos)
        out: list[object] = []
        if self._next_is("]", pos):
            return out, self._expect("]", pos)
        while True:
            item, pos = self.value(pos)
            out.append(item)
            if self._next_is("]", pos):
                return out, self._expect("]", pos)
            pos = self._expect(",", pos)

    def value(self, pos: int) -> tuple[object, int]:
        pos = _skip(self.text, pos)
        if self.text.startswith(ESCAPE, pos):
            end = self.text.find(ESCAPE, pos + len(ESCAPE))
            if end == -1:
                raise NotACall("an <escape> string that does not end")
            return self.text[pos + len(ESCAPE) : end], end + len(ESCAPE)
        if self._next_is("{", pos):
            return self.mapping(pos)
        if self._next_is("[", pos):
            return self.array(pos)
        scalar = _GEMMA_SCALAR.match(self.text, pos)
        if scalar is None:
            raise NotACall("no FunctionGemma value")
        value = json_value(scalar.group(1))
        if isinstance(value, (dict, list, str)):
            raise NotACall("strings are written between <escape> tokens")
        return value, scalar.end()

    def _next_is(self, char: str, pos: int) -> bool:
        return self.text.startswith(char, _skip(self.text, pos))

    def _expect(self, char: str, pos: int) -> int:
        pos = _skip(self.text, pos)
        if not self.text.startswith(char, pos):
            raise NotACall(f"FunctionGemma syntax: {char!r} expected")
        return pos + 1


def _skip(text: str, pos: int) -> int:
    match = _ONLY_SPACE_PREFIX.match(text, pos)
    return match.end() if match else pos


_ONLY_SPACE_PREFIX = re.compile(r"\s*")
