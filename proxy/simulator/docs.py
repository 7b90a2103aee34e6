"""What the simulator's OpenAPI page (`/docs`, `/openapi.json`) says about its endpoints.

The endpoints read their JSON bodies themselves, so that a bad body gets an OpenAI-shaped 400
as from a real provider (not FastAPI's 422): the request schemas here document, and nothing
validates against them.
"""

from __future__ import annotations

from typing import Any

from proxy.simulator.profiles import DEFAULT_PROFILE, OPTIONS, PROFILES

JSON = dict[str, Any]

TITLE = "toolcall-proxy simulated provider"


def description() -> str:
    names = ", ".join(f"`{name}`" for name in PROFILES)
    options = ", ".join(f"`{name}`" for name in OPTIONS)
    return (
        "An OpenAI-compatible upstream that misbehaves the way real providers do, for trying "
        "toolcall-proxy and for its tests. The request's `model` picks a profile: "
        f"{names}. Any other name gets `{DEFAULT_PROFILE}` (a Kimi-like upstream that reuses "
        f"ids every turn). Options follow with `+`: `reference+rounds=5`; they are {options}. "
        "Every profile runs the same scripted agent: a tool call per round, then a final text."
    )


def _error(description: str) -> JSON:
    return {"description": description, "content": {"application/json": {"schema": ERROR}}}


ERROR: JSON = {
    "type": "object",
    "properties": {
        "error": {
            "type": "object",
            "properties": {
                "message": {"type": "string"},
                "type": {"type": "string"},
                "code": {"type": ["string", "null"]},
                "param": {"type": ["string", "null"]},
            },
        }
    },
}
MODEL: JSON = {
    "type": "string",
    "description": "a profile name, optionally with +option=value",
    "examples": [DEFAULT_PROFILE, "reference+rounds=5", "paced+chunks=100+delay_ms=20"],
}
CHAT_REQUEST: JSON = {
    "type": "object",
    "required": ["messages"],
    "properties": {
        "model": MODEL,
        "messages": {"type": "array", "items": {"type": "object"}},
        "tools": {"type": "array", "items": {"type": "object"}},
        "stream": {"type": "boolean", "default": False},
        "stream_options": {
            "type": "object",
            "properties": {"include_usage": {"type": "boolean"}},
        },
    },
    "example": {
        "model": "reference",
        "stream": True,
        "messages": [{"role": "user", "content": "run the checks"}],
        "tools": [{"type": "function", "function": {"name": "run_shell_command"}}],
    },
}
EMBEDDINGS_REQUEST: JSON = {
    "type": "object",
    "properties": {
        "model": {"type": "string"},
        "input": {"oneOf": [{"type": "string"}, {"type": "array"}]},
        "dimensions": {"type": "integer", "default": 8, "maximum": 4096},
        "encoding_format": {"type": "string", "enum": ["float", "base64"]},
    },
    "example": {"model": "any", "input": ["hello"], "dimensions": 8},
}


def _body(schema: JSON) -> JSON:
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}


