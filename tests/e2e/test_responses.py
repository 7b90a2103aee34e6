"""SPEC §8 end to end on OpenAI Responses: the real `openai` SDK through the real proxy on
loopback, against simulator profiles that misbehave as Responses servers do. Each run has a
control straight to the simulator that fails the same assertion."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import httpx
import openai
import orjson
import pytest

from proxy.simulator import SimulatorLog
from tests.reliability.upstreams import SSE_HEADERS, Script, scripted
from tests.servers import ServerThread

TOOLS: list[Any] = [
    {
        "type": "function",
        "name": "run_shell_command",
        "description": "Run a shell command",
        "parameters": {
            "type": "object",
            "properties": {"command": {"type": "string"}},
            "required": ["command"],
        },
    }
]
MAX_TURNS = 8


def client(server: ServerThread) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key="sk-test", max_retries=0)


@dataclass
class LoopRun:
    final_text: str | None = None
    call_ids: list[str] = field(default_factory=list)
    executed: list[str] = field(default_factory=list)  # each command the tool really ran
    response_ids: list[str] = field(default_factory=list)


def _respond(api: openai.OpenAI, stream: bool, **kwargs: Any) -> Any:
    if not stream:
        return api.responses.create(**kwargs)
    with api.responses.stream(**kwargs) as events:
        for _ in events:
            pass
        return events.get_final_response()


def tool_loop(
    api: openai.OpenAI,
    model: str,
    *,
    stream: bool,
    chain: bool = False,
    conversation: str | None = None,
) -> LoopRun:
    """An agent loop: run every function call, send the outputs back, until a text answer.
    `chain`: a stored conversation (`previous_response_id`, only new items sent); with a
    `conversation` id, only new items too; else the whole history every turn, as Codex does
    with `store: false`."""
    chain = chain or conversation is not None
    run = LoopRun()
    history: list[Any] = [{"role": "user", "content": "Do the task."}]
    new_items: list[Any] = list(history)
    previous: str | None = None
    for _ in range(MAX_TURNS):
        extra: dict[str, Any] = {"previous_response_id": previous} if previous else {}
        if conversation is not None:
            extra = {"conversation": conversation}
        items = new_items if chain else history
        response = _respond(api, stream, model=model, tools=TOOLS, input=items, **extra)
        run.response_ids.append(response.id)
        calls = [item for item in response.output if item.type == "function_call"]
        if not calls:
            run.final_text = response.output_text
            return run
        outputs = []
        for call in calls:
            run.call_ids.append(call.call_id)
            run.executed.append(call.arguments)
            outputs.append(
                {"type": "function_call_output", "call_id": call.call_id, "output": "done"}
            )
        history += [_as_input(item) for item in response.output] + outputs
        new_items = outputs
        previous = response.id if chain and conversation is None else None
    return run


def _as_input(item: Any) -> dict[str, Any]:
    if item.type == "function_call":
        return {
            "type": "function_call",
            "id": item.id,
            "call_id": item.call_id,
            "name": item.name,
            "arguments": item.arguments,
        }
    return {"role": "assistant", "content": "".join(c.text for c in item.content)}


# -- responses.create, non-streaming -----------------------------------------------------------


def test_create_tool_loop_with_missing_call_ids(proxy: ServerThread) -> None:
    """Calls without a `call_id`: through the proxy each gets one and the loop finishes."""
    run = tool_loop(client(proxy), "missing-id", stream=False)
    assert run.final_text == "All 3 rounds done."
    assert len(set(run.call_ids)) == 3 and all(run.call_ids)


def test_create_control_without_the_proxy_fails(simulator: ServerThread) -> None:
    with pytest.raises(openai.BadRequestError, match="call_id"):
        tool_loop(client(simulator), "missing-id", stream=False)


# -- responses.stream and its final response -------------------------------------------------


@pytest.mark.parametrize("profile", ["no-finish", "no-done-events", "no-item-ids", "final-flush"])
def test_stream_final_response_with_a_quirky_stream(proxy: ServerThread, profile: str) -> None:
    api = client(proxy)
    with api.responses.stream(model=profile, tools=TOOLS, input="Do the task.") as events:
        seen = [event.type for event in events]
        final = events.get_final_response()
    assert seen[0] == "response.created" and seen[-1] == "response.completed"
    (call,) = [item for item in final.output if item.type == "function_call"]
    assert call.arguments == '{"command":"echo round-1-0"}'
    assert call.id and call.call_id.startswith("call_")


def test_stream_control_without_the_proxy_fails(simulator: ServerThread) -> None:
    api = client(simulator)
    with api.responses.stream(model="no-finish", tools=TOOLS, input="Do the task.") as events:
        for _ in events:
            pass
        with pytest.raises(RuntimeError, match=r"response\.completed"):
            events.get_final_response()


# -- a tool loop with the whole history every turn (Codex's `store: false`) ------------------


@pytest.mark.parametrize("stream", [True, False])
def test_tool_loop_with_restarted_call_ids(
    proxy: ServerThread, log: SimulatorLog, stream: bool
) -> None:
    """Kimi's `functions.run_shell_command:0` every response: the client gets unique ids, the
    upstream its own dialect with a steady counter, and no request repeats an id."""
    run = tool_loop(client(proxy), "kimi", stream=stream)
    assert run.final_text == "All 3 rounds done."
    assert len(set(run.call_ids)) == len(run.call_ids) == 3
    sent = [i["call_id"] for i in log.requests[-1]["input"] if i.get("type") == "function_call"]
    assert sent == [f"functions.run_shell_command:{k}" for k in range(3)]


def test_tool_loop_control_without_the_proxy_fails(simulator: ServerThread) -> None:
    with pytest.raises(openai.BadRequestError, match="Duplicate call_id"):
        tool_loop(client(simulator), "kimi", stream=True)


@pytest.mark.parametrize("stream", [True, False])
def test_replayed_call_runs_once(proxy: ServerThread, stream: bool) -> None:
    run = tool_loop(client(proxy), "replay-once", stream=stream)
    assert run.final_text == "All 3 rounds done."
    assert len(run.executed) == len(set(run.executed)) == 3, run.executed


def test_replayed_call_control_runs_twice(simulator: ServerThread) -> None:
    run = tool_loop(client(simulator), "replay-once", stream=True)
    assert len(run.executed) != len(set(run.executed)), "the control must run a call twice"


@pytest.mark.parametrize("stream", [True, False])
def test_replay_loop_ends_with_a_final_error(proxy: ServerThread, stream: bool) -> None:
    """A 400 (Codex and the SDKs do not retry it) naming the loop, before any byte."""
    with pytest.raises(openai.BadRequestError) as caught:
        tool_loop(client(proxy), "replay-loop", stream=stream)
    assert caught.value.code == "tool_call_replay_loop" and caught.value.type == "loop_detected"
    body = caught.value.body
    assert isinstance(body, dict) and body["message"].startswith("Tool-call replay loop detected")


def test_replay_loop_control_never_ends(simulator: ServerThread) -> None:
    run = tool_loop(client(simulator), "replay-loop", stream=True)
    assert run.final_text is None and len(run.executed) == MAX_TURNS


# -- a stored conversation: previous_response_id ---------------------------------------------


@pytest.mark.parametrize("stream", [True, False])
def test_chain_with_previous_response_id(
    proxy: ServerThread, log: SimulatorLog, stream: bool
) -> None:
    """Only outputs are sent; the proxy decodes `call_{hex8}_{raw}` back to the id the
    upstream issued, with no state of its own, and the client's ids never repeat."""
    run = tool_loop(client(proxy), "kimi", stream=stream, chain=True)
    assert run.final_text == "All 3 rounds done."
    assert len(set(run.call_ids)) == len(run.call_ids) == 3, run.call_ids
    outputs = [r["input"][0]["call_id"] for r in log.requests[1:]]
    assert outputs == ["functions.run_shell_command:0"] * 3


