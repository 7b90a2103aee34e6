"""The simulated upstream's Anthropic Messages endpoint (`POST /v1/messages`).

The same scripted agent and the same profiles as Chat Completions: the request is read into
the Chat Completions shape `plan_reply` knows (tool_use blocks become tool calls, tool_result
blocks tool messages), and the reply is written in Anthropic's event grammar with the
profile's quirks translated (QUIRKS.md, "Anthropic Messages and Responses endpoints"):
- `whole_call`: the whole `input` inside `content_block_start`, no `input_json_delta`;
  `final_flush`: the whole input there and the fragments after it (translators do both);
- `tool_finish` other than `tool_calls`: `stop_reason: "end_turn"` after tool_use blocks;
- `terminate=False`: neither `message_delta` nor `message_stop`; `block_stop=False`: no
  `content_block_stop`;
- ids as the profile mints them (`functions.Bash:0`, `grep_0`, integers, empty, missing);
  the reference profile's random ids are Anthropic's own `toolu_...`.
A request with `thinking` enabled gets a thinking block with its signature first, as Claude
models answer, so clients' thinking round trips can be exercised. With `strict=1` a history
whose `tool_use` blocks are not each answered by a `tool_result` block in the next message, or
with a `tool_result` whose id is not a `tool_use` of the message before, is refused in
Anthropic's words (SPEC §11: the proxy repairs such histories).
"""

from __future__ import annotations

import orjson
from fastapi import Request
from fastapi.responses import Response

from proxy.core.jsontext import dumps
from proxy.simulator.profiles import (
    JSON,
    Fault,
    IdStyle,
    PlannedCall,
    Profile,
    Reply,
    plan_reply,
    profile_for_model,
    random_id,
)


def anthropic_error(status: int, error_type: str, message: str, **headers: str) -> Response:
    """Anthropic's error body: `{"type": "error", "error": {"type": ..., "message": ...}}`."""
    body = {"type": "error", "error": {"type": error_type, "message": message}}
    headers = {k.replace("_", "-"): v for k, v in headers.items()}
    return Response(orjson.dumps(body), status, headers, media_type="application/json")


# --- the request, read as the scripted model's Chat Completions history ----------------------


def _blocks(content: object) -> list[JSON]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []


def _result_text(block: JSON) -> str:
    content = block.get("content")
    if isinstance(content, str):
        return content
    return "".join(str(b.get("text", "")) for b in _blocks(content))


def _assistant(blocks: list[JSON]) -> JSON:
    text = "".join(str(b.get("text", "")) for b in blocks if b.get("type") == "text")
    calls = [
        {
            "id": b.get("id"),
            "type": "function",
            "function": {"name": b.get("name"), "arguments": dumps(b.get("input")).decode()},
        }
        for b in blocks
        if b.get("type") == "tool_use"
    ]
    return {"role": "assistant", "content": text, **({"tool_calls": calls} if calls else {})}


def _user(blocks: list[JSON]) -> list[JSON]:
    out: list[JSON] = [
        {"role": "tool", "tool_call_id": b.get("tool_use_id"), "content": _result_text(b)}
        for b in blocks
        if b.get("type") == "tool_result"
    ]
    texts = [b for b in blocks if b.get("type") == "text"]
    if texts:
        out.append({"role": "user", "content": texts})
    return out


def chat_history(body: JSON) -> JSON:
    """The request as `plan_reply` reads it: messages with tool calls, tools as functions."""
    messages: list[JSON] = []
    for message in body.get("messages") or []:
        if not isinstance(message, dict):
            continue
        blocks = _blocks(message.get("content"))
        if message.get("role") == "assistant":
            messages.append(_assistant(blocks))
        else:
            messages.extend(_user(blocks))
    tools = [
        {"type": "function", "function": {"name": t["name"], "parameters": t.get("input_schema")}}
        for t in body.get("tools") or []
        if isinstance(t, dict) and isinstance(t.get("name"), str)
    ]
    return {"model": body.get("model"), "messages": messages, "tools": tools}


# --- a strict provider's pairing rule (SPEC §11) ---------------------------------------------

