"""The simulator's repeating models, on its three endpoints (Chat Completions, Anthropic
Messages, Responses), straight and through the proxy (SPEC §10):

- `repeat-forever`: after `replay_after` rounds the latest call again every turn, under an id
  the history never held (so SPEC §5's replay guard cannot see it), forever;
- `poll-until-done`: the same call `polls` times in all, then the next round and the final
  text; it polls an offered tool that waits or polls when there is one.

Each test drives the endpoint as an agent does: it runs the tool (`steady`: the same result
every time; `counting`: a new one every time) and sends the whole history back.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson
import pytest

from proxy.config.load import Route, Settings
from proxy.server.app import create_app
from proxy.simulator import create_simulator_app, profile_for_model
from proxy.simulator.profiles import IdStyle, ReplayId, ReplayMode
from tests.servers import ServerThread, serving

JSON = dict[str, Any]
BOUND = 12  # the loop's rounds at most: past the proxy's stop and the polls
SHELL = "shell"
RANDOM_ID = re.compile(r"(call|toolu)_[A-Za-z0-9]{24}")
SURFACES = ("chat", "anthropic", "responses")
# The loop error without streaming (SPEC §8): Codex takes a 400 as final on Responses.
STOP_STATUS = {"chat": 422, "anthropic": 422, "responses": 400}


@dataclass
class Call:
    id: str
    name: str
    arguments: JSON


@dataclass
class Outcome:
    """The rounds the loop ran: each turn's calls, the final text, or the error that ended
    it (status and body)."""

    turns: list[list[Call]] = field(default_factory=list)
    text: str | None = None
    error: tuple[int, JSON] | None = None

    @property
    def calls(self) -> list[Call]:
        return [call for turn in self.turns for call in turn]


def steady(call: Call, n: int) -> str:
    return "build still running"


def counting(call: Call, n: int) -> str:
    return f"{n} lines"


# --- each surface's request and reply shapes -----------------------------------------------


def _schema() -> JSON:
    return {"type": "object", "properties": {"command": {"type": "string"}}}


class Surface:
    path: str

    def body(self, model: str, history: list[JSON], tools: list[str]) -> JSON:
        raise NotImplementedError

    def turn(self, reply: JSON) -> tuple[list[Call], str]:
        raise NotImplementedError

    def answer(self, history: list[JSON], reply: JSON, results: list[tuple[Call, str]]) -> None:
        raise NotImplementedError


class Chat(Surface):
    path = "/v1/chat/completions"

    def body(self, model: str, history: list[JSON], tools: list[str]) -> JSON:
        offered = [
            {"type": "function", "function": {"name": t, "parameters": _schema()}} for t in tools
        ]
        return {"model": model, "messages": history, "tools": offered}

    def turn(self, reply: JSON) -> tuple[list[Call], str]:
        message = reply["choices"][0]["message"]
        calls = [
            Call(c["id"], c["function"]["name"], orjson.loads(c["function"]["arguments"]))
            for c in message.get("tool_calls") or []
        ]
        return calls, message.get("content") or ""

    def answer(self, history: list[JSON], reply: JSON, results: list[tuple[Call, str]]) -> None:
        history.append(reply["choices"][0]["message"])
        history += [{"role": "tool", "tool_call_id": c.id, "content": r} for c, r in results]


class Anthropic(Surface):
    path = "/v1/messages"

    def body(self, model: str, history: list[JSON], tools: list[str]) -> JSON:
        offered = [{"name": t, "input_schema": _schema()} for t in tools]
        return {"model": model, "max_tokens": 256, "messages": history, "tools": offered}

    def turn(self, reply: JSON) -> tuple[list[Call], str]:
        blocks = reply["content"]
        calls = [Call(b["id"], b["name"], b["input"]) for b in blocks if b["type"] == "tool_use"]
        return calls, "".join(b.get("text", "") for b in blocks if b["type"] == "text")

    def answer(self, history: list[JSON], reply: JSON, results: list[tuple[Call, str]]) -> None:
        history.append({"role": "assistant", "content": reply["content"]})
        content = [{"type": "tool_result", "tool_use_id": c.id, "content": r} for c, r in results]
        history.append({"role": "user", "content": content})


class Responses(Surface):
    path = "/v1/responses"

    def body(self, model: str, history: list[JSON], tools: list[str]) -> JSON:
        offered = [{"type": "function", "name": t, "parameters": _schema()} for t in tools]
        return {"model": model, "input": history, "tools": offered, "store": False}

    def turn(self, reply: JSON) -> tuple[list[Call], str]:
        items = reply["output"]
        calls = [
            Call(i["call_id"], i["name"], orjson.loads(i["arguments"]))
            for i in items
            if i["type"] == "function_call"
        ]
        text = "".join(
            part["text"]
            for i in items
            if i["type"] == "message"
            for part in i["content"]
            if part["type"] == "output_text"
        )
        return calls, text

    def answer(self, history: list[JSON], reply: JSON, results: list[tuple[Call, str]]) -> None:
        history += reply["output"]
        history += [
            {"type": "function_call_output", "call_id": c.id, "output": r} for c, r in results
        ]


SHAPES: dict[str, Surface] = {"chat": Chat(), "anthropic": Anthropic(), "responses": Responses()}


def run_loop(
    base: str,
    surface: str,
    model: str,
    tools: list[str],
    tool: Callable[[Call, int], str],
) -> Outcome:
    """An agent loop over one endpoint: ask, run every call with `tool`, send it all back."""
    shape = SHAPES[surface]
    history: list[JSON] = [{"role": "user", "content": "check on the build"}]
    outcome = Outcome()
    with httpx.Client(base_url=base, timeout=30) as client:
        for _ in range(BOUND):
            answer = client.post(shape.path, json=shape.body(model, history, tools))
            if answer.status_code != 200:
                outcome.error = (answer.status_code, answer.json())
                return outcome
            reply = answer.json()
            calls, text = shape.turn(reply)
            if not calls:
                outcome.text = text
                return outcome
            outcome.turns.append(calls)
            ran = len(outcome.calls) - len(calls)
            shape.answer(history, reply, [(c, tool(c, ran + k + 1)) for k, c in enumerate(calls)])
    return outcome


@pytest.fixture(scope="module")
def simulator() -> Iterator[ServerThread]:
    with serving(create_simulator_app()) as server:
        yield server


@pytest.fixture(scope="module")
def proxy(simulator: ServerThread) -> Iterator[ServerThread]:
    route = Route(name="default", upstream=simulator.url + "/v1")
    with serving(create_app(Settings(routes=(route,)))) as server:
        yield server


# --- the profiles ---------------------------------------------------------------------------


def test_profiles_and_options() -> None:
    forever = profile_for_model("repeat-forever")
    assert (forever.replay, forever.replay_id, forever.replay_after) == (
        ReplayMode.LOOP,
        ReplayId.FRESH,
        1,
    )
    poll = profile_for_model("poll-until-done+polls=3+replay_after=2")
    assert (poll.replay, poll.replay_id, poll.polls, poll.replay_after) == (
        ReplayMode.POLL,
        ReplayId.FRESH,
        3,
        2,
    )
    assert profile_for_model("poll-until-done").polls == 6
    # A Kimi-named model switches replaying profiles to Kimi's ids, but not the fresh ones:
    # `functions.{name}:{k}` could be an id the history holds.
    assert profile_for_model("kimi-k2/replay-loop").id_style is IdStyle.KIMI_HISTORY
    for name in ("kimi-k2/repeat-forever", "kimi-k2/poll-until-done"):
        assert profile_for_model(name).id_style is IdStyle.OPENAI


@pytest.mark.parametrize("surface", SURFACES)
@pytest.mark.parametrize("model", ["repeat-forever", "kimi-k2/repeat-forever+replay_after=2"])
def test_repeat_forever_reissues_the_latest_call_under_a_fresh_id_every_turn(
    simulator: ServerThread, surface: str, model: str
) -> None:
    after = 2 if "replay_after=2" in model else 1
    outcome = run_loop(simulator.url, surface, model, [SHELL], steady)
    assert outcome.error is None and outcome.text is None, "it never stops on its own"
    assert all(len(turn) == 1 for turn in outcome.turns) and len(outcome.turns) == BOUND
    calls = outcome.calls
    first_rounds = [c.arguments for c in calls[:after]]
    assert first_rounds == [{"command": f"echo round-{r}-0"} for r in range(1, after + 1)]
    assert all(c.arguments == calls[after - 1].arguments for c in calls[after:])
    assert all(c.name == SHELL for c in calls)
    ids = [c.id for c in calls]
    assert len(set(ids)) == len(ids), "an id came back"
    assert all(RANDOM_ID.fullmatch(i) for i in ids[after:]), ids


@pytest.mark.parametrize("surface", SURFACES)
def test_poll_until_done_polls_then_moves_on(simulator: ServerThread, surface: str) -> None:
    outcome = run_loop(simulator.url, surface, "poll-until-done+rounds=2", [SHELL], steady)
    args = [c.arguments["command"] for c in outcome.calls]
    assert args == ["echo round-1-0"] * 6 + ["echo round-2-0"]
    ids = [c.id for c in outcome.calls]
    assert len(set(ids)) == len(ids)
    assert outcome.text == "All 2 rounds done."
    # `polls` sets how often; `replay_after` which round is polled.
    polled = run_loop(
        simulator.url, surface, "poll-until-done+rounds=3+replay_after=2+polls=3", [SHELL], steady
    )
    args = [c.arguments["command"] for c in polled.calls]
    assert args == ["echo round-1-0", *["echo round-2-0"] * 3, "echo round-3-0"]


@pytest.mark.parametrize("surface", SURFACES)
@pytest.mark.parametrize("waiting", ["wait_for_job", "check_status", "poll_build"])
def test_poll_until_done_polls_an_offered_waiting_tool(
    simulator: ServerThread, surface: str, waiting: str
) -> None:
    outcome = run_loop(simulator.url, surface, "poll-until-done+rounds=2", [SHELL, waiting], steady)
    names = [c.name for c in outcome.calls]
    assert names == [waiting] * 6 + [SHELL], "the waiting tool polled, the first tool after"
    assert outcome.text == "All 2 rounds done."


# --- through the proxy: what the profiles are for (SPEC §10) ---------------------------------


@pytest.mark.parametrize("surface", SURFACES)
def test_through_the_proxy_repeat_forever_runs_four_times_then_stops(
    proxy: ServerThread, surface: str
) -> None:
    outcome = run_loop(proxy.url, surface, "repeat-forever", [SHELL], steady)
    assert len(outcome.calls) == 4, "the fifth identical call was answered by the proxy"
    assert outcome.error is not None, outcome
    status, body = outcome.error
    error = body["error"]
    assert status == STOP_STATUS[surface], body
    assert error["message"].startswith("Tool-call repeat loop detected"), body
    if surface == "anthropic":  # Anthropic's error object has a type and no code
        assert body["type"] == "error" and error["type"] == "loop_detected", body
    else:
        assert error["code"] == "tool_call_repeat_loop", body


@pytest.mark.parametrize("surface", SURFACES)
@pytest.mark.parametrize(
    ("tools", "tool"),
    [([SHELL], counting), ([SHELL, "wait_for_job"], steady)],
    ids=["result-changes", "exempt-tool"],
)
def test_through_the_proxy_every_poll_runs(
    proxy: ServerThread,
    surface: str,
    tools: list[str],
    tool: Callable[[Call, int], str],
) -> None:
    outcome = run_loop(proxy.url, surface, "poll-until-done+rounds=2", tools, tool)
    assert outcome.error is None and outcome.text == "All 2 rounds done.", outcome
    assert [c.name for c in outcome.calls] == [tools[-1]] * 6 + [SHELL]
