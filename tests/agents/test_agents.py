"""Real coding agents (opencode, pi, qwen-code on Chat Completions, Claude Code on Anthropic
Messages) through the proxy, against a Kimi-like simulated upstream that replays a shell command
once or forever, under the id the history has or under one from a counter that restarts every
response.

Through the proxy each agent ends on its own, the replayed command runs exactly once (the log
it appends to has one line), a replay loop ends with an error that names it and that the agent
does not retry, and the upstream never sees one id twice in a request. The controls run the
same agents straight to the simulator: there the replayed command runs again (and, for a loop,
until the test stops it or the agent's own guard does), so the proxy tests can fail. Claude Code
loops straight to the simulator even without a replay: the Kimi-like upstream reuses
`functions.Bash:0`, and Claude Code runs a call whose id it has seen, then leaves it out of the
history, so the model asks for it again.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import pytest

from tests.agents.agents import AGENTS
from tests.agents.runs import CELLS, LOOPING, Cell, Run, RunKey

Runs = dict[RunKey, Run]
F = TypeVar("F", bound=Callable[..., Any])

agents = pytest.mark.parametrize("agent", [a.name for a in AGENTS])
cells = pytest.mark.parametrize("cell", CELLS, ids=[c.key for c in CELLS])
replays = pytest.mark.parametrize(
    "cell",
    [c for c in CELLS if c.mode != "normal"],
    ids=[c.key for c in CELLS if c.mode != "normal"],
)
OWN_GUARD = {a.name: a.own_guard is not None for a in AGENTS}
DROPS_REPEATED_IDS = {a.name: a.drops_repeated_ids for a in AGENTS}


def routes(*names: str) -> Callable[[F], F]:
    """The runs a test reads (conftest starts them all up front)."""

    def mark(fn: F) -> F:
        fn.routes = names  # type: ignore[attr-defined]
        return fn

    return mark


@agents
@cells
@routes("proxy")
def test_through_proxy(agent_runs: Runs, agent: str, cell: Cell) -> None:
    run = agent_runs[(agent, cell, "proxy")]
    context = f"{run.ended}\n{run.output[-3000:]}"
    assert run.returncode is not None, f"did not end on its own: {context}"
    assert run.runs == 1, f"the shell command ran {run.runs} times: {context}"
    assert run.repeated_ids() == [], f"the upstream saw an id twice in one request: {context}"
    if cell.mode == "replay-forever":
        assert run.returncode != 0 and run.loop_error, f"no replay loop error shown: {context}"
        assert not run.wrote, context  # it stopped at the loop
        assert run.breaker_trips == 1, f"retried the loop error ({run.breaker_trips}): {context}"
    else:
        assert run.finished, f"did not finish the task: {context}"


@agents
@replays
@routes("direct")
def test_control_straight_to_simulator(agent_runs: Runs, agent: str, cell: Cell) -> None:
    """Without the proxy the replayed command runs again: once more for replay-once, over and
    over for replay-forever until the test stops the agent. qwen-code guards itself instead:
    it does not run a replay-once replay again and halts a replay loop with its own error.
    Claude Code drops the repeated call from its history, so even one replay loops it."""
    run = agent_runs[(agent, cell, "direct")]
    context = f"{run.ended}\n{run.output[-3000:]}"
    if DROPS_REPEATED_IDS[agent]:
        assert run.returncode is None and run.runs >= LOOPING, f"not still looping: {context}"
    elif cell.mode == "replay-once":
        assert run.finished, context
        assert run.runs == (1 if OWN_GUARD[agent] else 2), context
    elif OWN_GUARD[agent]:
        assert run.guard_halted and run.returncode not in (None, 0), context
    else:
        assert run.returncode is None and run.runs >= LOOPING, f"not still looping: {context}"


@pytest.mark.parametrize("agent", [a.name for a in AGENTS if a.drops_repeated_ids])
@pytest.mark.parametrize("cell", CELLS[:1], ids=[CELLS[0].key])
@routes("direct")
def test_control_reused_ids_loop_without_a_replay(agent_runs: Runs, agent: str, cell: Cell) -> None:
    """The upstream reuses `functions.Bash:0` every response (Kimi behind vLLM): Claude Code
    runs each new call, finds its id already in the conversation and sends "[Tool use
    interrupted]" in its place, so the model asks for the command again and again."""
    run = agent_runs[(agent, cell, "direct")]
    context = f"{run.ended}\n{run.output[-3000:]}"
    assert run.returncode is None and run.runs >= LOOPING, f"not still looping: {context}"
    assert run.repeated_ids() == [], "it never sends the repeated id back"


@agents
@cells
@routes("direct", "proxy")
def test_never_worse_than_direct(agent_runs: Runs, agent: str, cell: Cell) -> None:
    """Through the proxy the command runs no more often than without it, and a run that
    finished without the proxy finishes with it."""
    direct, proxied = (agent_runs[(agent, cell, route)] for route in ("direct", "proxy"))
    assert proxied.runs <= max(direct.runs, 1), (direct.ended, proxied.ended)
    if direct.finished:
        assert proxied.finished, (direct.ended, proxied.ended, proxied.output[-3000:])
