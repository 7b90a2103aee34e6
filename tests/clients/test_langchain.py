"""LangChain's `ChatOpenAI` (langchain-openai) through the proxy: `bind_tools` and the usual
tool loop (invoke the model, run each `tool_call` with `tool.invoke`, append the
`ToolMessage`), with `invoke`, `stream` (chunks summed), `ainvoke` and `astream` (with
`stream_usage=True`, so `stream_options.include_usage`)."""

from __future__ import annotations

from collections import Counter
from typing import Annotated, Any

import openai
import pytest
from langchain_core.messages import BaseMessage, HumanMessage
from langchain_core.tools import BaseTool, InjectedToolCallId, tool
from langchain_openai import ChatOpenAI
from pydantic import SecretStr

from tests.clients.common import (
    MAX_STEPS,
    PROFILES,
    REPLAY_LOOP,
    USER_PROMPT,
    Loop,
    assert_loop_completes,
    assert_replay_loop_reported,
    assert_usage_reported,
    url,
)
from tests.servers import ServerThread

MODES = ["invoke", "stream", "ainvoke", "astream"]


def make_tools(loop: Loop) -> list[BaseTool]:
    # LangChain injects the id of the call being run (it is not part of the model's schema).
    @tool
    def run_shell_command(command: str, call_id: Annotated[str, InjectedToolCallId]) -> str:
        """Run a shell command."""
        return loop.execute(call_id, "run_shell_command", {"command": command})

    @tool
    def read_file(path: str, call_id: Annotated[str, InjectedToolCallId]) -> str:
        """Read a file."""
        return loop.execute(call_id, "read_file", {"path": path})

    return [run_shell_command, read_file]


def chat_model(base_url: str, model: str, **options: Any) -> ChatOpenAI:
    return ChatOpenAI(
        model=model,
        base_url=base_url,
        api_key=SecretStr("sk-test"),
        max_retries=0,
        timeout=20,
        **options,
    )


def run_calls(loop: Loop, tools: list[BaseTool], messages: list[BaseMessage], ai: Any) -> bool:
    if ai.usage_metadata:
        loop.usage.append(ai.usage_metadata["total_tokens"])
    messages.append(ai)
    if not ai.tool_calls:
        loop.final_text = ai.content
        return False
    by_name = {t.name: t for t in tools}
    for call in ai.tool_calls:
        messages.append(by_name[call["name"]].invoke(call))  # a ToolMessage with the call's id
    return True


def sync_loop(base_url: str, model: str, mode: str) -> Loop:
    loop = Loop()
    tools = make_tools(loop)
    llm = chat_model(base_url, model).bind_tools(tools)
    messages: list[BaseMessage] = [HumanMessage(USER_PROMPT)]
    try:
        for _ in range(MAX_STEPS):
            loop.steps += 1
            if mode == "invoke":
                ai: Any = llm.invoke(messages)
            else:
                ai = None
                for chunk in llm.stream(messages):
                    ai = chunk if ai is None else ai + chunk
            if not run_calls(loop, tools, messages, ai):
                break
    except Exception as exc:
        loop.fail(exc)
    return loop


async def async_loop(base_url: str, model: str, mode: str) -> Loop:
    # ChatOpenAI caches its default async HTTP client per base URL, across event loops; each
    # test has its own loop, so it brings its own client (as apps with several loops do).
    async with openai.DefaultAsyncHttpxClient() as http:
        return await _async_loop(base_url, model, mode, http)


async def _async_loop(base_url: str, model: str, mode: str, http: Any) -> Loop:
    loop = Loop()
    tools = make_tools(loop)
    usage = {"stream_usage": True} if mode == "astream" else {}
    llm = chat_model(base_url, model, http_async_client=http, **usage).bind_tools(tools)
    messages: list[BaseMessage] = [HumanMessage(USER_PROMPT)]
    try:
        for _ in range(MAX_STEPS):
            loop.steps += 1
            if mode == "ainvoke":
                ai: Any = await llm.ainvoke(messages)
            else:
                ai = None
                async for chunk in llm.astream(messages):
                    ai = chunk if ai is None else ai + chunk
            if not run_calls(loop, tools, messages, ai):
                break
    except Exception as exc:
        loop.fail(exc)
    return loop


async def run(base_url: str, model: str, mode: str) -> Loop:
    if mode.startswith("a"):
        return await async_loop(base_url, model, mode)
    return sync_loop(base_url, model, mode)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("profile", list(PROFILES))
async def test_tool_loop_through_proxy(proxy: ServerThread, profile: str, mode: str) -> None:
    loop = await run(url(proxy), profile, mode)
    assert_loop_completes(loop, profile)
    if mode != "stream":
        assert_usage_reported(loop)


@pytest.mark.parametrize("mode", MODES)
async def test_replay_loop_is_reported(proxy: ServerThread, mode: str) -> None:
    loop = await run(url(proxy), REPLAY_LOOP, mode)
    assert_replay_loop_reported(loop)


# --- controls: the same loops straight to the simulator fail -------------------------------


def test_control_repeated_names_break_streamed_tool_calls(simulator: ServerThread) -> None:
    """Summed chunks concatenate a name sent on every delta: the tool lookup fails."""
    loop = sync_loop(url(simulator), "repeat-fields", "stream")
    assert loop.error == "KeyError: '" + "run_shell_command" * 5 + "'", loop
    assert loop.executed == []


@pytest.mark.filterwarnings("ignore::UserWarning")  # pydantic, on the object arguments
@pytest.mark.parametrize("mode", ["invoke", "stream"])
def test_control_object_arguments_fail_validation(simulator: ServerThread, mode: str) -> None:
    loop = sync_loop(url(simulator), "missing-id", mode)
    assert loop.error is not None and loop.error.startswith("ValidationError:"), loop
    assert "Input should be a valid string" in loop.error


def test_control_kimi_ids_collide(simulator: ServerThread) -> None:
    loop = sync_loop(url(simulator), "kimi", "invoke")
    assert loop.ids == ["functions.run_shell_command:0"] * 3


@pytest.mark.parametrize("mode", ["invoke", "astream"])
async def test_control_replay_loop_runs_the_command_repeatedly(
    simulator: ServerThread, mode: str
) -> None:
    loop = await run(url(simulator), REPLAY_LOOP, mode)
    assert loop.error is None and loop.final_text is None
    assert Counter(call.key for call in loop.executed).most_common(1)[0][1] == MAX_STEPS
