"""Parsers for the formats whose call is JSON (or Python call syntax) after a marker.

Each gets the text between its markers and returns the calls it read or raises NotACall.
"""

from __future__ import annotations

import ast
import math
import re

import orjson

from proxy.core.textcalls.extent import JsonExtent
from proxy.core.textcalls.model import (
    NotACall,
    Parsed,
    json_arguments,
    json_calls,
    json_list,
    json_value,
    name_args_object,
)


def parse_json_calls(body: str) -> list[Parsed]:
    """Hermes/Qwen `<tool_call>{...}</tool_call>`, Llama 3 `<|python_tag|>{...}`, LM Studio."""
    return json_calls(body.strip())


# --- Mistral: `[TOOL_CALLS][{...}, ...]` (before v11), `[TOOL_CALLS]name{...}` (v11),
#     `[TOOL_CALLS]name[ARGS]{...}` and `[TOOL_CALLS]name[CALL_ID]id[ARGS]{...}` (Small 3.2)

MISTRAL_LEAD = re.compile(r"\s*(?:([\w.\-]+)\s*(?:\[CALL_ID\]\s*([\w.:\-]+)\s*)?(?:\[ARGS\]\s*)?)?")


def parse_mistral(body: str) -> list[Parsed]:
    lead = MISTRAL_LEAD.match(body)
    assert lead is not None  # the pattern matches the empty string
    if lead.group(1):
        args = body[lead.end() :]
        if not args.startswith("{"):
            raise NotACall("Mistral call without its JSON object")
        return [(lead.group(1), json_arguments(args), lead.group(2))]
    return json_calls(body.strip())


# --- a JSON array of call objects: xLAM `<tool_call>[...]</tool_call>`, Granite
#     `<|tool_call|>[...]`, Jamba, Hunyuan and Apriel `<tool_calls>[...]</tool_calls>`, Nemotron
#     `<TOOLCALL>[...]</TOOLCALL>`


def parse_json_list(body: str) -> list[Parsed]:
    return [name_args_object(item) for item in json_list(body)]


def json_sequence(text: str, separator: str) -> list[object]:
    """JSON values one after another, `separator` between two (or only whitespace, for "");
    each value an object or an array."""
    values: list[object] = []
    pos = _skip_space(text, 0)
    while True:
        if pos == len(text) or text[pos] not in "{[":
            raise NotACall("not a JSON value where one goes")
        end = JsonExtent().feed(text, pos)
        if end is None:
            raise NotACall("a JSON value that does not end")
        values.append(json_value(text[pos:end]))
        pos = _skip_space(text, end)
        if pos == len(text):
            return values
        if separator:
            if not text.startswith(separator, pos):
                raise NotACall("text between JSON values")
            pos = _skip_space(text, pos + len(separator))


_SPACE = re.compile(r"\s*")


def _skip_space(text: str, pos: int) -> int:
    match = _SPACE.match(text, pos)
    return match.end() if match else pos


def parse_json_lines(body: str) -> list[Parsed]:
    """MiniMax-M1 `<tool_calls>`: call objects one after another (one a line)."""
    return [name_args_object(value) for value in json_sequence(body, "")]


def parse_semicolon_calls(text: str) -> list[Parsed]:
    """Llama 3's JSON tool calls, several separated by `;` (one call object each)."""
    return [name_args_object(value) for value in json_sequence(text, ";")]


# --- Apertus: `<|tools_prefix|>[{"name": {arguments}}, ...]<|tools_suffix|>`


def parse_apertus(body: str) -> list[Parsed]:
    calls: list[Parsed] = []
    for item in json_list(body):
        if not isinstance(item, dict) or len(item) != 1:
            raise NotACall("an Apertus call is an object with one key, the name")
        [(name, args)] = item.items()
        if not isinstance(args, dict):
            raise NotACall("arguments are not a JSON object")
        calls.append((name, args, None))
    return calls


# --- Cohere Command R7B and A: `<|START_ACTION|>[{"tool_call_id": "0", "tool_name": "f",
#     "parameters": {...}}]<|END_ACTION|>`

_COHERE_KEYS = frozenset({"tool_call_id", "tool_name", "parameters"})


def parse_cohere(body: str) -> list[Parsed]:
    calls: list[Parsed] = []
    for item in json_list(body):
        if not isinstance(item, dict) or not isinstance(item.get("tool_name"), str):
            raise NotACall("not a Cohere action")
        if not _COHERE_KEYS.issuperset(item):
            raise NotACall("unexpected keys in a Cohere action")
        args = item.get("parameters", {})
        if not isinstance(args, dict):
            raise NotACall("parameters are not a JSON object")
        calls.append((item["tool_name"], args, None))
    return calls


# --- Python call syntax: Llama 4 `<|python_start|>[f(a=1), g(b="x")]<|python_end|>`, LFM2
#     `<|tool_call_start|>[...]<|tool_call_end|>`, a whole message that is such a list, OLMo 3
#     `<function_calls>` with one call a line.


