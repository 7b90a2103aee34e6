"""Parsers for the formats whose call is JSON (or Python call syntax) after a marker.

Each gets the text between its markers and returns the calls it read or raises NotACall.
"""

from __future__ import annotations

import ast
import re

import orjson

from proxy.core.textcalls.model import NotACall, Parsed, json_arguments, json_calls


def parse_json_calls(body: str) -> list[Parsed]:
    """Hermes/Qwen `<tool_call>{...}</tool_call>`, Llama 3 `<|python_tag|>{...}`, LM Studio."""
    return json_calls(body.strip())


# --- Mistral: `[TOOL_CALLS][{...}, ...]` or `[TOOL_CALLS]name[ARGS]{...}`

MISTRAL_LEAD = re.compile(r"\s*(?:([\w.\-]+)\[ARGS\]\s*)?")


def parse_mistral(body: str) -> list[Parsed]:
    lead = MISTRAL_LEAD.match(body)
    assert lead is not None  # the pattern matches the empty string
    if lead.group(1):
        return [(lead.group(1), json_arguments(body[lead.end() :]), None)]
    return json_calls(body.strip())


# --- Llama 4: `<|python_start|>` JSON or `[f(a=1), g(b="x")]` `<|python_end|>`


def parse_llama4(body: str) -> list[Parsed]:
    try:
        return json_calls(body.strip())
    except NotACall:
        return parse_pythonic(body)


def parse_pythonic(text: str) -> list[Parsed]:
    """`[get_weather(city="Paris", days=3), ...]`: keyword arguments of literal values only.

    Read with `ast` and `ast.literal_eval`, which evaluate nothing but literals.
    """
    try:
        node = ast.parse(text.strip(), mode="eval").body
        calls = node.elts if isinstance(node, ast.List) else [node]
        parsed: list[Parsed] = []
        for call in calls:
            if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)) or call.args:
                raise NotACall("not a list of keyword-argument calls")
            args = {}
            for keyword in call.keywords:
                if keyword.arg is None:
                    raise NotACall("** arguments")
                args[keyword.arg] = ast.literal_eval(keyword.value)
            orjson.dumps(args)  # sets, bytes, complex numbers have no JSON form
            parsed.append((call.func.id, args, None))
        return parsed
    except (SyntaxError, ValueError, TypeError, RecursionError, MemoryError) as exc:
        raise NotACall(f"not Python call syntax: {type(exc).__name__}") from exc


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
