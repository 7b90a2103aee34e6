"""Parsers for the formats that write a call as tags (each gets the text between its markers).

Every parser returns the calls it read or raises NotACall; which tools were offered is the
scanner's concern, not theirs.
"""

from __future__ import annotations

import re

from proxy.core.textcalls.model import NotACall, Parsed, json_arguments, json_value, tag_value

# --- Kimi K2: <|tool_calls_section_begin|> <|tool_call_begin|>functions.x:0
#     <|tool_call_argument_begin|>{...}<|tool_call_end|> ... <|tool_calls_section_end|>

KIMI_CALL_BEGIN = "<|tool_call_begin|>"
KIMI_CALL_END = "<|tool_call_end|>"
KIMI_ARGUMENT_BEGIN = "<|tool_call_argument_begin|>"
_KIMI_CALL = re.compile(
    re.escape(KIMI_CALL_BEGIN)
    + r"\s*(.+?)\s*"
    + re.escape(KIMI_ARGUMENT_BEGIN)
    + "(.*?)"
    + re.escape(KIMI_CALL_END),
    re.S,
)


def _kimi_call(call_id: str, args: str) -> Parsed:
    name = call_id.split(".", 1)[1] if call_id.startswith("functions.") else call_id
    return (name.rsplit(":", 1)[0], json_arguments(args), call_id)


def parse_kimi_section(body: str) -> list[Parsed]:
    return [_kimi_call(m.group(1), m.group(2)) for m in _KIMI_CALL.finditer(body)]


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
    re.escape(DS_CALL_BEGIN)
    + "(.*?)"
    + re.escape("<\uff5ctool\u2581sep\uff5c>")
    + "(.*?)"
    + re.escape("<\uff5ctool\u2581call\u2581end\uff5c>"),
    re.S,
)
_DS_FENCED = re.compile(r"\s*([^\n]+)\n```(?:json)?\s*(.*?)\s*```\s*", re.S)


def parse_deepseek(body: str) -> list[Parsed]:
    calls: list[Parsed] = []
    for match in _DS_CALL.finditer(body):
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


# --- Qwen3-coder: <function=name><parameter=p>v</parameter></function>

_QWEN_FUNCTION = re.compile(r"\s*<function=([^>\s]+)>(.*)</function>\s*", re.S)
_QWEN_PARAMETER = re.compile(r"<parameter=([^>\s]+)>(.*?)</parameter>", re.S)


def parse_qwen_coder(body: str) -> list[Parsed]:
    """The inside of `<tool_call>...</tool_call>`: one `<function=...>...</function>`."""
    match = _QWEN_FUNCTION.fullmatch(body)
    if match is None:
        raise NotACall("not a <function=...> block")
    params = {p.group(1): tag_value(p.group(2)) for p in _QWEN_PARAMETER.finditer(match.group(2))}
    return [(match.group(1), params, None)]


def parse_qwen_coder_bare(body: str) -> list[Parsed]:
    """`<function=` was the start marker and `</function>` its end: put them back."""
    return parse_qwen_coder(f"<function={body}</function>")


# --- GLM-4.5 to 4.7: <tool_call>name<arg_key>k</arg_key><arg_value>v</arg_value></tool_call>

_GLM_CALL = re.compile(r"\s*([\w.\-]+)\s*((?:<arg_key>.*)?)", re.S)
_GLM_PAIR = re.compile(r"\s*<arg_key>(.*?)</arg_key>\s*<arg_value>(.*?)</arg_value>", re.S)
_ONLY_SPACE = re.compile(r"\s*\Z")


def parse_glm(body: str) -> list[Parsed]:
    match = _GLM_CALL.fullmatch(body)
    if match is None:
        raise NotACall("not a GLM call")
    params: dict[str, object] = {}
    pairs, at = match.group(2), 0
    while not _ONLY_SPACE.match(pairs, at):
        pair = _GLM_PAIR.match(pairs, at)
        if pair is None:
            raise NotACall("GLM arguments are not <arg_key>/<arg_value> pairs")
        params[pair.group(1).strip()] = tag_value(pair.group(2))
        at = pair.end()
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
        calls: list[Parsed] = []
        at = 0
        while not _ONLY_SPACE.match(body, at):
            invoke = self._invoke.match(body, at)
            if invoke is None:
                raise NotACall("not an <invoke> block")
            calls.append((invoke.group(1), self._arguments(invoke.group(2)), None))
            at = invoke.end()
        return calls

    def _arguments(self, inner: str) -> object:
        if inner.strip().startswith("{"):  # DeepSeek V3.2 may write the arguments as JSON
            value = json_value(inner.strip())
            if not isinstance(value, dict):
                raise NotACall("invoke arguments are not an object")
            return value
        params: dict[str, object] = {}
        at = 0
        while not _ONLY_SPACE.match(inner, at):
            param = self._param.match(inner, at)
            if param is None:
                raise NotACall("invoke arguments are not <parameter> tags")
            name, is_string, raw = param.groups()
            params[name] = raw.strip("\n") if is_string == "true" else tag_value(raw)
            at = param.end()
        return params
