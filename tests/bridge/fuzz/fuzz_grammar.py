"""Grammar checkers for what the bridges write (SPEC §8, §9), reusable by any bridge test.

Each checker takes bytes (or a parsed object), asserts the grammar with a message that names
the broken rule, and returns what it parsed:
- `check_chat_request`: a Chat Completions request the bridge sends upstream.
- `check_responses_stream` / `check_response_object`: Responses' event grammar and object.
- `check_anthropic_stream` / `check_anthropic_message`: Anthropic Messages' event grammar and
  message object.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

JSON = dict[str, Any]

CHAT_ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})
PART_TYPES = frozenset({"text", "image_url", "file", "input_audio"})


# -- SSE framing ---------------------------------------------------------------------------------


@dataclass
class SSEFrame:
    """One event of a well-framed SSE body: its `event:` name (or None), its data (or None for
    a comment-only frame) and its comment lines."""

    name: str | None
    data: str | None
    comments: list[str] = field(default_factory=list)


def sse_frames(raw: bytes) -> list[SSEFrame]:
    """The body's events. The proxy writes `\\n` line ends and a blank line after every event,
    so the body must end with one (or be empty)."""
    text = raw.decode("utf-8")  # a UnicodeDecodeError is a failure: the client reads UTF-8
    assert not text or text.endswith("\n\n"), f"the stream does not end an event: {text[-80:]!r}"
    assert "\r" not in text, "the proxy writes \\n line ends only"
    frames: list[SSEFrame] = []
    for block in text.split("\n\n")[:-1]:
        assert block, "an empty event (two blank lines in a row)"
        frame = SSEFrame(None, None)
        data: list[str] = []
        for line in block.split("\n"):
            if line.startswith(":"):
                frame.comments.append(line)
            elif line.startswith("event: "):
                assert frame.name is None, f"two event lines in one event: {block!r}"
                frame.name = line[len("event: ") :]
            elif line.startswith("data: "):
                data.append(line[len("data: ") :])
            else:
                raise AssertionError(f"a line that is no SSE field: {line!r}")
        frame.data = "\n".join(data) if data else None
        assert frame.data is not None or frame.name is None, f"an event without data: {block!r}"
        frames.append(frame)
    return frames


def _json_object(text: str) -> JSON:
    value = orjson.loads(text)  # a JSONDecodeError is a failure: every data line is JSON
    assert isinstance(value, dict), f"a data line that is no JSON object: {text[:80]!r}"
    return value


# -- Chat Completions requests ---------------------------------------------------------------------


def check_chat_request(raw: bytes) -> JSON:
    """A Chat body the upstream accepts: `messages` a list of dicts with Chat roles; each
    assistant message's tool calls are well formed and answered by the `tool` messages right
    after it (each once, none other); no call id twice in the request; tools and tool_choice
    in Chat's shape."""
    body = orjson.loads(raw)
    assert isinstance(body, dict), "the Chat body is no JSON object"
    messages = body.get("messages")
    assert isinstance(messages, list), "`messages` is no list"
    seen: set[str] = set()
    awaiting: list[str] = []  # the last assistant message's calls not answered yet
    for n, message in enumerate(messages):
        assert isinstance(message, dict), f"message {n} is no object"
        role = message.get("role")
        assert role in CHAT_ROLES, f"message {n} has role {role!r}"
        if role == "tool":
            call_id = message.get("tool_call_id")
            assert call_id in awaiting, f"message {n} answers {call_id!r}, which is not awaited"
            awaiting.remove(call_id)
            _check_content(message.get("content"), f"tool message {n}", text_only=True)
            continue
        assert not awaiting, f"calls {awaiting} unanswered before message {n} ({role})"
        if role == "assistant":
            awaiting = _check_assistant(message, n, seen)
        else:
            _check_content(message.get("content"), f"{role} message {n}")
    assert not awaiting, f"calls {awaiting} unanswered at the end of the history"
    _check_tools(body)
    if "stream_options" in body:
        assert body.get("stream") is True, "stream_options without stream"
    return body