# Keyword arguments of FastAPI's add_api_route, per endpoint.
CHAT: JSON = {
    "summary": "Create a chat completion in the quirks of the profile `model` names",
    "description": "Streams server-sent events with `stream: true`, else one JSON completion. "
    "Fault profiles break the transport on purpose: reset, stall, hang, drip, garbage.",
    "openapi_extra": _body(CHAT_REQUEST),
    "responses": {
        200: {
            "description": "a completion, or its stream",
            "content": {"application/json": {}, "text/event-stream": {}},
        },
        400: _error("the body is no JSON object, has no messages list, or names a bad option"),
        429: _error("fault-429: a rate limit, with retry-after"),
        500: _error("fault-500: a server error"),
    },
}
RESPONSES_REQUEST: JSON = {
    "type": "object",
    "required": ["input"],
    "properties": {
        "model": MODEL,
        "input": {"type": ["string", "array"], "items": {"type": "object"}},
        "tools": {"type": "array", "items": {"type": "object"}},
        "previous_response_id": {"type": "string"},
        "conversation": {"type": ["string", "object"]},
        "store": {"type": "boolean"},
        "stream": {"type": "boolean"},
    },
}
RESPONSES: JSON = {
    "summary": "Create a response (OpenAI Responses) in the quirks of the profile `model` names",
    "description": "Streams Responses events with `stream: true`, else one response object. "
    "Keeps stored conversations for `previous_response_id` and `conversation`; answers 400 "
    "like a strict provider when an output names no call, a call is unanswered or a request "
    "repeats a `call_id`.",
    "openapi_extra": _body(RESPONSES_REQUEST),
    "responses": {
        200: {
            "description": "a response, or its event stream",
            "content": {"application/json": {}, "text/event-stream": {}},
        },
        400: _error("a bad body, an unknown previous response, or unpaired tool calls"),
        429: _error("fault-429: a rate limit, with retry-after"),
        500: _error("fault-500: a server error"),
    },
}
MODELS: JSON = {
    "summary": "List the profiles as models",
    "responses": {200: {"description": "every profile", "content": {"application/json": {}}}},
}
EMBEDDINGS: JSON = {
    "summary": "Create deterministic embeddings (for clients that pass through)",
    "openapi_extra": _body(EMBEDDINGS_REQUEST),
    "responses": {
        200: {"description": "one vector per input", "content": {"application/json": {}}},
        400: _error("the body is no JSON object"),
    },
}
MESSAGES_REQUEST: JSON = {
    "type": "object",
    "required": ["messages"],
    "properties": {
        "model": MODEL,
        "max_tokens": {"type": "integer"},
        "messages": {"type": "array", "items": {"type": "object"}},
        "tools": {"type": "array", "items": {"type": "object"}},
        "stream": {"type": "boolean", "default": False},
        "thinking": {"type": "object", "properties": {"type": {"type": "string"}}},
    },
    "example": {
        "model": "kimi",
        "max_tokens": 1024,
        "stream": True,
        "messages": [{"role": "user", "content": "run the checks"}],
        "tools": [{"name": "Bash", "input_schema": {"type": "object"}}],
    },
}
ANTHROPIC_ERROR: JSON = {
    "type": "object",
    "properties": {
        "type": {"const": "error"},
        "error": {
            "type": "object",
            "properties": {"type": {"type": "string"}, "message": {"type": "string"}},
        },
    },
}


def _anthropic_error(description: str) -> JSON:
    return {
        "description": description,
        "content": {"application/json": {"schema": ANTHROPIC_ERROR}},
    }


MESSAGES: JSON = {
    "summary": "Create an Anthropic message in the quirks of the profile `model` names",
    "description": "The same profiles and scripted agent as chat completions, in Anthropic's "
    "event grammar: `functions.Bash:0` ids restarting every turn (`kimi`), the whole input in "
    "`content_block_start` (`no-index`, `final-flush` also sends the fragments), no "
    "`content_block_stop` (`no-block-stop`), `end_turn` after tool_use (`no-index`), no "
    "`message_stop` (`no-finish`), replays (`replay-once`, `replay-loop`, `-restarted`), the "
    "same call under fresh ids (`repeat-forever`, `poll-until-done`). With `+strict=1`, a "
    "history whose `tool_use` and `tool_result` blocks do not pair is refused in Anthropic's "
    "words.",
    "openapi_extra": _body(MESSAGES_REQUEST),
    "responses": {
        200: {
            "description": "a message, or its event stream",
            "content": {"application/json": {}, "text/event-stream": {}},
        },
        400: _anthropic_error(
            "the body is no JSON object, has no messages, a bad option, or (`strict=1`) an "
            "unpaired history"
        ),
        429: _anthropic_error("fault-429: a rate limit, with retry-after"),
        500: _anthropic_error("fault-500: a server error"),
    },
}
COUNT_TOKENS: JSON = {
    "summary": "Count a message's input tokens (a stand-in: four bytes a token)",
    "openapi_extra": _body(MESSAGES_REQUEST),
    "responses": {200: {"description": "`input_tokens`", "content": {"application/json": {}}}},
}
