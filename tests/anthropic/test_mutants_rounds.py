"""SPEC §5, §8, §10: the Anthropic exchange across its rounds (`exchange.py`) at the edges the
mutation audit found unpinned: a loop before any byte of a stream, a loop rendered for a
whole message, output tokens over several replay rounds, the upstream request's bytes, the
history's calls, and a route's repeat-exempt tools."""

from __future__ import annotations

from typing import Any

import orjson

from proxy.anthropic.exchange import AnthropicExchange
from proxy.core.events import Forward, LoopDetected
from proxy.core.ids import mint_client_id
from proxy.core.notes import RepeatNoted
from proxy.core.rounds import RouteRules
from tests.anthropic.anthropic_wire import (
    assistant,
    end,
    entropy,
    parse,
    request,
    results,
    run,
    run_message,
    tool,
    tool_use,
    whole_message,
)

LS = {"command": "ls"}
PWD = {"command": "pwd"}
LS_ID = mint_client_id(1, 0, "abcd", "functions.Bash:0", "toolu_")
PWD_ID = mint_client_id(1, 1, "abcd", "functions.Bash:1", "toolu_")
HISTORY = (assistant(tool_use(LS_ID, "Bash", LS)), results(LS_ID))


def message(*content: dict[str, Any], tokens: int, reason: str = "tool_use") -> dict[str, Any]:
    return whole_message(*content, reason=reason, input_tokens=3, output_tokens=tokens)


def names(client: bytes) -> list[str | None]:
    return [name for name, _ in parse(client)]


def test_a_loop_before_any_byte_of_a_stream_is_still_an_in_stream_error() -> None:
    # No message_start came, and the replays are held: nothing reached the client yet.
    replay = tool(0, "functions.Bash:0", "Bash", LS)
    got = run(request(*HISTORY), [replay + replay + end()])
    assert got.loop is not None and got.loop.before_first_byte is False
    assert names(got.client) == [
        "message_start",
        "content_block_start",
        "content_block_stop",
        "error",
    ]


def test_a_loop_in_a_whole_message_renders_as_message_start_and_error() -> None:
    # As the sanitize command renders it: no stream was opened, so no block to complete.
    exchange = AnthropicExchange(request(*HISTORY), b"{}", RouteRules(), entropy)
    exchange.begin_round(stream=False)
    replay = tool_use("functions.Bash:0", "Bash", LS)
    assert exchange.feed(orjson.dumps(message(replay, replay, tokens=5))) == []
    [event] = exchange.end()
    assert isinstance(event, LoopDetected)
    assert names(exchange.stream_error(event.error)) == ["message_start", "error"]


def test_output_tokens_are_summed_over_two_whole_replay_rounds() -> None:
    history = (
        assistant(tool_use(LS_ID, "Bash", LS), tool_use(PWD_ID, "Bash", PWD)),
        results(LS_ID, PWD_ID),
    )
    rounds = [
        message(tool_use("functions.Bash:0", "Bash", LS), tokens=5),
        message(tool_use("functions.Bash:1", "Bash", PWD), tokens=7),
        message({"type": "text", "text": "ok"}, tokens=3, reason="end_turn"),
    ]
    event, followups = run_message(request(*history, stream=False), rounds)
    assert len(followups) == 2 and isinstance(event, Forward)
    assert orjson.loads(event.data)["usage"]["output_tokens"] == 5 + 7 + 3


def test_a_first_whole_answer_that_is_not_an_object_goes_on_as_it_came() -> None:
    exchange = AnthropicExchange(request(stream=False), b"{}", RouteRules())
    exchange.begin_round(stream=False)
    exchange.feed(b"[1, 2]")
    assert exchange.end() == [Forward(data=b"[1, 2]", last=True)]


def test_a_request_with_nothing_to_change_goes_upstream_as_its_own_bytes() -> None:
    body = request()
    raw = orjson.dumps(body, option=orjson.OPT_INDENT_2)  # not how the proxy would write it
    assert AnthropicExchange(body, raw, RouteRules()).upstream_request == raw


def test_the_historys_calls_are_known_by_both_their_ids() -> None:
    exchange = AnthropicExchange(request(*HISTORY), b"{}", RouteRules())
    [call] = exchange.history_calls
    assert (call.client_id, call.upstream_id, call.name) == (LS_ID, "functions.Bash:0", "Bash")


def test_a_routes_repeat_exempt_tools_get_no_repeat_note() -> None:
    history: list[dict[str, Any]] = []
    for turn in range(3):  # three identical rounds: the guard's note is due (SPEC §10)
        history += [assistant(tool_use(f"toolu_{turn}", "Bash", LS)), results(f"toolu_{turn}")]
    body = request(*history)

    def notes(rules: RouteRules) -> list[object]:
        exchange = AnthropicExchange(body, orjson.dumps(body), rules)
        return list(exchange.report()[0])

    assert notes(RouteRules()) == [RepeatNoted(count=3, tools="Bash")]
    assert notes(RouteRules(repeat_exempt=("Bash",))) == []