def _check_assistant(message: JSON, n: int, seen: set[str]) -> list[str]:
    calls = message.get("tool_calls")
    content = message.get("content")
    if content is not None:
        _check_content(content, f"assistant message {n}")
    reasoning = message.get("reasoning_content")
    assert reasoning is None or isinstance(reasoning, str), f"message {n}: reasoning_content"
    if calls is None:
        assert content is not None, f"assistant message {n} has neither content nor calls"
        return []
    assert isinstance(calls, list) and calls, f"assistant message {n}: tool_calls {calls!r}"
    ids: list[str] = []
    for call in calls:
        assert isinstance(call, dict) and call.get("type") == "function", f"call {call!r}"
        call_id = call.get("id")
        assert isinstance(call_id, str) and call_id, f"message {n}: call id {call_id!r}"
        assert call_id not in seen, f"message {n}: call id {call_id!r} twice in the request"
        seen.add(call_id)
        ids.append(call_id)
        function = call.get("function")
        assert isinstance(function, dict), f"call {call_id}: function {function!r}"
        assert isinstance(function.get("name"), str), f"call {call_id}: name"
        assert isinstance(function.get("arguments"), str), f"call {call_id}: arguments"
    return ids


def _check_content(content: object, where: str, *, text_only: bool = False) -> None:
    if isinstance(content, str):
        return
    assert isinstance(content, list), f"{where}: content {content!r}"
    for part in content:
        assert isinstance(part, dict), f"{where}: part {part!r}"
        kind = part.get("type")
        assert kind in ({"text"} if text_only else PART_TYPES), f"{where}: part type {kind!r}"
        if kind == "text":
            assert isinstance(part.get("text"), str), f"{where}: text part {part!r}"


def _check_tools(body: JSON) -> None:
    tools = body.get("tools")
    names: set[str] = set()
    if tools is not None:
        assert isinstance(tools, list) and tools, f"tools {tools!r}"
        for tool in tools:
            assert isinstance(tool, dict) and tool.get("type") == "function", f"tool {tool!r}"
            function = tool.get("function")
            assert isinstance(function, dict), f"tool {tool!r}"
            assert isinstance(function.get("name"), str) and function["name"], f"tool {tool!r}"
            assert isinstance(function.get("parameters", {}), dict), f"tool {tool!r}"
            names.add(function["name"])
    choice = body.get("tool_choice")
    if choice is None:
        assert "parallel_tool_calls" not in body or tools, "parallel_tool_calls without tools"
        return
    assert tools, "tool_choice without tools"
    if isinstance(choice, str):
        assert choice in ("auto", "none", "required"), f"tool_choice {choice!r}"
        return
    assert isinstance(choice, dict) and choice.get("type") == "function", f"{choice!r}"
    assert choice["function"]["name"] in names, f"tool_choice names no offered tool: {choice!r}"


# -- Responses -------------------------------------------------------------------------------------

RESPONSE_TERMINALS = frozenset({"response.completed", "response.incomplete", "response.failed"})
RESPONSE_STATUSES = frozenset({"completed", "incomplete", "failed", "in_progress"})
ITEM_TYPES = frozenset({"message", "reasoning", "function_call", "custom_tool_call"})


@dataclass
class _ResponsesState:
    complete: bool  # calls' arguments must be whole JSON (the upstream's body was not cut)
    open_items: dict[int, JSON] = field(default_factory=dict)  # output_index -> item
    done_items: dict[int, JSON] = field(default_factory=dict)
    next_index: int = 0
    last_seq: int = -1
    terminal: JSON | None = None


def check_responses_stream(raw: bytes, *, complete: bool = True) -> list[JSON]:
    """Responses' event grammar: every event a JSON object named by its `event:` line;
    `sequence_number` strictly increasing; `response.created` then `response.in_progress`
    first; items added with dense `output_index` before their deltas, done after them;
    exactly one terminal event, last, whose `output` holds exactly the items done (a
    completed response has none left open). `complete`: every function call's arguments are
    a JSON value (not so where the upstream's body was cut inside them)."""
    events: list[JSON] = []
    state = _ResponsesState(complete)
    for frame in sse_frames(raw):
        if frame.data is None:
            continue  # a comment (keep-alive, or a non-JSON upstream line)
        event = _json_object(frame.data)
        assert state.terminal is None, f"{event.get('type')} after the terminal event"
        assert event.get("type") == frame.name, f"event line {frame.name} for {event.get('type')}"
        seq = event.get("sequence_number")
        assert isinstance(seq, int) and seq > state.last_seq, f"sequence_number {seq} after "
        state.last_seq = seq
        _responses_event(event, len(events), state)
        events.append(event)
    assert state.terminal is not None, "the stream has no terminal event"
    return events


