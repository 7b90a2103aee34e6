"""Claude Code (Anthropic Messages) and Codex CLI (Responses) through a bridged route (SPEC §9):
the proxy started with `--upstream-api chat_completions` in front of a Kimi served over Chat
Completions alone (the simulator's `kimi-chat-only`: `/messages` and `/responses` answer 404, its
`functions.{name}:{n}` ids restart every response, and it refuses a history whose tool-call turns
lost their `reasoning_content`), replaying the shell command once or forever, under the id the
history has or under one from a counter that restarts every response.

Through the bridge each agent ends on its own, the replayed command runs exactly once (the log it
appends to has one line), a replay loop ends with the client's own loop error, which it does not
retry, the upstream sees only Chat Completions requests with no id twice and with every tool-call
turn's reasoning sent back. The controls point the same agents at the same upstream without the
bridge (the proxy with each client's own API upstream, and no proxy at all): the upstream answers
404 and the command never runs. A recorded request with its reasoning taken out is refused,
which is what a bridge that lost the reasoning would have sent.
"""

from __future__ import annotations

import json

import httpx
import pytest

from proxy.simulator import create_simulator_app
from proxy.simulator.profiles import PROFILES
from tests.agents.agents import JSON
from tests.agents.runs import Cell, Run, RunKey
from tests.agents.test_agents import routes
from tests.servers import serving

Runs = dict[RunKey, Run]
CHAT_ONLY = "kimi-k2/kimi-chat-only"
REASONING = PROFILES["kimi-chat-only"].reasoning  # what the thinking model says before a call
# Every cell's shell command is round 2 (`replay_after=2`): a replay re-emits it.
BRIDGED_CELLS = (
    Cell("normal", "-", CHAT_ONLY),
    Cell("replay-once", "history", f"{CHAT_ONLY}+replay=once+replay_after=2"),
    Cell("replay-once", "restarted", f"{CHAT_ONLY}+replay=once+replay_id=restarted+replay_after=2"),
    Cell("replay-forever", "history", f"{CHAT_ONLY}+replay=loop+replay_after=2"),
    Cell(
        "replay-forever",
        "restarted",
        f"{CHAT_ONLY}+replay=loop+replay_id=restarted+replay_after=2",
    ),
)
NORMAL = BRIDGED_CELLS[0]
CHAT_PATH = "/v1/chat/completions"
# The path each bridged agent's requests take, which the Chat-only upstream does not serve.
CLIENT_PATH = {"claude-code": "/v1/messages", "codex": "/v1/responses"}
DUPLICATE_NOTE = "Duplicate tool call id"  # SPEC §5's synthetic answer to a replay

agents = pytest.mark.parametrize("agent", sorted(CLIENT_PATH))
cells = pytest.mark.parametrize("cell", BRIDGED_CELLS, ids=[c.key for c in BRIDGED_CELLS])


def _context(run: Run) -> str:
    return f"{run.ended}\n{run.output[-3000:]}"


def _assistant_turns(body: JSON) -> list[JSON]:
    """A Chat Completions request's assistant messages that made tool calls."""
    return [
        m
        for m in body.get("messages") or ()
        if isinstance(m, dict) and m.get("role") == "assistant" and m.get("tool_calls")
    ]


def _tool_texts(body: JSON) -> list[str]:
    return [
        str(m.get("content"))
        for m in body.get("messages") or ()
        if isinstance(m, dict) and m.get("role") == "tool"
    ]


