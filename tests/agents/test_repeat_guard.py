"""SPEC §10's repeat guard with the real coding agents (opencode, pi, qwen-code on Chat
Completions, Claude Code on Anthropic Messages, Codex on Responses).

The simulated upstream's `repeat-forever` re-issues the shell command of round 2 every turn
under a fresh id (never one the history holds, so SPEC §5's replay guard does not see it):

- through the proxy the command runs 4 times; the 3rd and 4th results reach the upstream with
  the note, the 5th identical call is answered by the proxy, and the model's next repeat ends
  the turn with `tool_call_repeat_loop`, which each agent shows and does not send again;
- straight to the simulator (the control) it runs until the test stops it, except for
  qwen-code, whose own loop detection halts on the 5th identical call;
- Codex's shell results begin with a random `Chunk ID` and a `Wall time`: the guard compares
  results without those two lines (proxy.core.repeat), so Codex's loop is stopped too.

`poll-until-done` makes the same call `POLLS` times and then moves on: the command appends to
the log and prints its line count, so every result differs and the proxy must let every poll
through. qwen-code's own loop detection halts on the 5th identical call whatever the results,
so it cannot poll 6 times, with or without the proxy; it finishes a poll of 4.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any, TypeVar

import pytest

from proxy.core.repeat import BLOCK_AT, NOTE_AT
from tests.agents.agents import AGENTS, JSON
from tests.agents.runs import LOOPING, Cell, Run, RunKey

Runs = dict[RunKey, Run]
F = TypeVar("F", bound=Callable[..., Any])

POLLS = 6  # past the guard's block (a 5th identical call): every one must still run
REPEAT = Cell("repeat", "fresh", "repeat-forever+replay_after=2")
POLL = Cell(
    f"poll {POLLS}x", "fresh", f"poll-until-done+replay_after=2+polls={POLLS}", counting=True
)
QWEN_POLL = Cell("poll 4x", "fresh", "poll-until-done+replay_after=2+polls=4", counting=True)

NOTE = "[toolcall-proxy] Note"
ANSWERED = "Repeated tool call not executed"  # the proxy's answer to the blocked call
COMMAND = "log.txt"  # in the shell command's arguments, in every agent's shape
OWN_GUARD = {a.name: a.own_guard for a in AGENTS}
# qwen-code's own loop detection halts the run on the 5th consecutive identical call, whatever
# the results: the command has run 4 times.
OWN_GUARD_RUNS = 4
# What each agent's user sees when the proxy stops the loop (colours removed), exit status 1.
SHOWN = {
    "opencode": re.compile(
        r'^Error: Tool-call repeat loop detected: the model kept calling "bash" with the same '
        r"arguments after 4 identical results \(.*\)\. The response was stopped .*\.$",
        re.M,
    ),
    "pi": re.compile(r'^422 Tool-call repeat loop detected: .* calling "bash" .*\.$', re.M),
    "qwen-code": re.compile(
        r"^\[API Error: 422 Tool-call repeat loop detected: .* calling "
        r'"run_shell_command" .*\.\]$',
        re.M,
    ),
    # `-p --output-format json`: the result object (text output prints its `result`).
    "claude-code": re.compile(
        r'"is_error":true,.*"result":"API Error: Tool-call repeat loop detected: '
        r'the model kept calling \\"Bash\\" .*\."'
    ),
    "codex": re.compile(
        r'^ERROR: \{"error":\{"message":"Tool-call repeat loop detected: .* calling '
        r'\\"\w+\\" .*","type":"loop_detected","code":"tool_call_repeat_loop",'
        r'"param":null\}\}$',
        re.M,
    ),
}
_COLOURS = re.compile(r"\x1b\[[0-9;]*m")
NO_ACTION = {"note": 0, "blocked": 0, "stopped": 0}


def routes(*names: str) -> Callable[[F], F]:
    """The runs a test reads (tests/agents/conftest.py starts them all up front)."""

    def mark(fn: F) -> F:
        fn.routes = names  # type: ignore[attr-defined]
        return fn

    return mark


# --- reading the upstream's requests, in each surface's shape -------------------------------


def _calls(body: JSON) -> list[tuple[str, str]]:
    """(tool, arguments as JSON text) of every call in a request's history."""
    found: list[tuple[str, str]] = []
    for message in body.get("messages") or []:
        if isinstance(message, dict) and message.get("role") == "assistant":
            found += _message_calls(message)
    for item in body.get("input") or []:  # Responses
        if isinstance(item, dict) and item.get("type") == "function_call":
            found.append((str(item.get("name")), json.dumps(item.get("arguments"))))
    return found


def _message_calls(message: JSON) -> list[tuple[str, str]]:
    """An assistant message's calls: Chat Completions `tool_calls`, Anthropic `tool_use`."""
    found = []
    for call in message.get("tool_calls") or []:
        fn = call.get("function") or {}
        found.append((str(fn.get("name")), json.dumps(fn.get("arguments"))))
    content = message.get("content")
    for block in content if isinstance(content, list) else []:
        if isinstance(block, dict) and block.get("type") == "tool_use":
            found.append((str(block.get("name")), json.dumps(block.get("input"))))
    return found


def _parts(body: JSON) -> list[tuple[bool, Any]]:
    """Every part of a request's history, and whether it is a tool result."""
    parts: list[tuple[bool, Any]] = []
    for message in body.get("messages") or []:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list) and message.get("role") == "user":  # Anthropic blocks
            parts += [(isinstance(b, dict) and b.get("type") == "tool_result", b) for b in content]
        else:
            parts.append((isinstance(message, dict) and message.get("role") == "tool", message))
    for item in body.get("input") or []:
        parts.append((isinstance(item, dict) and item.get("type") == "function_call_output", item))
    return parts