def _responses_event(event: JSON, position: int, state: _ResponsesState) -> None:
    kind = event["type"]
    if position < 2:
        expected = ("response.created", "response.in_progress")[position]
        assert kind == expected or (kind == "response.failed" and position == 0), (
            f"event {position} is {kind}, not {expected}"
        )
    if kind in ("response.created", "response.in_progress"):
        assert position < 2, f"{kind} again at event {position}"
        check_response_object(event["response"], streaming=True)
    elif kind == "response.output_item.added":
        index = event["output_index"]
        assert index == state.next_index, f"output_index {index}, expected {state.next_index}"
        state.next_index += 1
        _check_item(event["item"])
        state.open_items[index] = event["item"]
    elif kind == "response.output_item.done":
        index = event["output_index"]
        added = state.open_items.pop(index, None)
        assert added is not None, f"output_item.done for {index}, which is not open"
        item = event["item"]
        _check_item(item)
        assert item["id"] == added["id"] and item["type"] == added["type"]
        if state.complete and item["type"] == "function_call":
            orjson.loads(item["arguments"])  # a JSONDecodeError is a failure
        state.done_items[index] = item
    elif kind in RESPONSE_TERMINALS:
        _responses_terminal(event, state)
    else:  # an item's delta or part event: its item is open
        index = event.get("output_index")
        assert index in state.open_items, f"{kind} for output_index {index}, which is not open"
        assert event.get("item_id") == state.open_items[index]["id"], f"{kind}: item_id"


def _responses_terminal(event: JSON, state: _ResponsesState) -> None:
    kind = event["type"]
    response = check_response_object(event["response"], streaming=True)
    assert response["status"] == kind.removeprefix("response."), f"{kind}: status"
    if kind != "response.failed":
        assert not state.open_items, f"{kind} with items still open: {list(state.open_items)}"
    else:
        assert isinstance(response.get("error"), dict), "response.failed without an error"
        assert isinstance(response["error"].get("message"), str), "response.failed: message"
    done = [state.done_items[i] for i in sorted(state.done_items)]
    assert response["output"] == done, f"{kind}: output is not the items done"
    state.terminal = event


def _check_item(item: object) -> None:
    assert isinstance(item, dict), f"item {item!r}"
    kind = item.get("type")
    assert kind in ITEM_TYPES, f"item type {kind!r}"
    assert isinstance(item.get("id"), str) and item["id"], f"item id {item!r}"
    if kind in ("function_call", "custom_tool_call"):
        call_id = item.get("call_id")
        assert isinstance(call_id, str) and call_id, f"call_id {call_id!r}"
        assert len(call_id) <= 64, f"call_id over 64 characters: {call_id!r}"
        assert isinstance(item.get("name"), str), f"name {item!r}"
        payload = "arguments" if kind == "function_call" else "input"
        assert isinstance(item.get(payload), str), f"{payload} {item!r}"
    elif kind == "message":
        assert item.get("role") == "assistant" and isinstance(item.get("content"), list)
        for part in item["content"]:
            assert part.get("type") in ("output_text", "refusal"), f"part {part!r}"
    else:
        assert isinstance(item.get("summary"), list), f"reasoning {item!r}"


def _check_output(output: object) -> None:
    """A response's `output`: valid items, their ids and call_ids each once."""
    assert isinstance(output, list), f"output {output!r}"
    for item in output:
        _check_item(item)
    ids = [item["id"] for item in output]
    assert len(ids) == len(set(ids)), f"item ids twice: {ids}"
    call_ids = [item["call_id"] for item in output if "call_id" in item]
    assert len(call_ids) == len(set(call_ids)), f"call_ids twice: {call_ids}"