def parse_llama4(body: str) -> list[Parsed]:
    """JSON (one call object or an array of them), or a pythonic call list."""
    try:
        return json_calls(body.strip())
    except NotACall:
        return parse_pythonic(body)


def parse_pythonic(text: str) -> list[Parsed]:
    """`[get_weather(city="Paris", days=3), ...]` (or one call without the brackets): keyword
    arguments of literal values only, read from Python's syntax tree; nothing is evaluated."""
    try:
        node = ast.parse(text.strip(), mode="eval").body
        calls = node.elts if isinstance(node, ast.List) else [node]
        return _pythonic_calls(calls)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        raise NotACall(f"not Python call syntax: {type(exc).__name__}") from exc


def parse_pythonic_lines(text: str) -> list[Parsed]:
    """OLMo 3: calls one a line, without a list around them."""
    try:
        statements = ast.parse(text.strip(), mode="exec").body
        if not all(isinstance(s, ast.Expr) for s in statements):
            raise NotACall("not only calls")
        return _pythonic_calls([s.value for s in statements if isinstance(s, ast.Expr)])
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        raise NotACall(f"not Python call syntax: {type(exc).__name__}") from exc


def _pythonic_calls(nodes: list[ast.expr]) -> list[Parsed]:
    if not nodes:
        raise NotACall("no calls")
    parsed: list[Parsed] = []
    for call in nodes:
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)) or call.args:
            raise NotACall("not a list of keyword-argument calls")
        args: dict[str, object] = {}
        for keyword in call.keywords:
            if keyword.arg is None:
                raise NotACall("** arguments")
            args[keyword.arg] = _literal(keyword.value)
        try:
            orjson.dumps(args)  # integers past 64 bits have no JSON form here
        except orjson.JSONEncodeError as exc:
            raise NotACall("a value without a JSON form") from exc
        parsed.append((call.func.id, args, None))
    return parsed


# JSON's spellings, which models trained on JSON schemas write in Python calls (OLMo 3).
_JSON_NAMES: dict[str, object] = {"true": True, "false": False, "null": None}


def _literal(node: ast.expr) -> object:
    """A JSON value written in Python: strings, numbers, booleans, None, lists (and tuples),
    dicts with string keys. Anything else (names, operations, sets, bytes) is NotACall."""
    if isinstance(node, ast.Constant):
        return _constant(node.value)
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_literal(item) for item in node.elts]
    if isinstance(node, ast.Dict):
        return _dict(node)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _literal(node.operand)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise NotACall("a sign before something other than a number")
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.Name) and node.id in _JSON_NAMES:
        return _JSON_NAMES[node.id]
    raise NotACall("not a literal value")


def _constant(value: object) -> object:
    if isinstance(value, float) and not math.isfinite(value):
        raise NotACall("a number JSON cannot write")
    if isinstance(value, str):
        return _paired(value)
    if value is None or isinstance(value, (bool, int, float)):
        return value
    raise NotACall("bytes, complex numbers and ellipses are not JSON")


def _paired(text: str) -> str:
    """A string written with JSON's escapes (`"\\ud83d\\ude00"`) holds a surrogate pair where
    JSON reads one character: read it as JSON does. A lone surrogate has no JSON form."""
    try:
        text.encode()
    except UnicodeEncodeError:
        try:
            return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le")
        except UnicodeDecodeError as exc:
            raise NotACall("a lone surrogate") from exc
    return text


def _dict(node: ast.Dict) -> dict[str, object]:
    out: dict[str, object] = {}
    for key, value in zip(node.keys, node.values, strict=True):
        if not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
            raise NotACall("a dict key that is not a string")
        name = _paired(key.value)
        if name in out:
            raise NotACall("a key given twice")
        out[name] = _literal(value)
    return out


# --- gpt-oss (harmony) with the server's parser off:
#     <|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{...}<|call|>
#     <|start|>assistant to=functions.NAME<|channel|>commentary json<|message|>{...}<|call|>

HARMONY_MESSAGE = "<|message|>"
_HARMONY_HEADER = re.compile(
    r"\s*(?:assistant)?\s*(?:to=functions\.(?P<before>[\w.\-]+)\s*)?"
    r"(?:<\|channel\|>)?\s*(?:commentary|analysis)"
    r"\s*(?:to=functions\.(?P<after>[\w.\-]+)\s*)?(?:<\|constrain\|>\s*)?(?:json\s*)?"
)


def parse_harmony(body: str) -> list[Parsed]:
    """The text after `<|channel|>` (or `<|start|>`) up to `<|call|>`."""
    header, sep, payload = body.partition(HARMONY_MESSAGE)
    match = _HARMONY_HEADER.fullmatch(header)
    if not sep or match is None or bool(match["before"]) == bool(match["after"]):
        raise NotACall("not a harmony function call")
    if not payload.strip():  # the content may have ended where its JSON should begin
        raise NotACall("a harmony call without its JSON")
    return [(match["before"] or match["after"], json_arguments(payload), None)]
