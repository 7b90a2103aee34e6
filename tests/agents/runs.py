"""One agent run: its own simulator (and proxy) on loopback, the agent as a process group with
a deadline, and what came of it (the log's lines, how it ended, what the upstream saw).

Every run gets servers of its own, so runs can go side by side and each one's request log and
metrics are its own.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from proxy.config.load import Route, Settings, settings_from_argv
from proxy.server.app import create_app
from proxy.simulator import SimulatorLog, create_simulator_app
from tests.agents.agents import JSON, WRITTEN, Agent, Scratch
from tests.servers import serving

FINAL_TEXT = "All 4 rounds done."  # the scripted model's answer after the 4 steps
LOOP_ERROR = re.compile(r"replay loop detected", re.IGNORECASE)
REPEAT_ERROR = re.compile(r"repeat loop detected", re.IGNORECASE)  # SPEC §10's stop
# The strict simulated upstream (Responses) refusing a history that repeats a call_id.
DUPLICATE_ERROR = "Duplicate call_id"
# A replay loop straight to the simulator is stopped once the command has run this often (the
# loop is shown; letting it go on proves nothing more), or at the deadline.
LOOPING = 10
# A loop of a call that appends nothing to the log is stopped at this many upstream requests
# (every task ends in fewer than 15).
LOOPING_REQUESTS = 40
DEADLINE = 150.0  # every run ends well before on its own (5-60 s on 2 busy cores)
POLL = 0.1
# Every surface's trips (the label says which API the agent used).
_BREAKER = re.compile(r"^toolcall_proxy_breaker_trips_total(?:\{[^}]*\})? (\S+)$", re.MULTILINE)
# The repeat guard's actions (SPEC §10), per action, summed over surfaces.
_REPEATS = re.compile(
    r'^toolcall_proxy_repeats_total\{[^}]*action="(\w+)"[^}]*\} (\S+)$', re.MULTILINE
)


@dataclass(frozen=True)
class Cell:
    """A row of the matrix: what the upstream does, and the id its replay comes back under."""

    mode: str  # normal | replay-once | replay-forever | repeat | poll ...
    replay_id: str  # "-" | history | restarted | fresh
    model: str  # the simulator model: a Kimi-like upstream (`functions.{name}:{n}` ids)
    counting: bool = False  # the shell command prints the log's line count (Scratch)
    # Round 2's call instead of the shell command, as (tool, JSON arguments): a tool of the
    # agent's whose result does not change (the log then counts nothing).
    round2: tuple[str, str] | None = None

    @property
    def key(self) -> str:
        return self.mode if self.replay_id == "-" else f"{self.mode}/{self.replay_id}"


# The shell command is round 2; `replay_after=2` makes the history-id replays re-emit it (the
# restarted profiles already replay after round 2, where a restarted counter differs).
CELLS = (
    Cell("normal", "-", "kimi-k2/kimi"),
    Cell("replay-once", "history", "kimi-k2/replay-once+replay_after=2"),
    Cell("replay-once", "restarted", "kimi-k2/replay-once-restarted"),
    Cell("replay-forever", "history", "kimi-k2/replay-loop+replay_after=2"),
    Cell("replay-forever", "restarted", "kimi-k2/replay-loop-restarted"),
)


RunKey = tuple[str, Cell, str]  # agent, cell, route (direct | proxy | bridge)
# Routes through the proxy: `proxy` sends each client's request upstream in the client's own
# API; `bridge` is the proxy started with `--upstream-api chat_completions` (SPEC §9), serving
# Anthropic Messages and Responses clients over the upstream's Chat Completions.
PROXIED = ("proxy", "bridge")
ROUTES = ("direct", *PROXIED)


@dataclass
class Run:
    agent: str
    cell: Cell
    route: str  # direct | proxy | bridge
    returncode: int | None  # None: killed (still looping, or at the deadline)
    seconds: float
    output: str = field(repr=False)  # stdout and stderr
    runs: int  # lines in the log: how often the shell command ran
    wrote: bool  # the write step happened
    requests: list[JSON] = field(default_factory=list, repr=False)  # what the upstream got
    breaker_trips: int | None = None  # proxy only: replay loops the proxy stopped
    repeats: dict[str, int] | None = None  # proxy only: SPEC §10's actions (note, blocked, ...)
    guard_halted: bool = False  # the agent's own loop guard ended the run
    # The path of every request the upstream got (`/v1/chat/completions`, `/v1/messages`).
    paths: list[str] = field(default_factory=list, repr=False)

    @property
    def finished(self) -> bool:
        return self.returncode == 0 and FINAL_TEXT in self.output and self.wrote

    @property
    def loop_error(self) -> bool:
        return LOOP_ERROR.search(self.output) is not None

    @property
    def repeat_error(self) -> bool:
        return REPEAT_ERROR.search(self.output) is not None

    @property
    def ended(self) -> str:
        if self.returncode is None:
            looping = self.runs >= LOOPING or len(self.requests) >= LOOPING_REQUESTS
            why = "still looping" if looping else "deadline"
            return f"killed ({why}) at {self.seconds:.0f} s"
        if self.finished:
            how = "finished"
        elif self.loop_error:
            how = "proxy's loop error"
        elif self.repeat_error:
            how = "proxy's repeat-loop error"
        elif self.guard_halted:
            how = "its own loop guard"
        elif DUPLICATE_ERROR in self.output:
            how = "upstream's 400 (duplicate call_id)"
        else:
            lines = [line.strip() for line in self.output.splitlines() if line.strip()]
            how = (lines[-1] if lines else "no output")[:60]
        return f"{how}, exit {self.returncode}, {self.seconds:.0f} s"

    def repeated_ids(self) -> list[tuple[int, list[str]]]:
        """(request number, ids) for each upstream request whose history holds an id twice."""
        found = []
        for number, body in enumerate(self.requests):
            ids = _history_ids(body)
            twice = sorted(i for i, n in Counter(ids).items() if n > 1)
            if twice:
                found.append((number, twice))
        return found


def _history_ids(body: JSON) -> list[str]:
    """The tool-call ids of a request's history: its assistant messages' calls (Chat
    Completions, Anthropic), or the `call_id`s of Responses' `function_call` and
    `custom_tool_call` items."""
    calls = [
        call
        for message in body.get("messages") or []
        if isinstance(message, dict) and message.get("role") == "assistant"
        for call in _calls(message)
    ]
    items = [
        item
        for item in body.get("input") or []
        if isinstance(item, dict) and item.get("type") in ("function_call", "custom_tool_call")
    ]
    return [str(call.get("id")) for call in calls] + [str(item.get("call_id")) for item in items]


def _calls(message: JSON) -> list[JSON]:
    """An assistant message's tool calls: Chat Completions `tool_calls`, or Anthropic
    `tool_use` content blocks."""
    calls = message.get("tool_calls")
    if not isinstance(calls, list):
        content = message.get("content")
        blocks = content if isinstance(content, list) else []
        calls = [b for b in blocks if isinstance(b, dict) and b.get("type") == "tool_use"]
    return [call for call in calls if isinstance(call, dict)]


def run_agent(agent: Agent, cell: Cell, route: str, root: Path) -> Run:
    scratch = Scratch.make(root, cell.counting)
    log = SimulatorLog()
    with ExitStack() as stack:
        sim = stack.enter_context(serving(create_simulator_app(log)))
        server = sim
        if route in PROXIED:
            server = stack.enter_context(serving(create_app(_proxy_settings(route, sim.url))))
        round2 = None if cell.round2 is None else (cell.round2[0], json.loads(cell.round2[1]))
        call = agent.invocation(scratch, server.url, cell.model, round2)
        returncode, seconds, output = _execute(
            call.argv, call.env, call.stdin, scratch, lambda: len(log.requests) >= LOOPING_REQUESTS
        )
        proxied = route in PROXIED
        metrics = httpx.get(server.url + "/metrics", timeout=10).text if proxied else ""
        requests = list(log.requests)
        paths = list(log.paths)
    wrote = scratch.out.exists() and scratch.out.read_text() == WRITTEN
    guarded = agent.own_guard is not None and agent.own_guard in output
    return Run(
        agent.name,
        cell,
        route,
        returncode,
        seconds,
        output,
        _runs(scratch),
        wrote,
        requests,
        breaker_trips=_breaker_trips(metrics) if proxied else None,
        repeats=_repeats(metrics) if proxied else None,
        guard_halted=guarded,
        paths=paths,
    )


def _proxy_settings(route: str, sim_url: str) -> Settings:
    """The proxy's settings for a route: `bridge` as `serve --upstream-api chat_completions`
    resolves them (the flag users give)."""
    if route == "bridge":
        argv = ["--upstream", sim_url + "/v1", "--upstream-api", "chat_completions"]
        return settings_from_argv(argv)
    return Settings(routes=(Route(name="default", upstream=sim_url + "/v1"),))


def _runs(scratch: Scratch) -> int:
    return len(scratch.log.read_text().splitlines()) if scratch.log.exists() else 0


def _execute(
    argv: list[str],
    env: dict[str, str],
    stdin: str | None,
    scratch: Scratch,
    looping: Callable[[], bool] = lambda: False,
) -> tuple[int | None, float, str]:
    """Run the agent in its own process group until it exits, or kill the whole group once
    the command has run `LOOPING` times, `looping()` says so, or at the deadline."""
    out_path = scratch.root / "output.txt"
    started = time.monotonic()
    with out_path.open("wb") as out:
        proc = subprocess.Popen(
            argv,
            cwd=scratch.work,
            env=env,
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        if stdin is not None and proc.stdin is not None:
            proc.stdin.write(stdin.encode())
            proc.stdin.close()
        returncode = proc.poll()
        while returncode is None and _runs(scratch) < LOOPING and not looping():
            if time.monotonic() - started > DEADLINE:
                break
            with contextlib.suppress(subprocess.TimeoutExpired):
                returncode = proc.wait(timeout=POLL)
        seconds = time.monotonic() - started
        # Also whatever the agent left running (a tool's shell, a language server).
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    return returncode, seconds, out_path.read_text(errors="replace")


def _breaker_trips(metrics: str) -> int:
    return sum(int(float(value)) for value in _BREAKER.findall(metrics))


def _repeats(metrics: str) -> dict[str, int]:
    counts: Counter[str] = Counter()
    for action, value in _REPEATS.findall(metrics):
        counts[action] += int(float(value))
    return dict(counts)


def _profile(cell: Cell) -> str:
    """The simulator profile a cell's model names (`kimi-k2/replay-loop-chatty+...`)."""
    return cell.model.split("+", 1)[0].rsplit("/", 1)[-1]


def table(runs: list[Run], versions: dict[str, str]) -> str:
    """The matrix as Markdown: agent x mode x replay id, direct vs proxy (and vs the bridged
    proxy, when a run took that route)."""
    by_key = {(r.agent, r.cell, r.route): r for r in runs}
    cells = [*CELLS, *dict.fromkeys(r.cell for r in runs if r.cell not in CELLS)]
    routes = [route for route in ROUTES if route != "bridge" or any(r.route == route for r in runs)]
    heads = [f"{route}: {what}" for route in routes for what in ("runs", "ended")]
    lines = [
        "| " + " | ".join(["agent", "mode", "replay id", *heads]) + " |",
        "|" + "---|" * (3 + len(heads)),
    ]
    for agent, version in versions.items():
        for cell in cells:
            taken = [by_key.get((agent, cell, route)) for route in routes]
            if all(run is None for run in taken):
                continue
            cols = [
                f"{agent} {version}",
                cell.mode if cell in CELLS else f"{cell.mode} ({_profile(cell)})",
                cell.replay_id,
            ]
            for run in taken:
                cols += [str(run.runs), run.ended] if run else ["", ""]
            lines.append("| " + " | ".join(cols) + " |")
    return "\n".join(lines)