# Anthropic's words for a history whose tool_use and tool_result blocks do not pair.
UNANSWERED_USES = (
    "messages.{index}: `tool_use` ids were found without `tool_result` blocks immediately "
    "after: {ids}. Each `tool_use` block must have a corresponding `tool_result` block in the "
    "next message."
)
UNEXPECTED_RESULT = (
    "messages.{index}.content.{block}: unexpected `tool_use_id` found in `tool_result` blocks: "
    "{id}. Each `tool_result` block must have a corresponding `tool_use` block in the previous "
    "message."
)


def unpaired(body: JSON) -> str | None:
    """What Anthropic answers (400) to a history whose `tool_use` ids are not each answered
    by a `tool_result` block in the next message, or whose `tool_result` answers no
    `tool_use` of the message before it; None when the history pairs."""
    uses: list[object] = []  # the tool_use ids of the message before
    used_at = 0
    for index, message in enumerate(body.get("messages") or ()):
        blocks = _blocks(message.get("content")) if isinstance(message, dict) else []
        results = [(at, b) for at, b in enumerate(blocks) if b.get("type") == "tool_result"]
        answered = [b.get("tool_use_id") for _, b in results]
        missing = [use for use in uses if use not in answered]
        if missing:
            return UNANSWERED_USES.format(index=used_at, ids=", ".join(map(str, missing)))
        for at, block in results:
            if block.get("tool_use_id") not in uses:
                return UNEXPECTED_RESULT.format(index=index, block=at, id=block.get("tool_use_id"))
        uses = [b.get("id") for b in blocks if b.get("type") == "tool_use"]
        used_at = index
    if uses:
        return UNANSWERED_USES.format(index=used_at, ids=", ".join(map(str, uses)))
    return None


# --- the reply, as Anthropic content blocks ------------------------------------------------


def _client_id(profile: Profile, call: PlannedCall) -> object:
    raw = call.call_id
    if profile.id_style is IdStyle.OPENAI and isinstance(raw, str) and raw.startswith("call_"):
        return "toolu_" + raw.removeprefix("call_")
    return raw


def _input(call: PlannedCall) -> object:
    try:
        return orjson.loads(call.arguments)
    except orjson.JSONDecodeError:
        return {}


def _tool_block(profile: Profile, call: PlannedCall, whole: bool) -> JSON:
    block: JSON = {"type": "tool_use"}
    if call.call_id is not None:
        block["id"] = _client_id(profile, call)
    block["name"] = call.name
    block["input"] = _input(call) if whole else {}
    return block


def _stop_reason(profile: Profile, reply: Reply) -> str | None:
    if reply.finish_reason is None:
        return None
    if reply.calls and profile.tool_finish == "tool_calls":
        return "tool_use"
    return "end_turn"


