"""The simulator's OpenAI Responses endpoint (`POST /v1/responses`), in the profiles' quirks.

The request's `input` items (after the stored conversation `previous_response_id` or
`conversation` names, which this simulated provider keeps itself) are read as the chat
history the scripted model of `profiles.plan_reply` understands; its reply is rendered as
Responses items and events, shaped by the same profile fields: the id style gives the
`call_id`s (Kimi's `functions.{name}:{i}` restarting every response), `whole_call` puts the
whole arguments in `output_item.added`, `final_flush` repeats them as a last delta,
`terminate=False` sends no `response.completed`, `done_events=False` no `.done` events,
`item_ids=False` no item `id`s. Like a strict provider it answers 400 when an output names no
call, when a call is left unanswered, and (Kimi-like profiles) when one request repeats a `call_id`.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from typing import Any

import orjson
from fastapi import Request
from fastapi.responses import Response

from proxy.simulator.profiles import (
    JSON,
    Fault,
    IdStyle,
    PlannedCall,
    Profile,
    Reply,
    arguments_value,
    plan_reply,
    profile_for_model,
    random_id,
)

STORED_RESPONSES = 2048  # the simulated provider's memory of stored conversations
_CALLS = ("function_call", "custom_tool_call")
_OUTPUTS = ("function_call_output", "custom_tool_call_output")


def _error(
    status: int,
    message: str,
    code: str | None,
    param: str | None = None,
    *,
    kind: str = "invalid_request_error",
    headers: dict[str, str] | None = None,
) -> Response:
    error = {"message": message, "type": kind, "code": code, "param": param}
    return Response(orjson.dumps({"error": error}), status, headers, media_type="application/json")


class ResponseStore:
    """Stored conversations: a response id (or conversation id) -> its items so far."""

    def __init__(self) -> None:
        self._items: OrderedDict[str, list[JSON]] = OrderedDict()

    def get(self, key: str) -> list[JSON] | None:
        return self._items.get(key)

    def put(self, key: str, items: list[JSON]) -> None:
        self._items[key] = items
        self._items.move_to_end(key)
        while len(self._items) > STORED_RESPONSES:
            self._items.popitem(last=False)


async def read_body(request: Request) -> JSON | Response:
    try:
        body = orjson.loads(await request.body())
    except orjson.JSONDecodeError:
        return _error(400, "request body is not valid JSON", None)
    if not isinstance(body, dict):
        return _error(400, "request body must be a JSON object", None)
    return body


def _conversation_key(body: JSON) -> str | None:
    conversation = body.get("conversation")
    if isinstance(conversation, dict):
        conversation = conversation.get("id")
    return conversation if isinstance(conversation, str) else None


def history(body: JSON, store: ResponseStore) -> list[JSON] | Response:
    """Every item of the conversation so far: the stored ones, then `input`."""
    raw = body.get("input")
    if isinstance(raw, str):
        raw = [{"type": "message", "role": "user", "content": raw}]
    if not isinstance(raw, list):
        return _error(400, "'input' must be a string or a list of items", "invalid_type", "input")
    stored: list[JSON] = []
    previous = body.get("previous_response_id")
    if isinstance(previous, str):
        found = store.get(previous)
        if found is None:
            return _error(
                400,
                f"Previous response with id '{previous}' not found.",
                "previous_response_not_found",
                "previous_response_id",
            )
        stored = found
    elif (key := _conversation_key(body)) is not None:
        stored = store.get(key) or []
    return [*stored, *(item for item in raw if isinstance(item, dict))]


def check_pairs(body: JSON, items: list[JSON], *, unique_ids: bool) -> Response | None:
    """A strict provider's checks: every output answers a call (the latest of its id), every
    call is answered, and with `unique_ids` (Moonshot's API, QUIRKS.md) one request never
    repeats a `call_id`."""
    problem = _unpaired(items) or (_repeated(body) if unique_ids else None)
    if problem is None:
        return None
    message, code = problem
    return _error(400, message, code, "input")


def _unpaired(items: list[JSON]) -> tuple[str, str | None] | None:
    unanswered: list[str] = []
    for item in items:
        kind = item.get("type")
        if kind in _CALLS:
            unanswered.append(str(item.get("call_id")))
            continue
        if kind not in _OUTPUTS:
            continue
        call_id = item.get("call_id")
        if not isinstance(call_id, str) or not call_id:
            return "Missing required parameter: 'call_id'.", None
        if call_id not in unanswered:
            return f"No tool call found for function call output with call_id {call_id}.", None
        del unanswered[len(unanswered) - 1 - unanswered[::-1].index(call_id)]  # the latest
    if unanswered:
        return f"No tool output found for function call {unanswered[0]}.", None
    return None


def _repeated(body: JSON) -> tuple[str, str | None] | None:
    own = [
        str(i.get("call_id"))
        for i in body.get("input") or ()
        if isinstance(i, dict) and i.get("type") in _CALLS
    ]
    repeated = sorted({c for c in own if own.count(c) > 1})
    if repeated:
        return f"Duplicate call_id '{repeated[0]}' in input.", "duplicate_call_id"
    return None


def _text(content: object) -> str:
    if isinstance(content, str):
        return content
    parts = content if isinstance(content, list) else []
    return "".join(
        p["text"] for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str)
    )


def chat_view(items: list[JSON], tools: object) -> JSON:
    """The conversation as the chat history the scripted model reads: a run of model-made
    items is one assistant message."""
    messages: list[JSON] = []
    assistant: JSON | None = None
    for item in items:
        kind = item.get("type", "message")
        if (
            kind in _CALLS
            or kind == "reasoning"
            or (kind == "message" and item.get("role") == "assistant")
        ):
            if assistant is None:
                assistant = {"role": "assistant", "content": "", "tool_calls": []}
                messages.append(assistant)
            if kind in _CALLS:
                arguments = item.get("arguments", item.get("input"))
                function = {"name": item.get("name"), "arguments": arguments}
                assistant["tool_calls"].append(
                    {"id": item.get("call_id"), "type": "function", "function": function}
                )
            elif kind == "message":
                assistant["content"] += _text(item.get("content"))
            continue
        assistant = None
        if kind in _OUTPUTS:
            messages.append(
                {
                    "role": "tool",
                    "tool_call_id": item.get("call_id"),
                    "content": str(item.get("output")),
                }
            )
        elif kind == "message":
            messages.append(
                {"role": item.get("role", "user"), "content": _text(item.get("content"))}
            )
    return {"messages": messages, "tools": _chat_tools(tools)}


def _chat_tools(tools: object) -> list[JSON]:
    """Responses' flat function tools (namespaces' nested ones too) in Chat Completions' shape."""
    out: list[JSON] = []
    pending = list(tools) if isinstance(tools, list) else []
    while pending and len(out) < 1000:
        tool = pending.pop(0)
        if not isinstance(tool, dict):
            continue
        if isinstance(tool.get("tools"), list):
            pending = [*tool["tools"], *pending]
        elif tool.get("type") == "function" and isinstance(tool.get("name"), str):
            function = {"name": tool["name"], "parameters": tool.get("parameters") or {}}
            out.append({"type": "function", "function": function})
    return out