def check_response_object(response: object, *, streaming: bool = False) -> JSON:
    """A Responses `response` object: id, status, output items, usage shape; the items'
    ids and call_ids unique."""
    assert isinstance(response, dict) and response.get("object") == "response", f"{response!r}"
    assert isinstance(response.get("id"), str) and response["id"].startswith("resp_")
    status = response.get("status")
    assert status in RESPONSE_STATUSES, f"status {status!r}"
    if not streaming:
        assert status in ("completed", "incomplete"), f"a whole response with status {status}"
    _check_output(response.get("output"))
    usage = response.get("usage")
    if usage is not None:
        for key in ("input_tokens", "output_tokens", "total_tokens"):
            assert isinstance(usage.get(key), int) and usage[key] >= 0, f"usage {usage!r}"
    incomplete = response.get("incomplete_details")
    assert (status == "incomplete") == (incomplete is not None), f"incomplete_details {incomplete}"
    return response


def _check_block(block: object) -> str | None:
    """A whole message's block; a tool_use block's id."""
    assert isinstance(block, dict) and block.get("type") in BLOCK_DELTAS, f"block {block!r}"
    if block["type"] == "tool_use":
        assert isinstance(block["id"], str) and block["id"], f"tool_use id {block!r}"
        assert isinstance(block["input"], dict), f"tool_use input {block!r}"
        return block["id"]
    if block["type"] == "text":
        assert isinstance(block["text"], str)
    else:
        assert isinstance(block["thinking"], str) and isinstance(block["signature"], str)
    return None


# -- Anthropic Messages ------------------------------------------------------------------------------

STOP_REASONS = frozenset(
    {"end_turn", "max_tokens", "stop_sequence", "tool_use", "pause_turn", "refusal"}
)
BLOCK_DELTAS = {
    "text": {"text_delta"},
    "thinking": {"thinking_delta", "signature_delta"},
    "tool_use": {"input_json_delta"},
}


@dataclass
class _AnthropicState:
    complete: bool  # tool inputs must be whole JSON objects (the body was not cut)
    started: bool = False
    open_blocks: dict[int, JSON] = field(default_factory=dict)
    next_index: int = 0
    message_delta: JSON | None = None
    ended: str | None = None  # "message_stop" or "error"
    tool_inputs: dict[int, str] = field(default_factory=dict)
    broken_inputs: list[int] = field(default_factory=list)  # tool blocks stopped mid-input
    last_stopped: int = -1


def check_anthropic_stream(raw: bytes, *, complete: bool = True) -> list[JSON]:
    """Anthropic's event grammar: `message_start` first; block indexes dense, each block
    started, given deltas of its own kind, and stopped; one `message_delta` (after every block
    stopped), `message_stop` last; or an `error` event that ends the stream (after
    `message_start`, no block left open). `complete`: a tool_use block's input fragments
    join into a JSON object (not so where the upstream's body was cut inside them)."""
    events: list[JSON] = []
    state = _AnthropicState(complete)
    for frame in sse_frames(raw):
        if frame.data is None:
            continue
        event = _json_object(frame.data)
        assert state.ended is None, f"{event.get('type')} after {state.ended}"
        assert frame.name == event.get("type"), f"event line {frame.name} for {event.get('type')}"
        _anthropic_event(event, state)
        events.append(event)
    assert state.ended is not None, "the stream ends without message_stop or error"
    return events


def _anthropic_event(event: JSON, state: _AnthropicState) -> None:
    kind = event["type"]
    if not state.started:
        assert kind == "message_start", f"the first event is {kind}"
    check = _ANTHROPIC_EVENTS.get(kind)
    assert check is not None or kind == "ping", f"an unknown event {kind}"
    if check is not None:
        check(event, state)


def _message_start(event: JSON, state: _AnthropicState) -> None:
    assert not state.started, "message_start twice"
    state.started = True
    assert event["message"]["content"] == [] and event["message"]["role"] == "assistant"


def _block_delta(event: JSON, state: _AnthropicState) -> None:
    block = state.open_blocks.get(event["index"])
    assert block is not None, f"a delta for block {event['index']}, which is not open"
    delta_kind = event["delta"]["type"]
    assert delta_kind in BLOCK_DELTAS[block["type"]], f"{delta_kind} in a {block['type']}"
    if delta_kind == "input_json_delta":
        state.tool_inputs[event["index"]] += event["delta"]["partial_json"]


