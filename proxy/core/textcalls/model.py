"""What the text-call formats hand back, and the value helpers their parsers share."""

from __future__ import annotations

from dataclasses import dataclass

import orjson

from proxy.core.jsontext import dumps


@dataclass(frozen=True, slots=True)
class RecoveredCall:
    name: str
    arguments: str  # a JSON string
    raw_id: str | None
    format: str


Segment = str | RecoveredCall

# One call as a parser sees it: name, arguments (an object, or the JSON text of one), raw id.
Parsed = tuple[str, object, str | None]


class NotACall(ValueError):
    """A complete block that is not a well-formed call of its format (it stays text)."""


def json_value(text: str) -> object:
    """orjson's parse, failing as NotACall (orjson's own error is a ValueError too)."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise NotACall(str(exc)) from exc


def json_arguments(text: str) -> str:
    """Arguments written as JSON text: they must be an object; kept as written."""
    stripped = text.strip() or "{}"
    if not isinstance(json_value(stripped), dict):
        raise NotACall("arguments are not a JSON object")
    return stripped


def arguments_text(value: object) -> str:
    return value if isinstance(value, str) else dumps(value).decode()


def tag_value(raw: str) -> object:
    """A parameter written between tags (Qwen3-coder, GLM, MiniMax, DSML).

    The templates write strings as they are and everything else as JSON, and the proxy does
    not see the tools' schemas: a value that parses as JSON is taken as that value, anything
    else as the text (one newline either side is the template's, not the value's).
    """
    text = raw.removeprefix("\n").removesuffix("\n")
    try:
        return orjson.loads(text.strip())
    except orjson.JSONDecodeError:
        return text


# The keys a call object may have (besides `name`, one of `arguments` and `parameters`): a key
# the readers do not know may be what the model meant as arguments (`"args"`, `"input"`).
CALL_KEYS = frozenset({"name", "arguments", "parameters", "type", "id"})


def name_args_object(value: object) -> Parsed:
    """`{"name": ..., "arguments"|"parameters": {...}}`, and no key but CALL_KEYS: an object
    with keys the reader would have to leave out, or with both argument keys, is no call.
    Without either argument key the call has no arguments (`{"name": "f"}`)."""
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        raise NotACall("not a {name, arguments} object")
    if not CALL_KEYS.issuperset(value):
        raise NotACall("unexpected keys in a call object")
    if "arguments" in value and "parameters" in value:
        raise NotACall("both arguments and parameters")
    args = value.get("arguments", value.get("parameters", {}))
    if isinstance(args, str):
        args = json_arguments(args)
    elif not isinstance(args, dict):
        raise NotACall("arguments are not a JSON object")
    return (value["name"], args, None)


def json_calls(text: str) -> list[Parsed]:
    """One call object, or an array of them."""
    value = json_value(text)
    items = value if isinstance(value, list) else [value]
    if not items:
        raise NotACall("an empty array")
    return [name_args_object(item) for item in items]


def json_list(text: str) -> list[object]:
    """A JSON array with at least one item (the formats that always write a list)."""
    value = json_value(text.strip())
    if not isinstance(value, list) or not value:
        raise NotACall("not a JSON array of calls")
    return value
