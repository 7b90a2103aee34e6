"""The OpenAI Agents SDK (openai-agents) through the proxy, on its chat-completions model
class: an `Agent` with two `@function_tool`s on `OpenAIChatCompletionsModel` with an
`AsyncOpenAI` client pointed at the proxy, run by `Runner.run` and `Runner.run_streamed`
(also with `ModelSettings(include_usage=True)`).
The SDK runs the tool loop itself; the tools record the call id from their `ToolContext`."""

from __future__ import annotations

from typing import Any

import openai
import pytest
from agents import (
    Agent,
    ModelSettings,
    OpenAIChatCompletionsModel,
    RunConfig,
    Runner,
    RunResult,
    RunResultStreaming,
    function_tool,
)
from agents.tool import FunctionTool
from agents.tool_context import ToolContext

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

MODES = ["run", "run-streamed", "run-streamed-usage"]
CONTROL_MODES = ["run", "run-streamed"]
# Traces would be exported to OpenAI's platform: off, the tests talk to loopback only.
RUN_CONFIG = RunConfig(tracing_disabled=True)


def make_tools(loop: Loop) -> list[FunctionTool]:
    @function_tool
    def run_shell_command(ctx: ToolContext[None], command: str) -> str:
        """Run a shell command."""
        return loop.execute(ctx.tool_call_id, "run_shell_command", {"command": command})

    @function_tool
    def read_file(ctx: ToolContext[None], path: str) -> str:
        """Read a file."""
        return loop.execute(ctx.tool_call_id, "read_file", {"path": path})

    return [run_shell_command, read_file]


async def run_agent(
    loop: Loop, agent: Agent[None], mode: str, run_config: RunConfig, **options: Any
) -> None:
    """Run `agent` on the prompt (`Runner.run`, or `Runner.run_streamed` for a `run-streamed*`
    mode) and record the outcome in `loop`; `options` go to the runner."""
    result: RunResult | RunResultStreaming
    try:
        if not mode.startswith("run-streamed"):
            result = await Runner.run(
                agent, USER_PROMPT, max_turns=MAX_STEPS, run_config=run_config, **options
            )
        else:
            streamed = Runner.run_streamed(
                agent, USER_PROMPT, max_turns=MAX_STEPS, run_config=run_config, **options
            )
            async for _event in streamed.stream_events():
                pass
            result = streamed
        loop.final_text = result.final_output
        loop.steps = len(result.raw_responses)
        loop.usage = [r.usage.total_tokens for r in result.raw_responses if r.usage.total_tokens]
    except Exception as exc:
        loop.fail(exc)


async def agent_loop(base_url: str, model: str, mode: str) -> Loop:
    loop = Loop()
    async with openai.AsyncOpenAI(
        base_url=base_url, api_key="sk-test", max_retries=0, timeout=20
    ) as client:
        agent = Agent(
            name="builder",
            instructions="Run the build steps with the tools.",
            tools=list(make_tools(loop)),
            model=OpenAIChatCompletionsModel(model=model, openai_client=client),
            model_settings=ModelSettings(include_usage=mode == "run-streamed-usage" or None),
        )
        await run_agent(loop, agent, mode, RUN_CONFIG)
    return loop


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("profile", list(PROFILES))
async def test_agent_through_proxy(proxy: ServerThread, profile: str, mode: str) -> None:
    loop = await agent_loop(url(proxy), profile, mode)
    assert_loop_completes(loop, profile)
    assert loop.steps == 4, "3 tool rounds and the answer, one model response each"
    if mode != "run-streamed":
        assert_usage_reported(loop)


@pytest.mark.parametrize("mode", MODES)
async def test_replay_loop_is_reported(proxy: ServerThread, mode: str) -> None:
    loop = await agent_loop(url(proxy), REPLAY_LOOP, mode)
    assert_replay_loop_reported(loop)
    # Streamed runs too: the loop trips before the stream's first byte (SPEC §5).
    assert loop.error is not None, loop
    assert loop.error.startswith("UnprocessableEntityError:"), loop.error


# --- controls: the same agent straight to the simulator fails -------------------------------


@pytest.mark.parametrize("mode", CONTROL_MODES)
@pytest.mark.parametrize("profile", ["kimi", "name-index", "index0-parallel"])
async def test_control_reused_ids_stop_the_agent(
    simulator: ServerThread, profile: str, mode: str
) -> None:
    loop = await agent_loop(url(simulator), profile, mode)
    assert loop.error is not None, loop
    assert loop.error.startswith("ModelBehaviorError: Model reused a completed tool call ID")
    assert loop.final_text is None


@pytest.mark.parametrize("mode", CONTROL_MODES)
async def test_control_empty_ids_stop_the_agent(simulator: ServerThread, mode: str) -> None:
    loop = await agent_loop(url(simulator), "empty-id", mode)
    assert loop.error is not None and "non-empty string call ID" in loop.error, loop
    assert loop.executed == []


@pytest.mark.parametrize("mode", CONTROL_MODES)
async def test_control_replay_ends_the_run_early(simulator: ServerThread, mode: str) -> None:
    """The SDK skips a call whose id it already ran and ends the run on that turn's text:
    rounds 2 and 3 never happen, and nothing is reported."""
    loop = await agent_loop(url(simulator), "replay-once", mode)
    assert loop.error is None
    assert loop.final_text == "Let me run that."
    assert len(loop.executed) == 1
