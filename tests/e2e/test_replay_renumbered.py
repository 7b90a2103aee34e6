"""docs/contract.md §5 end to end: a client that renumbers the ids of its history, as Copilot CLI
does on a Kimi model (every call becomes `functions.<name>:<n>`, n counted over the
conversation), against an upstream whose counter restarts every response.

The proxy's client ids, which carry the digest of the id the upstream first issued, never come
back, so a replay under the restarted counter (`functions.run_shell_command:0` where the
history says `:1`) matches neither form of SPEC §5 by id alone; it is recognized by the place
the call had among its turn's calls. The agent loop below runs through the real proxy on
loopback against the simulator's `replay-*-restarted` profiles; the controls run straight to the
simulator.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import openai
import pytest

from proxy.simulator import SimulatorLog
from tests.agent import TOOLS, AgentRun, _accumulate
from tests.e2e.test_replay import synthetic_answers, upstream_ids
from tests.servers import ServerThread


def renumbering_agent(
    server: ServerThread, model: str, *, stream: bool, max_steps: int = 8
) -> AgentRun:
    """The openai SDK agent loop, with the history's ids rewritten as Copilot CLI does: each
    call `functions.<name>:<n>` (n counted over the conversation), its result following."""
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="sk-test", max_retries=0)
    run = AgentRun(messages=[{"role": "user", "content": "Run the build steps."}])
    counter = 0
    for _ in range(max_steps):
        run.steps += 1
        if stream:
            message = _accumulate(
                client.chat.completions.create(
                    model=model,
                    messages=run.messages,  # type: ignore[arg-type]
                    tools=TOOLS,
                    stream=True,
                )
            )
        else:
            message = (
                client.chat.completions.create(
                    model=model,
                    messages=run.messages,  # type: ignore[arg-type]
                    tools=TOOLS,
                )
                .choices[0]
                .message
            )
        if not message.tool_calls:
            run.messages.append({"role": "assistant", "content": message.content or ""})
            run.final_text = message.content
            return run
        calls: list[dict[str, Any]] = []
        results: list[dict[str, Any]] = []
        for tc in message.tool_calls:
            renumbered = f"functions.{tc.function.name}:{counter}"
            counter += 1
            run.executed.append((tc.id, tc.function.name, tc.function.arguments))
            function = {"name": tc.function.name, "arguments": tc.function.arguments}
            calls.append({"id": renumbered, "type": "function", "function": function})
            content = f"executed {tc.function.name} {tc.function.arguments}"
            results.append({"role": "tool", "tool_call_id": renumbered, "content": content})
        run.messages.append(
            {"role": "assistant", "content": message.content or "", "tool_calls": calls}
        )
        run.messages.extend(results)
    return run


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
def test_a_restarted_replay_to_a_renumbering_client_runs_once(
    proxy: ServerThread, log: SimulatorLog, stream: bool
) -> None:
    run = renumbering_agent(proxy, "kimi-k2/replay-once-restarted", stream=stream)
    assert run.final_text == "All 3 rounds done."
    counts = Counter(run.calls)
    assert len(run.calls) == 3 and max(counts.values()) == 1, f"a replay was executed: {counts}"
    # the client's own ids went upstream in the Kimi dialect, the replay answered by the proxy
    (request,) = [r for r in log.requests if synthetic_answers(r)]
    restarted = "functions.run_shell_command:0"
    assert synthetic_answers(request)[0].startswith(f'Duplicate tool call id "{restarted}"')
    for sent in log.requests:
        ids = upstream_ids(sent)
        assert len(ids) == len(set(ids)), f"an upstream request repeats an id: {ids}"


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
def test_a_restarted_replay_loop_to_a_renumbering_client_stops_at_once(
    proxy: ServerThread, log: SimulatorLog, stream: bool
) -> None:
    with pytest.raises(openai.UnprocessableEntityError) as caught:
        renumbering_agent(proxy, "kimi-k2/replay-loop-restarted", stream=stream)
    error = caught.value.response.json()["error"]
    assert (error["type"], error["code"]) == ("loop_detected", "tool_call_replay_loop")
    # the message names the id the client holds for the call: its own renumbered one
    assert '"functions.run_shell_command:1"' in error["message"]
    # two rounds ran; the request that replays costs the upstream exactly two rounds
    assert len(log.requests) == 2 + 2


def test_control_without_the_proxy_the_renumbering_client_runs_the_replay_twice(
    simulator: ServerThread,
) -> None:
    run = renumbering_agent(simulator, "kimi-k2/replay-once-restarted", stream=False)
    assert max(Counter(run.calls).values()) == 2