def test_chain_control_without_the_proxy_repeats_ids(simulator: ServerThread) -> None:
    run = tool_loop(client(simulator), "kimi", stream=True, chain=True)
    assert run.final_text == "All 3 rounds done."
    assert len(set(run.call_ids)) < len(run.call_ids), run.call_ids


# -- QUIRKS.md: raw Kimi markers as output_text; outputs that name an id the server never issued


def test_leaked_kimi_markup_becomes_a_function_call(proxy: ServerThread) -> None:
    response = client(proxy).responses.create(model="leak-kimi", tools=TOOLS, input="Go.")
    (call,) = [item for item in response.output if item.type == "function_call"]
    assert call.name == "run_shell_command" and call.call_id.startswith("call_")
    assert "<|tool_call" not in response.output_text


def test_leaked_kimi_markup_control_is_only_text(simulator: ServerThread) -> None:
    response = client(simulator).responses.create(model="leak-kimi", tools=TOOLS, input="Go.")
    assert not [item for item in response.output if item.type == "function_call"]
    assert "<|tool_call_begin|>" in response.output_text


def test_stored_output_under_the_client_id_reaches_the_upstream_as_issued(
    proxy: ServerThread, simulator: ServerThread
) -> None:
    """The control sends the client id the proxy gave straight to the stored conversation:
    the server never issued it ("No tool call found"). Through the proxy it decodes."""
    first = client(proxy).responses.create(model="kimi", tools=TOOLS, input="Go.")
    (call,) = [item for item in first.output if item.type == "function_call"]
    output = [{"type": "function_call_output", "call_id": call.call_id, "output": "done"}]
    with pytest.raises(openai.BadRequestError, match="No tool call found"):
        client(simulator).responses.create(
            model="kimi", tools=TOOLS, input=output, previous_response_id=first.id
        )
    second = client(proxy).responses.create(
        model="kimi", tools=TOOLS, input=output, previous_response_id=first.id
    )
    assert second.status == "completed"


