"""SPEC §5, §9, §10: what the Chat core decides reaches a bridge's client and the shell, found
unpinned by the mutation audit: the core's notes and its count of data lines that were not
JSON, the breaker in a whole message and at a follow-up, text that came in the read that tripped the
breaker, whether bytes reached an Anthropic client before a loop, and the route's repeat
guard and its exempt tools."""

from __future__ import annotations

import json
from typing import Any, cast

import pytest

from proxy.core.events import LoopDetected
from proxy.core.exchange import RoundExchange
from proxy.core.ids import mint_client_id
from proxy.core.notes import IdRewritten
from proxy.core.rounds import RouteRules
from tests.bridge.anthropic_chat.bridge_wire import new_exchange, parse_events, play
from tests.bridge.anthropic_chat.test_bridge_anthropic_exchange import (
    FIRST,
    HEX4,
    LS,
    kimi_call,
    request,
    turn,
)
from tests.bridge.responses_chat.test_stream import answered_ls
from tests.bridge.responses_chat.test_stream import kimi_call as responses_kimi_call
from tests.bridge.responses_chat.wire import body, call, output, run, upstream_messages, user
from tests.chat.helpers import chunk, finish, header, role, sse, text
from tests.responses.helpers import parse

JSON = dict[str, Any]
REPLAY = chunk({"tool_calls": [header(0, "functions.shell:0", "shell", '{"cmd":"ls"}')]})


def test_the_chat_cores_notes_reach_the_report() -> None:
    result = run(body(), [[responses_kimi_call('{"cmd":"ls"}')]])
    notes, non_json = cast(RoundExchange, result.exchange).report()
    assert [(type(n), n.raw_id) for n in notes if isinstance(n, IdRewritten)] == [
        (IdRewritten, "functions.shell:0")
    ]
    assert non_json == 0


def completion_with_replay() -> bytes:
    tool_call = {
        "id": "functions.shell:0",
        "type": "function",
        "function": {"name": "shell", "arguments": '{"cmd":"ls"}'},
    }
    message = {"role": "assistant", "content": None, "tool_calls": [tool_call]}
    choice = {"index": 0, "message": message, "finish_reason": "tool_calls"}
    completion = {"id": "c", "object": "chat.completion", "created": 1, "model": "m"}
    return json.dumps({**completion, "choices": [choice]}).encode()


@pytest.mark.parametrize(
    ("max_followups", "rounds", "followups"),
    [(2, 2, 1), (0, 1, 0)],
    ids=["replayed-again", "no-follow-up-allowed"],
)
def test_the_breaker_stops_a_whole_message_exchange(
    max_followups: int, rounds: int, followups: int
) -> None:
    _, request_body = answered_ls()
    rules = RouteRules(max_followups=max_followups)
    replay = [completion_with_replay()]
    result = run({**request_body, "stream": False}, [replay] * rounds, stream=False, rules=rules)
    assert len(result.followups) == followups
    assert isinstance(result.end, LoopDetected)
    assert result.end.before_first_byte
    assert str(result.end.error).startswith("Tool-call replay loop detected")


def test_text_in_the_read_that_trips_the_breaker_reaches_the_client_first() -> None:
    _, request_body = answered_ls()
    rounds = [[sse(role(), text(t), REPLAY, finish())] for t in ("A", "B")]
    result = run(request_body, rounds)
    assert isinstance(result.end, LoopDetected) and not result.end.before_first_byte
    deltas = [e["delta"] for e in parse(result.client) if e["type"] == "response.output_text.delta"]
    assert deltas == ["A", "B"]


def anthropic_loop(*, text: str) -> LoopDetected:
    first_id = mint_client_id(1, 0, HEX4, "functions.Bash:0", "toolu_")
    exchange = new_exchange(request(FIRST + turn(first_id, LS, "a.txt")))
    played = play(exchange, [kimi_call(LS, text=text)] * 2)
    assert isinstance(played.loop, LoopDetected)
    # The client's bytes end with the loop's error event the driver asked for.
    deltas = [e["delta"] for e in parse_events(played.client) if e["type"] == "content_block_delta"]
    # Each of the two rounds said its text; the second one's replay tripped the breaker.
    expected = [{"type": "text_delta", "text": text}] * 2 if text else []
    assert deltas == expected
    return played.loop


def test_an_anthropic_loop_before_any_byte_is_before_the_first_byte() -> None:
    assert anthropic_loop(text="").before_first_byte


def test_an_anthropic_loop_after_text_is_in_the_stream() -> None:
    assert not anthropic_loop(text="Checking.").before_first_byte


def same_rounds(name: str) -> list[JSON]:
    """Three rounds of the same call with the same result: a repeat run (SPEC §10)."""
    history = [user("go")]
    for n in range(3):
        history += [call(f"call_{n}", '{"cmd":"ls"}', name=name), output(f"call_{n}", "same")]
    return history


@pytest.mark.parametrize(
    ("name", "rules", "noted"),
    [
        ("shell", RouteRules(), True),
        ("shell", RouteRules(repeat_guard="note"), True),
        ("shell", RouteRules(repeat_guard="off"), False),
        ("check_status", RouteRules(), False),
        ("shell", RouteRules(repeat_exempt=("sh*",)), False),
    ],
    ids=["on", "note", "off", "exempt-by-default", "exempt-by-route"],
)
def test_the_routes_repeat_guard_notes_a_repeat_run(
    name: str, rules: RouteRules, noted: bool
) -> None:
    exchange = run(body(*same_rounds(name)), [], rules=rules).exchange
    last = upstream_messages(exchange)[-1]
    assert last["role"] == "tool"
    assert last["content"].startswith("same")
    assert ("made 3 times in a row" in last["content"]) is noted


def test_a_stream_round_counts_the_data_lines_that_were_not_json() -> None:
    exchange = cast(RoundExchange, run(body(), []).exchange)
    exchange.begin_round(stream=True)
    assert exchange.report() == ([], 0)  # nothing read yet
    exchange.feed(sse(role(), b"data: {not json", done=False))
    assert exchange.report()[1] == 1