def _message_delta(event: JSON, state: _AnthropicState) -> None:
    assert state.message_delta is None, "message_delta twice"
    assert not state.open_blocks, f"message_delta with blocks open: {list(state.open_blocks)}"
    assert not state.broken_inputs, f"tool_use inputs that are no JSON object: {state.tool_inputs}"
    _check_stop(event["delta"]["stop_reason"], bool(state.tool_inputs))
    usage = event["usage"]
    assert all(isinstance(v, int) and v >= 0 for v in usage.values()), f"usage {usage}"
    state.message_delta = event


def _message_stop(event: JSON, state: _AnthropicState) -> None:
    assert state.message_delta is not None, "message_stop without message_delta"
    state.ended = event["type"]


def _error(event: JSON, state: _AnthropicState) -> None:
    assert not state.open_blocks, f"error with blocks open: {list(state.open_blocks)}"
    # The block that was live when the stream broke is stopped where it was (its input may
    # be cut); every earlier one is whole.
    assert set(state.broken_inputs) <= {state.last_stopped}, f"inputs {state.tool_inputs}"
    error = event["error"]
    assert isinstance(error.get("type"), str) and isinstance(error.get("message"), str)
    state.ended = event["type"]


def _check_stop(reason: object, delivered_tools: bool) -> None:
    """SPEC §8: `tool_use` exactly when tool_use blocks were delivered (a cut-off answer
    keeps its own reason)."""
    assert reason in STOP_REASONS, f"stop_reason {reason!r}"
    if reason not in ("max_tokens", "refusal"):
        assert (reason == "tool_use") == delivered_tools, f"{reason} with tools {delivered_tools}"


def _block_start(event: JSON, state: _AnthropicState) -> None:
    assert state.message_delta is None, "a block after message_delta"
    index = event["index"]
    assert index == state.next_index, f"block index {index}, expected {state.next_index}"
    state.next_index += 1
    block = event["content_block"]
    assert block["type"] in BLOCK_DELTAS, f"block type {block['type']}"
    if block["type"] == "tool_use":
        assert isinstance(block["id"], str) and block["id"], f"tool_use id {block!r}"
        assert isinstance(block["name"], str) and block["input"] == {}, f"tool_use {block!r}"
        state.tool_inputs[index] = ""
    state.open_blocks[index] = block


def _block_stop(event: JSON, state: _AnthropicState) -> None:
    index = event["index"]
    block = state.open_blocks.pop(index, None)
    assert block is not None, f"content_block_stop for {index}, which is not open"
    if block["type"] == "tool_use":
        # The SDKs parse the joined input as JSON when the block stops ("" reads as {}).
        text = state.tool_inputs[index]
        if text and state.complete and not _is_object(text):
            state.broken_inputs.append(index)
    state.last_stopped = index


def _is_object(text: str) -> bool:
    try:
        return isinstance(orjson.loads(text), dict)
    except orjson.JSONDecodeError:
        return False


_ANTHROPIC_EVENTS: dict[str, Callable[[JSON, _AnthropicState], None]] = {
    "message_start": _message_start,
    "content_block_start": _block_start,
    "content_block_delta": _block_delta,
    "content_block_stop": _block_stop,
    "message_delta": _message_delta,
    "message_stop": _message_stop,
    "error": _error,
}


def check_anthropic_message(message: object) -> JSON:
    """A whole Anthropic `message`: blocks of known kinds, tool_use ids unique, inputs objects,
    a known stop_reason (`tool_use` exactly when a tool_use block is there, unless the answer
    was cut short) and integer usage."""
    assert isinstance(message, dict) and message.get("type") == "message", f"{message!r}"
    assert isinstance(message.get("id"), str) and message["id"].startswith("msg_")
    assert message.get("role") == "assistant"
    content = message.get("content")
    assert isinstance(content, list), f"content {content!r}"
    ids = [_check_block(block) for block in content]
    tool_ids = [tool_id for tool_id in ids if tool_id is not None]
    assert len(tool_ids) == len(set(tool_ids)), f"tool_use ids twice: {tool_ids}"
    _check_stop(message.get("stop_reason"), bool(tool_ids))
    usage = message.get("usage")
    assert isinstance(usage, dict) and all(isinstance(v, int) and v >= 0 for v in usage.values())
    return message
