"""SPEC §8: streamed tool_use blocks (`tools.py`) at the edges the mutation audit found
unpinned (the notes each repair leaves, deltas of held blocks, and blocks that came whole in
`message_start`)."""

from __future__ import annotations

from typing import Any

from proxy.core.ids import mint_client_id
from proxy.core.notes import DeltaRepaired, Note
from proxy.core.rounds import RouteRules
from tests.anthropic.anthropic_wire import (
    Run,
    assistant,
    end,
    ev,
    request,
    results,
    run,
    start,
    text,
    tool,
    tool_use,
)

JSON = dict[str, Any]
LS = {"command": "ls"}
KIMI_MARKUP = (
    "<|tool_calls_section_begin|><|tool_call_begin|>functions.Bash:0"
    '<|tool_call_argument_begin|>{"command": "ls"}<|tool_call_end|>'
    "<|tool_calls_section_end|>"
)


def notes_of(got: Run) -> list[Note]:
    assert got.exchange is not None
    notes, _ = got.exchange.report()
    return notes


def repairs(got: Run) -> list[tuple[str, str]]:
    return [(n.kind, n.detail) for n in notes_of(got) if isinstance(n, DeltaRepaired)]


def whole_start(*blocks: JSON) -> bytes:
    message = {
        "id": "msg_up1",
        "type": "message",
        "role": "assistant",
        "model": "kimi-k2",
        "content": list(blocks),
        "usage": {"input_tokens": 1, "output_tokens": 2},
    }
    return ev({"type": "message_start", "message": message})


def test_a_whole_input_moved_into_a_delta_is_reported() -> None:
    upstream = start() + tool(0, "toolu_01X", "Bash", LS, whole=True, deltas=False) + end()
    got = run(request(), [upstream])
    assert got.read().tools[0]["input"] == LS
    assert repairs(got) == [("whole_input", "moved into a delta")]


def test_deltas_repeating_a_whole_input_are_reported_as_repeated() -> None:
    upstream = start() + tool(0, "toolu_01X", "Bash", LS, whole=True, pieces=4) + end()
    got = run(request(), [upstream])
    assert repairs(got) == [
        ("whole_input", "moved into a delta"),
        ("repeated_input", "the whole input was sent once"),
    ]


def test_deltas_other_than_a_whole_input_are_reported_as_conflicting() -> None:
    # The deltas after the whole start: another input; the whole one stands.
    deltas = tool(0, "toolu_01X", "Bash", {"command": "pwd"})
    upstream = start() + tool(0, "toolu_01X", "Bash", LS, whole=True, deltas=False, stop=False)
    upstream += deltas[deltas.index(b"event: content_block_delta") :] + end()
    got = run(request(), [upstream])
    assert got.read().tools[0]["input"] == LS
    assert ("conflicting_input", "the whole input was sent once") in repairs(got)


def test_a_block_without_input_gets_an_empty_object_and_is_reported() -> None:
    upstream = start() + tool(0, "toolu_01X", "Bash", {}, deltas=False) + end()
    got = run(request(), [upstream])
    assert got.read().tools[0]["input"] == {}
    assert repairs(got) == [("empty_input", "{}")]


def test_an_empty_delta_sends_nothing() -> None:
    empty = ev(
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "input_json_delta", "partial_json": ""},
        }
    )
    upstream = start() + tool(0, "toolu_01X", "Bash", LS, stop=False) + empty
    upstream += ev({"type": "content_block_stop", "index": 0}) + end()
    received = run(request(), [upstream]).read()
    deltas = [
        e["delta"]["partial_json"] for e in received.events if e["type"] == "content_block_delta"
    ]
    assert "" not in deltas
    assert received.tools[0]["input"] == LS


def test_a_delta_without_partial_json_adds_nothing() -> None:
    odd = ev({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta"}})
    upstream = start() + tool(0, "toolu_01X", "Bash", LS, stop=False) + odd
    upstream += ev({"type": "content_block_stop", "index": 0}) + end()
    assert run(request(), [upstream]).read().tools[0]["input"] == LS


def test_a_recovered_call_is_reported() -> None:
    upstream = start() + text(0, "Sure. " + KIMI_MARKUP) + end("end_turn")
    got = run(request(), [upstream])
    [call] = got.read().tools
    assert call["name"] == "Bash" and call["input"] == LS
    # The markup's own raw id is the minted id's digest.
    assert call["id"] == mint_client_id(1, 0, "abab", "functions.Bash:0", "toolu_")
    assert ("text_tool_call", "kimi") in repairs(got)


def test_a_whole_tool_use_in_message_start_gets_its_client_id_and_is_reported() -> None:
    upstream = whole_start(tool_use("functions.Bash:0", "Bash", LS)) + end()
    got = run(request(), [upstream])
    [call] = got.read().tools
    assert call["id"] == mint_client_id(1, 0, "abab", "functions.Bash:0", "toolu_")
    assert call["input"] == LS
    assert [type(n).__name__ for n in notes_of(got)] == ["IdRewritten"]


def test_a_whole_duplicate_in_message_start_is_left_out_and_reported() -> None:
    call = tool_use("grep:3", "grep", {"pattern": "a"})
    got = run(request(), [whole_start(call, call, {"type": "text", "text": "x"}) + end()])
    content = got.read().message["content"]
    assert [b["type"] for b in content] == ["tool_use", "text"]
    dropped: Any = [n for n in notes_of(got) if type(n).__name__ == "CallDropped"]
    assert [(d.choice, d.name, d.raw_id) for d in dropped] == [(0, "grep", "grep:3")]


def test_a_whole_replay_in_message_start_needs_a_follow_up() -> None:
    minted = mint_client_id(1, 0, "abcd", "functions.Bash:0", "toolu_")
    history = (assistant(tool_use(minted, "Bash", LS)), results(minted))
    replay = whole_start(tool_use("functions.Bash:0", "Bash", LS)) + end()
    final = start() + text(0, "ok") + end("end_turn")
    got = run(request(*history), [replay, final], RouteRules())
    assert len(got.followups) == 1
    assert got.read().message["content"] == [{"type": "text", "text": "ok"}]


def test_a_call_to_a_blocked_repeat_runs_tool_is_held_and_answered_by_the_proxy() -> None:
    # SPEC §10: four identical rounds of `Bash ls`; the route blocks a fifth. The call comes
    # under a fresh native id, so only its tool's name holds it until its input decides.
    history: list[JSON] = []
    for n in range(4):
        call_id = f"toolu_0{n}"
        history += [assistant(tool_use(call_id, "Bash", LS)), results(call_id)]
    fifth = start() + tool(0, "toolu_05", "Bash", LS) + end()
    final = start() + text(0, "ok") + end("end_turn")
    got = run(request(*history), [fifth, final])
    assert len(got.followups) == 1
    assert got.read().tools == []


def test_a_streamed_duplicate_is_left_out_and_reported() -> None:
    args = {"pattern": "a"}
    upstream = start() + tool(0, "grep:3", "grep", args) + tool(1, "grep:3", "grep", args) + end()
    got = run(request(), [upstream])
    assert len(got.read().tools) == 1
    dropped: Any = [n for n in notes_of(got) if type(n).__name__ == "CallDropped"]
    assert [(d.choice, d.name, d.raw_id, d.reason) for d in dropped] == [
        (0, "grep", "grep:3", "duplicate_in_response")
    ]