@agents
@cells
@routes("bridge")
def test_through_the_bridge(agent_runs: Runs, agent: str, cell: Cell) -> None:
    run = agent_runs[(agent, cell, "bridge")]
    context = _context(run)
    assert run.returncode is not None, f"did not end on its own: {context}"
    assert run.runs == 1, f"the shell command ran {run.runs} times: {context}"
    # The upstream was asked in its own API only, and never saw one id twice in a request.
    assert run.paths and set(run.paths) == {CHAT_PATH}, run.paths
    assert all("messages" in body for body in run.requests), context
    assert run.repeated_ids() == [], f"the upstream saw an id twice in one request: {context}"
    if cell.mode != "normal":
        # The replay came and the proxy answered it itself (SPEC §5's follow-up round).
        notes = [t for body in run.requests for t in _tool_texts(body) if DUPLICATE_NOTE in t]
        assert notes, f"no replay was answered: {context}"
    if cell.mode == "replay-forever":
        assert run.returncode != 0 and run.loop_error, f"no replay loop error shown: {context}"
        assert not run.wrote, context  # it stopped at the loop
        assert run.breaker_trips == 1, f"retried the loop error ({run.breaker_trips}): {context}"
    else:
        assert run.finished, f"did not finish the task: {context}"


def _the_models_reasoning(text: object) -> bool:
    """The thinking model's reasoning: its text once, or once per round where a replay's
    follow-up round continued the same assistant message (SPEC §5: one message, its rounds'
    text concatenated)."""
    return isinstance(text, str) and REASONING in text and not text.replace(REASONING, "").strip()


@agents
@cells
@routes("bridge")
def test_the_reasoning_goes_back_upstream_every_turn(
    agent_runs: Runs, agent: str, cell: Cell
) -> None:
    """The thinking model's `reasoning_content` came back to the client as a thinking block or
    reasoning item and went back upstream, on every tool-call turn of every request (SPEC §9),
    across turns: the requests hold several tool-call turns, each with the model's reasoning
    (the simulator answers a turn without it with a 400, see the control below)."""
    run = agent_runs[(agent, cell, "bridge")]
    turns = [_assistant_turns(body) for body in run.requests]
    assert max(map(len, turns), default=0) >= 2, f"fewer than two tool-call turns: {turns}"
    lost = [
        (number, [c.get("id") for c in turn["tool_calls"]], turn.get("reasoning_content"))
        for number, body_turns in enumerate(turns)
        for turn in body_turns
        if not _the_models_reasoning(turn.get("reasoning_content"))
    ]
    assert lost == [], f"tool-call turns sent upstream without their reasoning: {lost}"


@agents
@pytest.mark.parametrize("cell", [NORMAL], ids=[NORMAL.key])
@routes("bridge")
def test_control_the_upstream_refuses_a_turn_without_its_reasoning(
    agent_runs: Runs, agent: str, cell: Cell
) -> None:
    """The control for the reasoning round trip: the run's last upstream request is answered
    as the bridge sent it, and refused (400) once its tool-call turns lose `reasoning_content`,
    which is what a bridge (or an agent) dropping the reasoning would have sent."""
    run = agent_runs[(agent, cell, "bridge")]
    last = run.requests[-1]
    stripped = json.loads(json.dumps(last))
    for turn in _assistant_turns(stripped):
        turn.pop("reasoning_content", None)
    assert _assistant_turns(stripped), "the last request had no tool-call turn"
    with serving(create_simulator_app()) as sim:
        url = sim.url + CHAT_PATH
        kept, lost = (httpx.post(url, json=body, timeout=30) for body in (last, stripped))
    assert kept.status_code == 200, kept.text
    assert lost.status_code == 400 and "reasoning_content" in lost.text, lost.text


@agents
@pytest.mark.parametrize("cell", [NORMAL], ids=[NORMAL.key])
@pytest.mark.parametrize("route", ["proxy", "direct"])
@routes("proxy", "direct")
def test_control_without_the_bridge_the_command_never_runs(
    agent_runs: Runs, agent: str, cell: Cell, route: str
) -> None:
    """The same agent and upstream without the bridge (the proxy sending each client's own API
    upstream, or no proxy): the Chat-only upstream answers the agent's API with 404, the agent
    gives up, and the command never runs."""
    run = agent_runs[(agent, cell, route)]
    context = _context(run)
    assert run.returncode not in (None, 0), f"did not fail: {context}"
    assert run.runs == 0 and not run.wrote and not run.finished, context
    assert CLIENT_PATH[agent] in run.paths and CHAT_PATH not in run.paths, run.paths
    assert "404" in run.output, f"the upstream's 404 is not shown: {context}"
