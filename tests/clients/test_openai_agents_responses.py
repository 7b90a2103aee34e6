"""The OpenAI Agents SDK (openai-agents) through the proxy on its default model, the Responses
API (SPEC §8): an `Agent` named by a model string, resolved by the SDK's `OpenAIProvider` with an
`AsyncOpenAI` client pointed at the proxy, run by `Runner.run` and `Runner.run_streamed`, and by
`Runner.run` chained with `previous_response_id` (a stored conversation upstream). The SDK runs
the tool loop itself, sending the whole history (`input` items) every turn unless chained; the
tools record the `call_id` from their `ToolContext`.

The controls run the same agent straight to the simulator: reused, empty and missing `call_id`s
and a stream without `response.completed` stop the run with the SDK's own `ModelBehaviorError`,
a replayed call is skipped and the run ends early on that turn's text, and a replay loop runs
until the SDK's `max_turns`.
"""

from __future__ import annotations

import openai
import pytest
from agents import Agent, RunConfig
from agents.models.openai_provider import OpenAIProvider

from proxy.simulator import SimulatorLog
from tests.clients.common import Loop, url
from tests.clients.responses_common import (
    REPLAY_LOOP,
    RESPONSES_PROFILES,
    assert_responses_loop_completes,
    assert_responses_loop_reported,
)
from tests.clients.test_openai_agents import make_tools, run_agent
from tests.servers import ServerThread

MODES = ["run", "run-streamed"]
# A stored conversation shows the proxy only each turn's new items, so it cannot tell a replay
# of an earlier turn (SPEC §8): the replaying profiles run stateless only. Nor can an output
# be handed back for a call the upstream stored without a `call_id`: no id would reach it.
CHAINED_PROFILES = [
    p for p in RESPONSES_PROFILES if "replay" not in p and p not in ("empty-id", "missing-id")
]


async def agent_loop(base_url: str, model: str, mode: str) -> Loop:
    loop = Loop()
    async with openai.AsyncOpenAI(
        base_url=base_url, api_key="sk-test", max_retries=0, timeout=20
    ) as client:
        # The provider's own choice of API (Responses unless told otherwise); traces would be
        # exported to OpenAI's platform, so they are off: the tests talk to loopback only.
        run_config = RunConfig(
            model_provider=OpenAIProvider(openai_client=client), tracing_disabled=True
        )
        agent = Agent(
            name="builder",
            instructions="Run the build steps with the tools.",
            tools=list(make_tools(loop)),
            model=model,
        )
        # Chained: each turn sends only its new items and `previous_response_id`.
        chained = mode == "run-chained"
        await run_agent(loop, agent, mode, run_config, auto_previous_response_id=chained)
    return loop


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("profile", list(RESPONSES_PROFILES))
async def test_agent_through_proxy(
    proxy: ServerThread, log: SimulatorLog, profile: str, mode: str
) -> None:
    loop = await agent_loop(url(proxy), profile, mode)
    assert_responses_loop_completes(loop, profile)
    assert loop.steps == 4, "3 tool rounds and the answer, one model response each"
    # Usage comes with response.completed; a stream the upstream left unfinished has none.
    if profile != "no-finish" or mode == "run":
        assert loop.usage and all(total > 0 for total in loop.usage), loop
    # The SDK's default model spoke Responses (not Chat Completions) to the upstream.
    assert set(log.paths) == {"/v1/responses"}, log.paths


@pytest.mark.parametrize("profile", CHAINED_PROFILES)
async def test_chained_agent_through_proxy(
    proxy: ServerThread, log: SimulatorLog, profile: str
) -> None:
    """`auto_previous_response_id`: every later turn hands back only the outputs of calls the
    upstream issued earlier, under the ids the proxy gave the client, and they must still pair
    with them (`call_{hex8}_{raw}` decodes back to the raw id, with no state in the proxy)."""
    loop = await agent_loop(url(proxy), profile, "run-chained")
    assert_responses_loop_completes(loop, profile)
    chained = [body for body in log.requests if body.get("previous_response_id")]
    assert len(chained) == 3 == len(log.requests) - 1, log.requests


@pytest.mark.parametrize("mode", MODES)
async def test_replay_loop_is_reported(proxy: ServerThread, mode: str) -> None:
    loop = await agent_loop(url(proxy), REPLAY_LOOP, mode)
    assert_responses_loop_reported(loop)
    assert loop.error is not None and loop.error.startswith("BadRequestError:"), loop.error


# --- controls: the same agent straight to the simulator fails -------------------------------


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("profile", ["kimi", "name-index"])
async def test_control_reused_ids_stop_the_agent(
    simulator: ServerThread, profile: str, mode: str
) -> None:
    loop = await agent_loop(url(simulator), profile, mode)
    assert loop.error is not None, loop
    assert loop.error.startswith("ModelBehaviorError: Model reused a completed tool call ID")
    assert loop.final_text is None


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("profile", ["empty-id", "missing-id"])
async def test_control_empty_ids_stop_the_agent(
    simulator: ServerThread, profile: str, mode: str
) -> None:
    loop = await agent_loop(url(simulator), profile, mode)
    assert loop.error is not None and "non-empty string call ID" in loop.error, loop
    assert loop.executed == []


async def test_control_stream_without_completion_stops_the_agent(simulator: ServerThread) -> None:
    loop = await agent_loop(url(simulator), "no-finish", "run-streamed")
    assert loop.error == "ModelBehaviorError: Model did not produce a final response!", loop
    assert loop.executed == []


@pytest.mark.parametrize("mode", MODES)
async def test_control_replay_ends_the_run_early(simulator: ServerThread, mode: str) -> None:
    """The SDK skips a call whose id it already ran and ends the run on that turn's text:
    rounds 2 and 3 never happen, and nothing is reported."""
    loop = await agent_loop(url(simulator), "replay-once", mode)
    assert loop.error is None
    assert loop.final_text == "Let me run that."
    assert len(loop.executed) == 1


@pytest.mark.parametrize("mode", MODES)
async def test_control_replay_loop_runs_to_max_turns(simulator: ServerThread, mode: str) -> None:
    """Each replay is skipped, so the command runs once, but nothing stops the loop: the
    upstream is asked again until `max_turns`, and the error names no loop."""
    loop = await agent_loop(url(simulator), REPLAY_LOOP, mode)
    assert loop.error is not None and loop.error.startswith("MaxTurnsExceeded"), loop
    assert len(loop.executed) == 1