def test_replay_loop_after_visible_text_ends_the_stream_with_response_failed(
    proxy: ServerThread,
) -> None:
    """The model writes text, then loops: the stream had begun, so the loop is a
    `response.failed` with `invalid_prompt` (what Codex stops on), never `response.completed`."""
    api = client(proxy)
    first = api.responses.create(model="replay-loop-chatty", tools=TOOLS, input="Go.")
    (call,) = [item for item in first.output if item.type == "function_call"]
    history = [
        {"role": "user", "content": "Go."},
        *(_as_input(item) for item in first.output),
        {"type": "function_call_output", "call_id": call.call_id, "output": "done"},
    ]
    with api.responses.stream(model="replay-loop-chatty", tools=TOOLS, input=history) as events:
        seen = list(events)
        with pytest.raises(RuntimeError, match=r"response\.completed"):
            events.get_final_response()
    types = [event.type for event in seen]
    assert "response.output_text.delta" in types and "response.completed" not in types
    failed = seen[-1]
    assert failed.type == "response.failed" and failed.response.error is not None
    assert failed.response.error.code == "invalid_prompt"
    assert failed.response.error.message.startswith("Tool-call replay loop detected")
    assert "tool_call_replay_loop" in failed.response.error.message


def test_other_responses_paths_pass_through(proxy: ServerThread, log: SimulatorLog) -> None:
    """Only `POST /responses` is repaired; the simulator has no stored-response routes, so its
    own 404 comes back unchanged, path and method as sent."""
    with httpx.Client(base_url=proxy.url + "/v1", timeout=10) as http:
        got = http.get("/responses/resp_123/input_items?limit=2")
        cancel = http.post("/responses/resp_123/cancel", json={})
    assert got.status_code == cancel.status_code == 404
    assert got.json()["error"]["message"] == "Invalid URL (GET /v1/responses/resp_123/input_items)"
    assert "POST /v1/responses/resp_123/cancel" in cancel.json()["error"]["message"]
    assert log.paths[-2:] == ["/v1/responses/resp_123/input_items", "/v1/responses/resp_123/cancel"]


@pytest.mark.parametrize("stream", [True, False])
def test_conversation_with_restarted_call_ids(
    proxy: ServerThread, log: SimulatorLog, stream: bool
) -> None:
    """A `conversation`: like `previous_response_id`, only outputs go up, decoded to the ids
    the upstream issued; the client's ids never repeat."""
    run = tool_loop(client(proxy), "kimi", stream=stream, conversation=f"conv_proxy_{stream}")
    assert run.final_text == "All 3 rounds done."
    assert len(set(run.call_ids)) == len(run.call_ids) == 3, run.call_ids
    assert [r["input"][0]["call_id"] for r in log.requests[1:]] == [
        "functions.run_shell_command:0"
    ] * 3


def test_conversation_control_without_the_proxy_repeats_ids(simulator: ServerThread) -> None:
    run = tool_loop(client(simulator), "kimi", stream=True, conversation="conv_control")
    assert run.final_text == "All 3 rounds done."
    assert len(set(run.call_ids)) < len(run.call_ids), run.call_ids


