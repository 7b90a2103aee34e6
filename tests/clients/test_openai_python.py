"""The official openai Python SDK, sync and async, through the proxy: a hand-written tool loop
on `chat.completions.create` (not streaming, and streaming with chunks merged by `index`) and
on the `.stream()` helper (`get_final_completion()`, also with `stream_options.include_usage`),
against every quirky profile."""

from __future__ import annotations

from collections import Counter
from typing import Any

import openai
import pytest

from tests.agent import concatenate_stream
from tests.clients.common import (
    MAX_STEPS,
    PROFILES,
    REPLAY_LOOP,
    TOOL_SCHEMAS,
    USER_PROMPT,
    Loop,
    assert_loop_completes,
    assert_replay_loop_reported,
    assert_usage_reported,
    url,
)
from tests.servers import ServerThread

MODES = ["create", "create-stream", "stream-helper", "stream-usage"]
USAGE: Any = {"stream_options": {"include_usage": True}}
CONTROL_MODES = ["create", "create-stream", "stream-helper"]
Message = dict[str, Any]


def merge_chunks(loop: Loop, chunks: list[Any]) -> Message:
    """What hand-written stream consumers do: key calls by `index`, concatenate strings."""
    loop.usage.extend(chunk.usage.total_tokens for chunk in chunks if chunk.usage is not None)
    content, calls = concatenate_stream(chunks)
    return {"content": content, "tool_calls": calls}


def from_completion(loop: Loop, completion: Any) -> Message:
    if completion.usage is not None:
        loop.usage.append(completion.usage.total_tokens)
    message = completion.choices[0].message
    return {
        "content": message.content,
        "tool_calls": [
            {"id": tc.id, "name": tc.function.name, "arguments": tc.function.arguments}
            for tc in message.tool_calls or []
        ],
    }


def take_turn(loop: Loop, messages: list[Message], message: Message) -> bool:
    """Append the assistant message and run its calls; False once the model answered."""
    calls = message["tool_calls"]
    entry: Message = {"role": "assistant", "content": message["content"] or ""}
    if calls:
        entry["tool_calls"] = [
            {
                "id": c["id"],
                "type": "function",
                "function": {"name": c["name"], "arguments": c["arguments"]},
            }
            for c in calls
        ]
    messages.append(entry)
    if not calls:
        loop.final_text = message["content"]
        return False
    for c in calls:
        result = loop.execute(c["id"], c["name"], c["arguments"])
        messages.append({"role": "tool", "tool_call_id": c["id"], "content": result})
    return True


def sync_loop(base_url: str, model: str, mode: str) -> Loop:
    loop, messages = Loop(), [{"role": "user", "content": USER_PROMPT}]
    with openai.OpenAI(base_url=base_url, api_key="sk-test", max_retries=0, timeout=20) as client:
        request: Any = {"model": model, "messages": messages, "tools": TOOL_SCHEMAS}
        try:
            for _ in range(MAX_STEPS):
                loop.steps += 1
                if mode == "create":
                    completion = client.chat.completions.create(**request)
                    message = from_completion(loop, completion)
                elif mode == "create-stream":
                    chunks = client.chat.completions.create(**request, stream=True)
                    message = merge_chunks(loop, list(chunks))
                else:
                    options = USAGE if mode == "stream-usage" else {}
                    with client.chat.completions.stream(**request, **options) as stream:
                        message = from_completion(loop, stream.get_final_completion())
                if not take_turn(loop, messages, message):
                    break
        except Exception as exc:
            loop.fail(exc)
    return loop


async def async_loop(base_url: str, model: str, mode: str) -> Loop:
    loop, messages = Loop(), [{"role": "user", "content": USER_PROMPT}]
    async with openai.AsyncOpenAI(
        base_url=base_url, api_key="sk-test", max_retries=0, timeout=20
    ) as client:
        request: Any = {"model": model, "messages": messages, "tools": TOOL_SCHEMAS}
        try:
            for _ in range(MAX_STEPS):
                loop.steps += 1
                if mode == "create":
                    completion = await client.chat.completions.create(**request)
                    message = from_completion(loop, completion)
                elif mode == "create-stream":
                    chunks = await client.chat.completions.create(**request, stream=True)
                    message = merge_chunks(loop, [chunk async for chunk in chunks])
                else:
                    options = USAGE if mode == "stream-usage" else {}
                    async with client.chat.completions.stream(**request, **options) as stream:
                        completion = await stream.get_final_completion()
                    message = from_completion(loop, completion)
                if not take_turn(loop, messages, message):
                    break
        except Exception as exc:
            loop.fail(exc)
    return loop


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("profile", list(PROFILES))
def test_sync_loop_through_proxy(proxy: ServerThread, profile: str, mode: str) -> None:
    loop = sync_loop(url(proxy), profile, mode)
    assert_loop_completes(loop, profile)
    if mode in ("create", "stream-usage"):
        assert_usage_reported(loop)
    else:
        assert loop.usage == [], "a stream reports usage only when asked to"


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("profile", list(PROFILES))
async def test_async_loop_through_proxy(proxy: ServerThread, profile: str, mode: str) -> None:
    loop = await async_loop(url(proxy), profile, mode)
    assert_loop_completes(loop, profile)
    if mode in ("create", "stream-usage"):
        assert_usage_reported(loop)


@pytest.mark.parametrize("mode", MODES)
def test_sync_replay_loop_is_reported(proxy: ServerThread, mode: str) -> None:
    loop = sync_loop(url(proxy), REPLAY_LOOP, mode)
    assert_replay_loop_reported(loop)
    assert loop.error is not None, loop
    assert loop.error.startswith("UnprocessableEntityError:"), loop.error


@pytest.mark.parametrize("mode", MODES)
async def test_async_replay_loop_is_reported(proxy: ServerThread, mode: str) -> None:
    loop = await async_loop(url(proxy), REPLAY_LOOP, mode)
    assert_replay_loop_reported(loop)


# --- controls: the same loops straight to the simulator fail -------------------------------


@pytest.mark.parametrize("mode", CONTROL_MODES)
def test_control_kimi_ids_collide_without_proxy(simulator: ServerThread, mode: str) -> None:
    loop = sync_loop(url(simulator), "kimi", mode)
    assert loop.ids == ["functions.run_shell_command:0"] * 3


def test_control_stream_helper_raises_on_missing_index(simulator: ServerThread) -> None:
    loop = sync_loop(url(simulator), "no-index", "stream-helper")
    assert loop.error is not None and loop.error.startswith("TypeError: list indices"), loop
    assert loop.executed == []


async def test_control_async_stream_helper_merges_parallel_calls(simulator: ServerThread) -> None:
    loop = await async_loop(url(simulator), "index0-parallel", "stream-helper")
    # Two calls at index 0 become one call named after both, with both argument objects.
    assert loop.executed[0].name == "run_shell_commandread_file", loop
    assert loop.executed[0].arguments == '{"command":"echo round-1-0"}{"path":"echo round-1-1"}'


@pytest.mark.parametrize("mode", CONTROL_MODES)
def test_control_replay_loop_runs_the_command_repeatedly(
    simulator: ServerThread, mode: str
) -> None:
    loop = sync_loop(url(simulator), REPLAY_LOOP, mode)
    assert loop.error is None
    assert Counter(call.key for call in loop.executed).most_common(1)[0][1] == MAX_STEPS