def plan(body: JSON, store: ResponseStore) -> tuple[Profile, Reply, str, list[JSON]] | Response:
    """The profile, the scripted reply, the model name and the conversation's items, or the
    error a strict provider answers."""
    model = body.get("model")
    model = model if isinstance(model, str) else ""
    try:
        profile = profile_for_model(model)
    except ValueError as exc:
        return _error(400, str(exc), "invalid_model")
    if profile.fault is Fault.RATE_LIMIT:
        limited = {"retry-after": "7", "x-ratelimit-remaining-requests": "0"}
        message = "Rate limit reached (simulated)"
        return _error(429, message, "rate_limit_exceeded", kind="requests", headers=limited)
    if profile.fault is Fault.SERVER_ERROR:
        return _error(500, "The server had an error (simulated)", None, kind="server_error")
    items = history(body, store)
    if isinstance(items, Response):
        return items
    refused = check_pairs(body, items, unique_ids=profile.id_style is IdStyle.KIMI_RESPONSE)
    if refused is not None:
        return refused
    return profile, plan_reply(profile, chat_view(items, body.get("tools"))), model, items


# --- rendering ---------------------------------------------------------------------------------


def _usage(items: list[JSON], reply: Reply) -> JSON:
    prompt = max(1, len(orjson.dumps(items)) // 4)
    produced = sum(len(c) for c in reply.content) + sum(
        len(c.name) + len(c.arguments) for c in reply.calls
    )
    completion = max(1, produced // 4)
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": prompt + completion,
    }


def _call_id(call: PlannedCall) -> JSON:
    if call.call_id is None:
        return {}
    return {"call_id": call.call_id if isinstance(call.call_id, str) else str(call.call_id)}


def output_items(profile: Profile, reply: Reply) -> list[JSON]:
    """The reply as output items: the text as one message, then one item per call."""
    items: list[JSON] = []
    text = "".join(reply.content)
    if text:
        part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
        items.append(
            {
                "type": "message",
                "id": random_id("msg_"),
                "role": "assistant",
                "status": "completed",
                "content": [part],
            }
        )
    for call in reply.calls:
        item: JSON = {
            "type": "function_call",
            **({"id": random_id("fc_")} if profile.item_ids else {}),
        }
        arguments = arguments_value(profile, call)
        item.update(_call_id(call), name=call.name, arguments=arguments, status="completed")
        items.append(item)
    return items


def response_object(
    body: JSON, model: str, status: str, output: list[JSON], usage: JSON | None
) -> JSON:
    return {
        "id": random_id("resp_"),
        "object": "response",
        "created_at": int(time.time()),
        "status": status,
        "error": None,
        "incomplete_details": None,
        "instructions": body.get("instructions"),
        "model": model,
        "output": output,
        "parallel_tool_calls": True,
        "previous_response_id": body.get("previous_response_id"),
        "store": body.get("store") is not False,
        "temperature": 1.0,
        "tool_choice": "auto",
        "tools": body.get("tools") or [],
        "top_p": 1.0,
        "usage": usage,
    }


def remember(
    store: ResponseStore, body: JSON, response: JSON, items: list[JSON], output: list[JSON]
) -> None:
    """A stored response (and a conversation) keeps every item so far, for later requests."""
    if body.get("store") is False:
        return
    everything = [*items, *output]
    store.put(response["id"], everything)
    if (key := _conversation_key(body)) is not None:
        store.put(key, everything)


def response_body(
    profile: Profile, body: JSON, reply: Reply, model: str, items: list[JSON], store: ResponseStore
) -> bytes:
    output = output_items(profile, reply)
    response = response_object(body, model, "completed", output, _usage(items, reply))
    remember(store, body, response, items, output)
    return orjson.dumps(response)


class _Events:
    """Numbered Responses events in the profile's framing."""

    def __init__(self, profile: Profile) -> None:
        self.profile = profile
        self.frames: list[bytes] = []
        self.seq = 0
        crlf = profile.fault is Fault.CRLF
        self._end, self._nl = (b"\r\n\r\n", b"\r\n") if crlf else (b"\n\n", b"\n")

    def add(self, kind: str, **fields: Any) -> None:
        event = {"type": kind, **fields, "sequence_number": self.seq}
        self.seq += 1
        self.frames.append(
            b"event: " + kind.encode() + self._nl + b"data: " + orjson.dumps(event) + self._end
        )


def _text_events(events: _Events, item: JSON, index: int, pieces: tuple[str, ...]) -> None:
    added = {**item, "status": "in_progress", "content": []}
    events.add("response.output_item.added", output_index=index, item=added)
    part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
    ref = {"item_id": item["id"], "output_index": index, "content_index": 0}
    events.add("response.content_part.added", **ref, part=part)
    for piece in pieces:
        events.add("response.output_text.delta", **ref, delta=piece, logprobs=[])
    text = "".join(pieces)
    if events.profile.done_events:
        events.add("response.output_text.done", **ref, text=text, logprobs=[])
        events.add("response.content_part.done", **ref, part={**part, "text": text})
    events.add("response.output_item.done", output_index=index, item=item)


def _call_events(events: _Events, item: JSON, index: int) -> None:
    profile = events.profile
    text = (
        item["arguments"]
        if isinstance(item["arguments"], str)
        else orjson.dumps(item["arguments"]).decode()
    )
    whole = profile.whole_call
    events.add(
        "response.output_item.added",
        output_index=index,
        item={**item, "arguments": text if whole else "", "status": "in_progress"},
    )
    ref = {"item_id": item.get("id", ""), "output_index": index}
    size = max(1, -(-len(text) // 4))
    pieces = [] if whole else [text[i : i + size] for i in range(0, len(text), size)]
    if profile.final_flush:
        pieces.append(text)
    for piece in pieces:
        events.add("response.function_call_arguments.delta", **ref, delta=piece)
    if profile.done_events:
        events.add("response.function_call_arguments.done", **ref, arguments=text)
        events.add(
            "response.output_item.done", output_index=index, item={**item, "arguments": text}
        )


def event_frames(
    profile: Profile, body: JSON, reply: Reply, model: str, items: list[JSON], store: ResponseStore
) -> list[bytes]:
    """The complete event stream of the reply, one element per event."""
    output = output_items(profile, reply)
    start = response_object(body, model, "in_progress", [], None)
    events = _Events(profile)
    events.add("response.created", response=start)
    events.add("response.in_progress", response=start)
    index = 0
    if output and output[0]["type"] == "message":
        _text_events(events, output[0], 0, reply.content)
        index = 1
    for item in output[index:]:
        _call_events(events, item, index)
        index += 1
    final = {**start, "status": "completed", "output": output, "usage": _usage(items, reply)}
    remember(store, body, final, items, output)
    if profile.terminate:
        events.add("response.completed", response=final)
    return events.frames