def _usage(body: JSON, reply: Reply) -> tuple[int, int]:
    # Deterministic stand-ins for token counts: about four bytes per token.
    prompt = max(1, len(orjson.dumps(body.get("messages"))) // 4)
    produced = sum(len(c) for c in reply.content)
    produced += sum(len(c.name) + len(c.arguments) for c in reply.calls)
    return prompt, max(1, produced // 4)


def _thinking(body: JSON) -> bool:
    thinking = body.get("thinking")
    return isinstance(thinking, dict) and thinking.get("type") == "enabled"


_THOUGHT = ("The user wants ", "the next step.")
_SIGNATURE = "c2ltdWxhdGVkLXNpZ25hdHVyZQ=="


def _message_head(model: str, body: JSON, reply: Reply) -> JSON:
    prompt, _ = _usage(body, reply)
    return {
        "id": "msg_" + random_id("", 24),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": prompt, "output_tokens": 1},
    }


def message_body(profile: Profile, body: JSON, reply: Reply, model: str) -> bytes:
    """The non-streaming answer: one message with every block whole."""
    message = _message_head(model, body, reply)
    content: list[JSON] = []
    if _thinking(body):
        content.append({"type": "thinking", "thinking": "".join(_THOUGHT), "signature": _SIGNATURE})
    if reply.content:
        content.append({"type": "text", "text": "".join(reply.content)})
    content += [_tool_block(profile, call, whole=True) for call in reply.calls]
    prompt, produced = _usage(body, reply)
    message.update(
        content=content,
        stop_reason=_stop_reason(profile, reply),
        usage={"input_tokens": prompt, "output_tokens": produced},
    )
    return orjson.dumps(message)


class _Events:
    """Builds one SSE body: `event: <type>` and `data: {...}` per event."""

    def __init__(self, profile: Profile):
        self.profile = profile
        self.frames: list[bytes] = []
        self.index = 0
        self.sep = b"\r\n" if profile.fault is Fault.CRLF else b"\n"

    def add(self, data: JSON) -> None:
        sep = self.sep
        self.frames.append(
            b"event: " + data["type"].encode() + sep + b"data: " + orjson.dumps(data) + sep + sep
        )

    def block(self, start: JSON, deltas: list[JSON]) -> None:
        index = self.index
        self.index += 1
        self.add({"type": "content_block_start", "index": index, "content_block": start})
        for delta in deltas:
            self.add({"type": "content_block_delta", "index": index, "delta": delta})
        if self.profile.block_stop:
            self.add({"type": "content_block_stop", "index": index})


def _fragments(text: str, parts: int) -> list[str]:
    size = max(1, -(-len(text) // parts))
    return [text[i : i + size] for i in range(0, len(text), size)]


def event_frames(profile: Profile, body: JSON, reply: Reply, model: str) -> list[bytes]:
    """The complete event stream, one element per event."""
    out = _Events(profile)
    out.add({"type": "message_start", "message": _message_head(model, body, reply)})
    if _thinking(body):
        deltas = [{"type": "thinking_delta", "thinking": t} for t in _THOUGHT]
        deltas.append({"type": "signature_delta", "signature": _SIGNATURE})
        out.block({"type": "thinking", "thinking": "", "signature": ""}, deltas)
    if reply.content:
        out.block(
            {"type": "text", "text": ""},
            [{"type": "text_delta", "text": t} for t in reply.content],
        )
        out.add({"type": "ping"})
    for call in reply.calls:
        whole = profile.whole_call or profile.final_flush
        pieces = [] if profile.whole_call else _fragments(call.arguments, 4)
        out.block(
            _tool_block(profile, call, whole),
            [{"type": "input_json_delta", "partial_json": p} for p in pieces],
        )
    if reply.finish_reason is not None and profile.terminate:
        _, produced = _usage(body, reply)
        out.add(
            {
                "type": "message_delta",
                "delta": {"stop_reason": _stop_reason(profile, reply), "stop_sequence": None},
                "usage": {"output_tokens": produced},
            }
        )
        out.add({"type": "message_stop"})
    return out.frames


def count_tokens(body: JSON) -> bytes:
    """`/v1/messages/count_tokens`: the same four-bytes-a-token stand-in as the usage."""
    size = len(orjson.dumps(body.get("messages"))) + len(orjson.dumps(body.get("system")))
    return orjson.dumps({"input_tokens": max(1, size // 4)})


def plan(body: JSON) -> tuple[Profile, Reply, str] | Response:
    """The profile the request's model names and what the scripted model answers, or the
    error a provider would send instead (a bad body, a bad option, a fault profile)."""
    if not isinstance(body.get("messages"), list):
        return anthropic_error(400, "invalid_request_error", "messages: Field required")
    model = body.get("model")
    model = model if isinstance(model, str) else ""
    try:
        profile = profile_for_model(model)
    except ValueError as exc:
        return anthropic_error(400, "invalid_request_error", str(exc))
    if profile.fault is Fault.RATE_LIMIT:
        return anthropic_error(
            429,
            "rate_limit_error",
            "Number of requests has exceeded your rate limit (simulated)",
            retry_after="7",
            request_id="sim-req-1",
        )
    if profile.fault is Fault.SERVER_ERROR:
        return anthropic_error(500, "api_error", "Internal server error (simulated)")
    refusal = unpaired(body) if profile.strict else None
    if refusal is not None:
        return anthropic_error(400, "invalid_request_error", refusal)
    return profile, plan_reply(profile, chat_history(body)), model


async def read_body(request: Request) -> JSON | Response:
    try:
        body = orjson.loads(await request.body())
    except orjson.JSONDecodeError:
        return anthropic_error(400, "invalid_request_error", "request body is not valid JSON")
    if not isinstance(body, dict):
        return anthropic_error(400, "invalid_request_error", "request body must be an object")
    return body


__all__: list[str] = [
    "anthropic_error",
    "chat_history",
    "count_tokens",
    "event_frames",
    "message_body",
    "plan",
    "read_body",
]
