"""The simulator's enum options: `replay` and `replay_id` add a replay to any profile's quirks,
so the Chat-only thinking Kimi (`kimi-chat-only`, SPEC §9's bridged upstream) can replay once or
forever, under the history's id or a restarted counter."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import orjson
import pytest

from proxy.simulator import SimulatorLog, create_simulator_app, profile_for_model
from proxy.simulator.profiles import IdStyle, ReplayId, ReplayMode

JSON = dict[str, Any]
CHAT_ONLY = "kimi-k2/kimi-chat-only"
USER = {"role": "user", "content": "run the checks"}
ROUND1 = '{"command":"echo round-1-0"}'
ROUND2 = '{"command":"echo round-2-0"}'
REASONING = "I will run it."


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=create_simulator_app(SimulatorLog()))
    async with httpx.AsyncClient(transport=transport, base_url="http://sim") as c:
        yield c


def _turn(call_id: str, args: str, reasoning: str | None = REASONING) -> list[JSON]:
    call = {
        "id": call_id,
        "type": "function",
        "function": {"name": "run_shell_command", "arguments": args},
    }
    assistant: JSON = {"role": "assistant", "content": None, "tool_calls": [call]}
    if reasoning is not None:
        assistant["reasoning_content"] = reasoning
    return [assistant, {"role": "tool", "tool_call_id": call_id, "content": "ok"}]


def _history(reasoning: str | None = REASONING) -> list[JSON]:
    return [
        USER,
        *_turn("functions.run_shell_command:0", ROUND1, reasoning),
        *_turn("functions.run_shell_command:1", ROUND2, reasoning),
    ]


async def _answer(client: httpx.AsyncClient, model: str, messages: list[JSON]) -> httpx.Response:
    return await client.post(
        "/v1/chat/completions", json={"model": model, "messages": messages, "stream": False}
    )


def test_replay_options_combine_with_another_profile() -> None:
    once = profile_for_model(f"{CHAT_ONLY}+replay=once+replay_after=2")
    assert (once.name, once.chat_only, once.reasoning_required) == ("kimi-chat-only", True, True)
    assert (once.replay, once.replay_id, once.replay_after) == (
        ReplayMode.ONCE,
        ReplayId.HISTORY,
        2,
    )
    # A Kimi model's replay keeps Kimi's id shapes, as for the replay profiles themselves.
    assert once.id_style is IdStyle.KIMI_HISTORY
    loop = profile_for_model(f"{CHAT_ONLY}+replay=loop+replay_id=restarted")
    assert (loop.replay, loop.replay_id) == (ReplayMode.LOOP, ReplayId.RESTARTED)
    assert loop.id_style is IdStyle.KIMI_RESPONSE
    assert profile_for_model(CHAT_ONLY).replay is ReplayMode.NONE
    for bad in ("replay=twice", "replay_id=", "replay=ONCE", "replay"):
        with pytest.raises(ValueError, match="simulator option"):
            profile_for_model(f"{CHAT_ONLY}+{bad}")


async def test_the_chat_only_kimi_replays_with_its_reasoning_and_still_refuses_the_rest(
    client: httpx.AsyncClient,
) -> None:
    model = f"{CHAT_ONLY}+replay=once+replay_id=restarted+replay_after=2"
    answer = await _answer(client, model, _history())
    assert answer.status_code == 200, answer.text
    message = answer.json()["choices"][0]["message"]
    # Round 2's call again, under the restarted counter's `:0` (the history said `:1`).
    [call] = message["tool_calls"]
    assert call["id"] == "functions.run_shell_command:0"
    assert orjson.loads(call["function"]["arguments"]) == orjson.loads(ROUND2)
    assert message["reasoning_content"]  # still the thinking model
    # Still the thinking model that wants its reasoning back, and still Chat only.
    lost = await _answer(client, model, _history(reasoning=None))
    assert lost.status_code == 400 and "reasoning_content" in lost.text
    body = {"model": model, "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]}
    assert (await client.post("/v1/messages", json=body)).status_code == 404
    assert (
        await client.post("/v1/responses", json={"model": model, "input": "hi"})
    ).status_code == 404


async def test_a_chat_only_replay_loop_replays_every_turn(client: httpx.AsyncClient) -> None:
    model = f"{CHAT_ONLY}+replay=loop+replay_after=2"
    history = _history()
    for latest in (1, 2, 3):
        answer = await _answer(client, model, history)
        assert answer.status_code == 200, answer.text
        [call] = answer.json()["choices"][0]["message"]["tool_calls"]
        # Round 2's call under the id the history gave its latest copy, every turn.
        assert call["id"] == f"functions.run_shell_command:{latest}"
        assert orjson.loads(call["function"]["arguments"]) == orjson.loads(ROUND2)
        history += _turn(f"functions.run_shell_command:{latest + 1}", ROUND2)
