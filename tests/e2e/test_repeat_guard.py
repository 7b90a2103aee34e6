"""SPEC §10 end to end, on every surface: a model that re-issues the same call under a fresh id
every round, served by the real proxy on loopback and driven by each API's official SDK in an
agent loop that runs the tool.

Through the proxy the tool runs four times: after three identical rounds the last result
carries the note, the fifth identical call is answered by the proxy in a follow-up round, and
the model's sixth stops the response with `tool_call_repeat_loop`. Straight to the upstream the
loop runs until the test's bound. A polled tool (an exempt name) and a call whose result changes
run every time.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import anthropic
import httpx
import openai
import orjson
import pytest

from proxy.core.repeat import REPEAT_ANSWER
from tests.e2e.conftest import ProxyFactory
from tests.reliability.upstreams import SSE_HEADERS, Script, ScriptedUpstream
from tests.servers import ServerThread, serving

ARGS = {"command": "cat build.log"}
NOTE = "[toolcall-proxy] Note"
BOUND = 9  # the agent loop's rounds at most: past the proxy's stop, short of a runaway
_ids = itertools.count(1)


def _fresh(prefix: str) -> str:
    return f"{prefix}{next(_ids):08d}"


def _sse(events: list[tuple[str | None, dict[str, Any]]]) -> bytes:
    out = b""
    for name, data in events:
        out += (b"event: " + name.encode() + b"\n" if name else b"") + b"data: "
        out += orjson.dumps(data) + b"\n\n"
    return out


def _chat(name: str) -> bytes:
    head = {"id": "chatcmpl-r", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    call = {
        "index": 0,
        "id": _fresh("call_"),
        "type": "function",
        "function": {"name": name, "arguments": orjson.dumps(ARGS).decode()},
    }
    chunks = [
        {**head, "choices": [{"index": 0, "delta": {"role": "assistant", "tool_calls": [call]}}]},
        {**head, "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
    ]
    return _sse([(None, c) for c in chunks]) + b"data: [DONE]\n\n"


def _anthropic(name: str) -> bytes:
    message = {
        "id": "msg_r",
        "type": "message",
        "role": "assistant",
        "model": "m",
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 1, "output_tokens": 1},
    }
    block = {"type": "tool_use", "id": _fresh("toolu_"), "name": name, "input": {}}
    delta = {"type": "input_json_delta", "partial_json": orjson.dumps(ARGS).decode()}
    events: list[tuple[str | None, dict[str, Any]]] = [
        ("message_start", {"type": "message_start", "message": message}),
        (
            "content_block_start",
            {"type": "content_block_start", "index": 0, "content_block": block},
        ),
        ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": "tool_use", "stop_sequence": None},
                "usage": {"output_tokens": 5},
            },
        ),
        ("message_stop", {"type": "message_stop"}),
    ]
    return _sse(events)


def _responses(name: str) -> bytes:
    item = {
        "type": "function_call",
        "id": _fresh("fc_"),
        "call_id": _fresh("call_"),
        "name": name,
        "arguments": orjson.dumps(ARGS).decode(),
        "status": "completed",
    }
    response = {
        "id": "resp_r",
        "object": "response",
        "created_at": 1,
        "model": "m",
        "status": "in_progress",
        "output": [],
    }
    added = {**item, "arguments": "", "status": "in_progress"}
    events = [
        {"type": "response.created", "response": response},
        {"type": "response.output_item.added", "output_index": 0, "item": added},
        {
            "type": "response.function_call_arguments.done",
            "output_index": 0,
            "item_id": item["id"],
            "arguments": item["arguments"],
        },
        {"type": "response.output_item.done", "output_index": 0, "item": item},
        {
            "type": "response.completed",
            "response": {**response, "status": "completed", "output": [item]},
        },
    ]
    numbered = [(e["type"], {**e, "sequence_number": n}) for n, e in enumerate(events)]
    return _sse(numbered)  # type: ignore[arg-type]


_GRAMMARS = {"/v1/chat/completions": _chat, "/v1/messages": _anthropic, "/v1/responses": _responses}


@dataclass
class RepeatingModel(ScriptedUpstream):
    """An upstream whose model calls `tool` with the same arguments, under a fresh id, on
    every request (ScriptedUpstream records what it was sent)."""

    tool: str = "run_shell"

    def pick(self, path: str, stream: bool) -> Script:
        return Script(headers=SSE_HEADERS, pieces=(_GRAMMARS[path](self.tool),))

    @property
    def requests(self) -> list[dict[str, Any]]:
        return [orjson.loads(seen.body) for seen in self.seen]


@pytest.fixture()
def model(request: pytest.FixtureRequest) -> Iterator[tuple[RepeatingModel, ServerThread]]:
    upstream = RepeatingModel(tool=getattr(request, "param", "run_shell"))
    with serving(upstream) as server:
        yield upstream, server


@dataclass
class Loop:
    """What an agent loop did: tool runs, and the error that ended it (None: the bound)."""

    runs: int = 0
    error: Exception | None = None
    results: Iterator[str] = field(default_factory=lambda: itertools.repeat("build ok"))


def _chat_loop(base_url: str, tool: str, loop: Loop) -> None:
    client = openai.OpenAI(base_url=base_url, api_key="k", max_retries=0)
    messages: list[Any] = [{"role": "user", "content": "Is the build done?"}]
    tools = [{"type": "function", "function": {"name": tool, "parameters": {"type": "object"}}}]
    for _ in range(BOUND):
        stream = client.chat.completions.create(
            model="m", messages=messages, tools=tools, stream=True
        )
        calls: dict[int, Any] = {}
        for chunk in stream:
            for delta in chunk.choices[0].delta.tool_calls or [] if chunk.choices else []:
                calls.setdefault(delta.index, delta)
        assistant = [c.model_dump(exclude_none=True) for c in calls.values()]
        messages.append({"role": "assistant", "content": None, "tool_calls": assistant})
        for call in calls.values():
            loop.runs += 1
            messages.append(
                {"role": "tool", "tool_call_id": call.id, "content": next(loop.results)}
            )


def _anthropic_loop(base_url: str, tool: str, loop: Loop) -> None:
    client = anthropic.Anthropic(base_url=base_url, api_key="k", max_retries=0)
    messages: list[Any] = [{"role": "user", "content": "Is the build done?"}]
    tools = [{"name": tool, "input_schema": {"type": "object"}}]
    for _ in range(BOUND):
        with client.messages.stream(
            model="m", max_tokens=100, messages=messages, tools=tools
        ) as stream:
            final = stream.get_final_message()
        messages.append({"role": "assistant", "content": [b.model_dump() for b in final.content]})
        results = []
        for block in final.content:
            if block.type == "tool_use":
                loop.runs += 1
                results.append(
                    {"type": "tool_result", "tool_use_id": block.id, "content": next(loop.results)}
                )
        messages.append({"role": "user", "content": results})


def _responses_loop(base_url: str, tool: str, loop: Loop) -> None:
    client = openai.OpenAI(base_url=base_url, api_key="k", max_retries=0)
    items: list[Any] = [{"role": "user", "content": "Is the build done?"}]
    tools = [{"type": "function", "name": tool, "parameters": {"type": "object"}}]
    for _ in range(BOUND):
        with client.responses.stream(model="m", input=items, tools=tools, store=False) as stream:  # type: ignore[call-overload]
            final = stream.get_final_response()
        for item in final.output:
            items.append(item.model_dump(exclude_none=True))
            if item.type == "function_call":
                loop.runs += 1
                items.append(
                    {
                        "type": "function_call_output",
                        "call_id": item.call_id,
                        "output": next(loop.results),
                    }
                )


LOOPS = {
    "chat": ("/v1", _chat_loop, openai.APIError),
    "anthropic": ("", _anthropic_loop, anthropic.APIError),
    "responses": ("/v1", _responses_loop, openai.APIError),
}
SURFACES = list(LOOPS)


def _run(server_url: str, surface: str, tool: str, loop: Loop | None = None) -> Loop:
    suffix, drive, error = LOOPS[surface]
    loop = loop or Loop()
    try:
        drive(server_url + suffix, tool, loop)
    except error as exc:
        loop.error = exc
    return loop


def _tool_results(request: dict[str, Any]) -> list[str]:
    """The text of every tool result in an upstream request, whatever its surface."""
    out = []
    for m in request.get("messages") or []:
        if m.get("role") == "tool":
            out.append(str(m.get("content")))
        for block in m.get("content") if isinstance(m.get("content"), list) else []:
            if isinstance(block, dict) and block.get("type") == "tool_result":
                out.append(str(block.get("content")))
    for item in request.get("input") or []:
        if isinstance(item, dict) and item.get("type") == "function_call_output":
            out.append(str(item.get("output")))
    return out


@pytest.mark.parametrize("surface", SURFACES)
def test_a_call_repeated_under_fresh_ids_runs_four_times_then_stops(
    make_proxy: ProxyFactory, model: tuple[RepeatingModel, ServerThread], surface: str
) -> None:
    upstream, server = model
    with make_proxy(upstream=server.url + "/v1") as proxy:
        loop = _run(proxy.url, surface, upstream.tool)
    assert loop.runs == 4, f"the tool ran {loop.runs} times"
    assert loop.error is not None, "the loop did not stop"
    text = str(loop.error)
    assert "tool_call_repeat_loop" in text or "Tool-call repeat loop detected" in text, text
    # What the model read: no note before three identical rounds, the note from then on (in
    # the last tool result, never a message of its own), and the proxy's own answer once.
    noted = [[NOTE in r for r in _tool_results(request)] for request in upstream.requests]
    assert noted[:5] == [[], [False], [False, False], [False, False, True], [False] * 3 + [True]]
    assert noted[5] == [False] * 3 + [True, False]  # the follow-up: the note, then the answer
    followup = _tool_results(upstream.requests[-1])[-1]
    assert followup.startswith(REPEAT_ANSWER.split('"', 1)[0]), followup
    assert "cat build.log" not in "".join(_tool_results(upstream.requests[3])[-1:])


def _last_result(request: dict[str, Any]) -> str:
    results = _tool_results(request)
    return results[-1] if results else ""


@pytest.mark.parametrize("surface", SURFACES)
def test_control_straight_to_the_upstream_the_call_runs_until_the_bound(
    model: tuple[RepeatingModel, ServerThread], surface: str
) -> None:
    upstream, server = model
    loop = _run(server.url, surface, upstream.tool)
    assert loop.runs == BOUND and loop.error is None


@pytest.mark.parametrize("model", ["wait_for_build"], indirect=True)
@pytest.mark.parametrize("surface", SURFACES)
def test_a_polled_tool_runs_every_time(
    make_proxy: ProxyFactory, model: tuple[RepeatingModel, ServerThread], surface: str
) -> None:
    upstream, server = model
    with make_proxy(upstream=server.url + "/v1") as proxy:
        loop = _run(proxy.url, surface, upstream.tool)
    assert loop.runs == BOUND and loop.error is None
    assert not any(NOTE in _last_result(r) for r in upstream.requests)


def test_a_call_whose_result_changes_runs_every_time(
    make_proxy: ProxyFactory, model: tuple[RepeatingModel, ServerThread]
) -> None:
    upstream, server = model
    changing = Loop(results=(f"{n} lines" for n in itertools.count()))
    with make_proxy(upstream=server.url + "/v1") as proxy:
        loop = _run(proxy.url, "chat", upstream.tool, changing)
    assert loop.runs == BOUND and loop.error is None


@pytest.mark.parametrize(("mode", "runs"), [("note", BOUND), ("off", BOUND)])
def test_the_route_can_only_note_or_turn_the_guard_off(
    make_proxy: ProxyFactory, model: tuple[RepeatingModel, ServerThread], mode: str, runs: int
) -> None:
    upstream, server = model
    with make_proxy(upstream=server.url + "/v1", repeat_guard=mode) as proxy:
        loop = _run(proxy.url, "chat", upstream.tool)
    assert loop.runs == runs and loop.error is None
    noted = any(NOTE in _last_result(r) for r in upstream.requests)
    assert noted is (mode == "note")


def test_metrics_count_each_action(
    make_proxy: ProxyFactory, model: tuple[RepeatingModel, ServerThread]
) -> None:
    upstream, server = model
    with make_proxy(upstream=server.url + "/v1") as proxy:
        _run(proxy.url, "chat", upstream.tool)
        metrics = httpx.get(proxy.url + "/metrics").text
    for action, count in (("note", 2), ("blocked", 1), ("stopped", 1)):
        line = f'toolcall_proxy_repeats_total{{action="{action}",surface="chat_completions"}}'
        assert f"{line} {float(count)}" in metrics, (action, metrics)
