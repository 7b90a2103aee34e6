"""Strict providers (SPEC §11 provider families): what each family's API refuses, in its words.

A simulated model's `provider` option (`reference+provider=moonshot`) makes the simulated
upstream refuse what that provider refuses, with the provider's own error text and status, so
that every family rule of the proxy is proven against a refusal (docs/contract.md §11 gives
the public source of each text):

- `deepseek`: a `developer` message (422, the deserializer's words); in a request that offers
  tools, a tool-call turn without a non-empty `reasoning_content` (400).
- `moonshot`: in a request that offers tools, a tool-call turn without `reasoning_content`
  (400, with the message's index); a tool schema outside Moonshot's JSON Schema flavor (400).
- `zhipu`: a tool-call turn whose content is the empty string (1214); an empty `tool` result
  (1213).
- `minimax`: a tool-call turn or a `tool` result with empty content, a tool without
  parameters (2013).
- `ollama`: a message whose content is `null`.
- `gemini`: a tool schema keyword Gemini's function declarations do not know.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from enum import Enum
from typing import Any

JSON = dict[str, Any]
Refusal = tuple[int, JSON]


class Provider(Enum):
    NONE = "none"
    DEEPSEEK = "deepseek"
    MOONSHOT = "moonshot"
    ZHIPU = "zhipu"
    MINIMAX = "minimax"
    OLLAMA = "ollama"
    GEMINI = "gemini"


DEEPSEEK_REASONING = "The `reasoning_content` in the thinking mode must be passed back to the API."
DEEPSEEK_ROLE = (
    "Failed to deserialize the JSON body into the target type: messages[{i}].role: unknown "
    "variant `developer`, expected one of `system`, `user`, `assistant`, `tool` at line 1 "
    "column {column}"
)
MOONSHOT_REASONING = (
    "thinking is enabled but reasoning_content is missing in assistant tool call message at "
    "index {i}"
)
MOONSHOT_SCHEMA = (
    "tools.function.parameters is not a valid moonshot flavored json schema, details: "
    "<At path '{path}': {detail}>"
)
MOONSHOT_ANYOF = (
    "when using anyOf, type should be defined in anyOf items instead of the parent schema"
)
ZHIPU_EMPTY_TURN = "messages[{i}]:content和tool_calls 字段不能同时为空"
ZHIPU_EMPTY_PROMPT = "未正常接收到prompt参数"
MINIMAX_EMPTY = "invalid params, chat content is empty (2013)"
MINIMAX_PARAMETERS = "invalid params, function parameters is empty (2013)"
OLLAMA_NULL = "invalid message content type: <nil>"
GEMINI_UNKNOWN = (
    'Invalid JSON payload received. Unknown name "{name}" at '
    "'tools[0].function_declarations[{i}].parameters{path}': Cannot find field."
)
GEMINI_UNKNOWN_KEYS = frozenset(
    {"$schema", "$ref", "$defs", "additionalProperties", "propertyNames", "const"}
)


def refusal(provider: Provider, body: JSON) -> Refusal | None:
    """The status and body `provider` answers `body` with, or None when it takes it."""
    check = _CHECKS.get(provider)
    return None if check is None else check(body)


def _openai_error(message: str, code: str | None = "invalid_request_error") -> JSON:
    return {
        "error": {
            "message": message,
            "type": "invalid_request_error",
            "param": None,
            "code": code,
        }
    }


def _messages(body: JSON) -> Iterator[tuple[int, JSON]]:
    for at, message in enumerate(body.get("messages") or ()):
        if isinstance(message, dict):
            yield at, message


def _tool_turn(message: JSON) -> bool:
    calls = message.get("tool_calls")
    return message.get("role") == "assistant" and isinstance(calls, list) and bool(calls)


def _functions(body: JSON) -> Iterator[tuple[int, JSON]]:
    for at, tool in enumerate(body.get("tools") or ()):
        fn = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(fn, dict):
            yield at, fn


def _deepseek(body: JSON) -> Refusal | None:
    for at, message in _messages(body):
        if message.get("role") == "developer":
            column = 14 + len(str(at))
            return 422, _openai_error(DEEPSEEK_ROLE.format(i=at, column=column))
    if not body.get("tools"):
        return None
    for _, message in _messages(body):
        reasoning = message.get("reasoning_content")
        if _tool_turn(message) and not (isinstance(reasoning, str) and reasoning):
            return 400, _openai_error(DEEPSEEK_REASONING)
    return None


def _moonshot(body: JSON) -> Refusal | None:
    if body.get("tools"):
        for at, message in _messages(body):
            if _tool_turn(message) and not isinstance(message.get("reasoning_content"), str):
                return 400, _openai_error(MOONSHOT_REASONING.format(i=at), None)
    for _, fn in _functions(body):
        problem = moonshot_schema_problem(fn.get("parameters"))
        if problem is not None:
            path, detail = problem
            return 400, _openai_error(MOONSHOT_SCHEMA.format(path=path, detail=detail), None)
    return None


def moonshot_schema_problem(schema: object, path: str = "root") -> tuple[str, str] | None:
    """Where a schema leaves Moonshot's flavor and why, or None."""
    if not isinstance(schema, dict):
        return (path, "type is not defined") if path != "root" else None
    union = "anyOf" in schema or "oneOf" in schema
    if union and "type" in schema:
        return path, MOONSHOT_ANYOF
    if not union and "type" not in schema and "allOf" not in schema:
        return path, "type is not defined"
    required = schema.get("required")
    properties = schema.get("properties")
    names = properties if isinstance(properties, dict) else {}
    for name in required if isinstance(required, list) else ():
        if name not in names:
            where = "required" if path == "root" else f"{path}.required"
            return where, f"required property '{name}' is not defined in properties"
    return _moonshot_children(schema, path)