@pytest.mark.parametrize(
    "body", [b"not json", b"[1]", b'{"model": "kimi", "input": 5}', b'{"input": {"a": 1}}']
)
def test_bad_bodies_get_a_400_and_nothing_goes_upstream(
    proxy: ServerThread, log: SimulatorLog, body: bytes
) -> None:
    with httpx.Client(base_url=proxy.url + "/v1", timeout=10) as http:
        answer = http.post("/responses", content=body)
    assert answer.status_code == 400
    assert answer.json()["error"]["type"] == "invalid_request_error"
    assert log.paths == []


def test_upstream_break_mid_stream_ends_with_response_failed(proxy: ServerThread) -> None:
    """SPEC §6 in Responses' grammar: the transport broke after bytes went out."""
    api = client(proxy)
    with api.responses.stream(model="fault-reset", tools=TOOLS, input="Go.") as events:
        seen = list(events)
    assert seen[0].type == "response.created"
    failed = seen[-1]
    assert failed.type == "response.failed" and failed.response.error is not None
    assert failed.response.error.code == "upstream_stream_error"
    numbers = [event.sequence_number for event in seen]
    assert numbers == sorted(set(numbers))


# -- SPEC §8: every field no rule names reaches the client as the upstream sent it -----------

PROGRAM_CALL = {
    "type": "function_call",
    "id": "fc_prog",
    "call_id": "call_abcDEF123",
    "name": "run_shell_command",
    "arguments": '{"command":"ls"}',
    "status": "in_progress",  # program-made calls stay in progress (QUIRKS.md)
    "caller": {"type": "program", "caller_id": "prog_1"},
}
REASONING = {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "enc-old"}


def _sse(kind: str, n: int, **fields: Any) -> bytes:
    data = orjson.dumps({"type": kind, "sequence_number": n, **fields})
    return b"event: " + kind.encode() + b"\ndata: " + data + b"\n\n"


def _program_stream() -> bytes:
    """A reasoning item whose final `encrypted_content` is newer than its streamed one, then
    a program-made call the upstream keeps `in_progress` everywhere."""
    head = {"id": "resp_up", "object": "response", "created_at": 1, "model": "m"}
    added = {**PROGRAM_CALL, "arguments": ""}
    ref = {"item_id": "fc_prog", "output_index": 1}
    final = {
        **head,
        "status": "completed",
        "output": [{**REASONING, "encrypted_content": "enc-new"}, PROGRAM_CALL],
        "usage": {"input_tokens": 3, "output_tokens": 2, "total_tokens": 5},
    }
    events = [
        _sse("response.created", 0, response={**head, "status": "in_progress", "output": []}),
        _sse("response.output_item.added", 1, output_index=0, item=REASONING),
        _sse("response.output_item.done", 2, output_index=0, item=REASONING),
        _sse("response.output_item.added", 3, output_index=1, item=added),
        _sse("response.function_call_arguments.delta", 4, **ref, delta=PROGRAM_CALL["arguments"]),
        _sse(
            "response.function_call_arguments.done", 5, **ref, arguments=PROGRAM_CALL["arguments"]
        ),
        _sse("response.output_item.done", 6, output_index=1, item=PROGRAM_CALL),
        _sse("response.completed", 7, response=final),
    ]
    return b"".join(events)


@pytest.mark.parametrize("stream", [True, False])
def test_final_response_items_are_the_upstreams(make_proxy: Any, stream: bool) -> None:
    """The SDK's final response through the proxy holds the same items as straight from the
    upstream: the call's `status` and `caller`, the reasoning item's newest
    `encrypted_content` (the one the next turn must send back)."""
    if stream:
        script = Script(headers=SSE_HEADERS, pieces=(_program_stream(),))
    else:
        body = {
            "id": "resp_up",
            "object": "response",
            "created_at": 1,
            "model": "m",
            "status": "completed",
            "output": [{**REASONING, "encrypted_content": "enc-new"}, PROGRAM_CALL],
        }
        script = Script(pieces=(orjson.dumps(body),))
    with (
        scripted({"/v1/responses": script}) as (upstream, _),
        make_proxy(upstream=upstream.url + "/v1") as server,
    ):
        through = _respond(client(server), stream, model="m", tools=TOOLS, input="Go.")
        direct = _respond(client(upstream), stream, model="m", tools=TOOLS, input="Go.")
    mine = [item.model_dump() for item in through.output]
    assert mine == [item.model_dump() for item in direct.output]
    assert mine[0]["encrypted_content"] == "enc-new"
    assert mine[1]["status"] == "in_progress"
    assert mine[1]["caller"] == {"type": "program", "caller_id": "prog_1"}