def _with(run: Run, test: Callable[[str, str], bool]) -> list[int]:
    """Per upstream request: how many calls of its history pass `test(tool, arguments)`."""
    return [sum(test(name, args) for name, args in _calls(body)) for body in run.requests]


def _is_command(name: str, arguments: str) -> bool:
    return COMMAND in arguments


def _noted(run: Run) -> list[int]:
    """The requests (by number) that carry the note anywhere."""
    return [n for n, body in enumerate(run.requests) if NOTE in json.dumps(body)]


def _context(run: Run) -> str:
    return f"{run.ended}\n{_COLOURS.sub('', run.output)[-3000:]}"


def _assert_stopped(run: Run, agent: str, test: Callable[[str, str], bool]) -> None:
    """The proxy's stop, as SPEC §10 has it: the note from a run of 3, the 5th identical call
    answered, the 6th stopping the turn once (the error is shown and not retried)."""
    context = _context(run)
    assert run.returncode == 1, f"did not end on its own with an error: {context}"
    assert SHOWN[agent].search(_COLOURS.sub("", run.output)), f"not the error shown: {context}"
    assert not run.wrote, context  # it stopped at the loop
    assert run.repeats == {"note": BLOCK_AT - NOTE_AT + 1, "blocked": 1, "stopped": 1}, context
    assert run.breaker_trips == 1, context
    held = _with(run, test)
    # The request the 5th call answered and the proxy's follow-up: no retry of either.
    assert sum(n >= BLOCK_AT for n in held) == 2, f"{held}: {context}"
    answered = [n for n, body in enumerate(run.requests) if ANSWERED in json.dumps(body)]
    assert answered == [len(run.requests) - 1], f"the proxy's answer in {answered}"
    _assert_noted_in_results(run, held)
    assert run.repeated_ids() == [], context


def _assert_noted_in_results(run: Run, held: list[int]) -> None:
    """The note from the request whose history holds a run of 3, only ever inside a tool
    result (never a message of its own)."""
    noted = _noted(run)
    assert noted and held[noted[0]] == NOTE_AT, f"first note at {noted} of {held}"
    for n in noted:
        places = {result for result, part in _parts(run.requests[n]) if NOTE in json.dumps(part)}
        assert places == {True}, f"request {n}: the note outside a tool result"


# --- repeat-forever -------------------------------------------------------------------------


@pytest.mark.parametrize("agent", [a.name for a in AGENTS])
@pytest.mark.parametrize("cell", [REPEAT], ids=[REPEAT.key])
@routes("proxy")
def test_a_repeated_command_runs_four_times_then_the_turn_stops(
    agent_runs: Runs, agent: str, cell: Cell
) -> None:
    run = agent_runs[(agent, cell, "proxy")]
    assert run.runs == BLOCK_AT, f"the command ran {run.runs} times: {_context(run)}"
    _assert_stopped(run, agent, _is_command)


@pytest.mark.parametrize("agent", [a.name for a in AGENTS])
@pytest.mark.parametrize("cell", [REPEAT], ids=[REPEAT.key])
@routes("direct")
def test_control_straight_to_simulator_the_command_repeats(
    agent_runs: Runs, agent: str, cell: Cell
) -> None:
    """Without the proxy the command runs until the test stops the agent; qwen-code's own
    loop detection halts the run on the 5th identical call instead (4 runs)."""
    run = agent_runs[(agent, cell, "direct")]
    context = _context(run)
    guard = OWN_GUARD[agent]
    if guard is not None:
        assert run.returncode == 1 and guard in run.output, context
        assert run.runs == OWN_GUARD_RUNS, context
    else:
        assert run.returncode is None and run.runs >= LOOPING, f"not still looping: {context}"


# --- polling: the same call, a new result every time ------------------------------------------


@pytest.mark.parametrize("agent", [a.name for a in AGENTS])
@pytest.mark.parametrize("cell", [POLL], ids=[POLL.key])
@routes("proxy")
def test_a_poll_whose_result_changes_runs_every_time(
    agent_runs: Runs, agent: str, cell: Cell
) -> None:
    run = agent_runs[(agent, cell, "proxy")]
    context = _context(run)
    assert run.repeats == NO_ACTION and run.breaker_trips == 0, context
    assert _noted(run) == [], context
    guard = OWN_GUARD[agent]
    if guard is not None:
        # qwen-code halts on the 5th identical call itself: the proxy let all of them through.
        assert run.returncode == 1 and guard in run.output, context
        assert run.runs == OWN_GUARD_RUNS, context
        return
    assert run.finished, f"did not finish: {context}"
    assert run.runs == POLLS, f"the poll ran {run.runs} times: {context}"
    # The upstream saw every poll: the last request's history holds them all.
    assert _with(run, _is_command)[-1] == POLLS, context


@pytest.mark.parametrize("agent", [a.name for a in AGENTS if a.own_guard is not None])
@pytest.mark.parametrize("cell", [QWEN_POLL], ids=[QWEN_POLL.key])
@routes("proxy")
def test_an_agent_that_halts_a_fifth_identical_call_finishes_a_poll_of_four(
    agent_runs: Runs, agent: str, cell: Cell
) -> None:
    """4 identical calls are past the note's run of 3: with changing results, no note."""
    run = agent_runs[(agent, cell, "proxy")]
    context = _context(run)
    assert run.finished and run.runs == 4, context
    assert run.repeats == NO_ACTION and _noted(run) == [], context