def _moonshot_children(schema: JSON, path: str) -> tuple[str, str] | None:
    prefix = "" if path == "root" else path + "."
    properties = schema.get("properties")
    for name, child in properties.items() if isinstance(properties, dict) else ():
        problem = moonshot_schema_problem(child, f"{prefix}properties.{name}")
        if problem is not None:
            return problem
    if "items" in schema:
        return moonshot_schema_problem(schema["items"], f"{prefix}items")
    for key in ("anyOf", "oneOf"):
        for n, member in enumerate(schema.get(key) or ()):
            problem = moonshot_schema_problem(member, f"{prefix}{key}.{n}")
            if problem is not None:
                return problem
    return None


def _zhipu(body: JSON) -> Refusal | None:
    for at, message in _messages(body):
        if _tool_turn(message) and message.get("content") == "":
            return 400, {"error": {"code": "1214", "message": ZHIPU_EMPTY_TURN.format(i=at)}}
        if message.get("role") == "tool" and message.get("content") in ("", None):
            return 400, {"error": {"code": "1213", "message": ZHIPU_EMPTY_PROMPT}}
    return None


def _minimax_error(message: str) -> JSON:
    return {"error": {"message": message, "type": "bad_request_error", "param": "", "code": None}}


def _minimax(body: JSON) -> Refusal | None:
    for _, fn in _functions(body):
        if not fn.get("parameters"):
            return 400, _minimax_error(MINIMAX_PARAMETERS)
    for _, message in _messages(body):
        turn = _tool_turn(message) and message.get("content") == ""
        if turn or (message.get("role") == "tool" and message.get("content") in ("", None)):
            return 400, _minimax_error(MINIMAX_EMPTY)
    return None


def _ollama(body: JSON) -> Refusal | None:
    for _, message in _messages(body):
        if "content" in message and message["content"] is None:
            return 400, _openai_error(OLLAMA_NULL, None)
    return None


def _gemini(body: JSON) -> Refusal | None:
    for at, fn in _functions(body):
        found = _gemini_unknown(fn.get("parameters"), "")
        if found is not None:
            name, path = found
            message = GEMINI_UNKNOWN.format(name=name, i=at, path=path)
            return 400, {"error": {"code": 400, "message": message, "status": "INVALID_ARGUMENT"}}
    return None


def _gemini_unknown(schema: object, path: str) -> tuple[str, str] | None:
    if not isinstance(schema, dict):
        return None
    for key in schema:
        if key in GEMINI_UNKNOWN_KEYS:
            return key, path
    properties = schema.get("properties")
    for n, child in enumerate(properties.values() if isinstance(properties, dict) else ()):
        found = _gemini_unknown(child, f"{path}.properties[{n}].value")
        if found is not None:
            return found
    return _gemini_unknown(schema.get("items"), f"{path}.items")


_CHECKS: dict[Provider, Callable[[JSON], Refusal | None]] = {
    Provider.DEEPSEEK: _deepseek,
    Provider.MOONSHOT: _moonshot,
    Provider.ZHIPU: _zhipu,
    Provider.MINIMAX: _minimax,
    Provider.OLLAMA: _ollama,
    Provider.GEMINI: _gemini,
}


__all__ = ["Provider", "moonshot_schema_problem", "refusal"]
