"""SPEC §8, non-streaming: `sanitize_message` and `merge_continuation` at the edges the mutation
audit found unpinned (a body that needs nothing passes byte for byte, blocks that are not
text or tool_use, the notes a whole message leaves, truthful stop reasons, and a follow-up
merged into the first round's identity)."""

from __future__ import annotations

from typing import Any

import orjson

from proxy.anthropic.exchange import AnthropicExchange
from proxy.core.events import Forward, OpenFollowup
from proxy.core.ids import mint_client_id
from proxy.core.notes import DeltaRepaired, Note
from proxy.core.rounds import RouteRules
from tests.anthropic.anthropic_wire import (
    assistant,
    entropy,
    request,
    results,
    tool_use,
    whole_message,
)

JSON = dict[str, Any]
LS = {"command": "ls"}
KIMI_MARKUP = (
    "<|tool_calls_section_begin|><|tool_call_begin|>functions.Bash:0"
    '<|tool_call_argument_begin|>{"command": "ls"}<|tool_call_end|>'
    "<|tool_calls_section_end|>"
)
# Turn 1's call as the client holds it: minted from `functions.Bash:0`.
MINTED = mint_client_id(1, 0, "abcd", "functions.Bash:0", "toolu_")
HISTORY = (assistant(tool_use(MINTED, "Bash", LS)), results(MINTED))


def message(*content: Any, reason: str | None = "end_turn", **extra: Any) -> JSON:
    return whole_message(*content, msg_id="msg_a", reason=reason, **extra)


def spaced(body: JSON) -> bytes:
    """The body as an upstream may write it: not as the proxy's encoder would."""
    return orjson.dumps(body, option=orjson.OPT_INDENT_2)


def answer(
    bodies: list[bytes], *history: JSON, rules: RouteRules | None = None
) -> tuple[Any, list[JSON], list[Note]]:
    """A non-streaming exchange over these upstream bodies: its last event, the follow-up
    bodies and the notes it reported."""
    body = request(*history, stream=False)
    exchange = AnthropicExchange(body, orjson.dumps(body), rules or RouteRules(), entropy)
    followups: list[JSON] = []
    for raw in bodies:
        exchange.begin_round(stream=False)
        assert exchange.feed(raw) == []
        [event] = exchange.end()
        if isinstance(event, OpenFollowup):
            followups.append(orjson.loads(event.body))
            continue
        notes, _ = exchange.report()
        return event, followups, notes
    raise AssertionError("the exchange asked for more rounds than the test gave")


def sent(event: Any) -> JSON:
    assert isinstance(event, Forward)
    out = orjson.loads(event.data)
    assert isinstance(out, dict)
    return out


def test_a_body_with_a_native_call_and_prose_passes_byte_for_byte() -> None:
    raw = spaced(
        message(
            {"type": "text", "text": "Looking."},
            tool_use("toolu_01A", "Bash", LS),
            {"type": "thinking", "thinking": "hm", "signature": "sig"},
            reason="tool_use",
        )
    )
    event, _, notes = answer([raw])
    assert isinstance(event, Forward) and event.data == raw
    assert notes == []


def test_a_body_whose_content_is_not_a_list_passes_byte_for_byte() -> None:
    raw = spaced(message(reason="end_turn") | {"content": None})
    event, _, _ = answer([raw])
    assert isinstance(event, Forward) and event.data == raw


def test_blocks_other_than_text_and_tool_use_are_kept_in_place() -> None:
    thinking = {"type": "thinking", "thinking": "hm", "signature": "sig"}
    odd = ["not a block", 7, {"type": "text", "text": None}]
    body = message(thinking, *odd, tool_use("functions.Bash:0", "Bash", LS), reason="tool_use")
    out = sent(answer([orjson.dumps(body)])[0])
    assert out["content"][:4] == [thinking, *odd]
    assert out["content"][4]["id"].startswith("toolu_1_0_")


def test_an_input_that_is_not_an_object_becomes_an_empty_one() -> None:
    call = {"type": "tool_use", "id": "toolu_01A", "name": "Bash", "input": [1, 2]}
    out = sent(answer([orjson.dumps(message(call, reason="tool_use"))])[0])
    assert out["content"][0]["input"] == {}


def test_a_kimi_id_alone_is_minted_and_reported() -> None:
    body = message(tool_use("functions.Bash:0", "Bash", LS), reason="tool_use")
    event, _, notes = answer([orjson.dumps(body)])
    [call] = sent(event)["content"]
    assert call["id"] == mint_client_id(1, 0, "abab", "functions.Bash:0", "toolu_")
    assert call["name"] == "Bash" and call["input"] == LS
    assert [type(n).__name__ for n in notes] == ["IdRewritten"]


def test_a_duplicate_call_is_dropped_and_reported() -> None:
    body = message(tool_use("toolu_01A", "Bash", LS), tool_use("toolu_01A", "Bash", LS))
    event, _, notes = answer([orjson.dumps(body | {"stop_reason": "tool_use"})])
    assert [b["id"] for b in sent(event)["content"]] == ["toolu_01A"]
    dropped = [n for n in notes if type(n).__name__ == "CallDropped"]
    assert len(dropped) == 1
    note: Any = dropped[0]
    assert (note.choice, note.name, note.raw_id) == (0, "Bash", "toolu_01A")
    assert note.reason == "duplicate_in_response"


def test_leaked_markup_becomes_a_named_call_after_its_prose() -> None:
    body = message({"type": "text", "text": "Sure. " + KIMI_MARKUP})
    event, _, notes = answer([orjson.dumps(body)])
    out = sent(event)
    assert out["content"][0] == {"type": "text", "text": "Sure. "}
    call = out["content"][1]
    assert call["type"] == "tool_use" and call["name"] == "Bash" and call["input"] == LS
    # The markup's own raw id is the minted id's digest, as in a stream.
    assert call["id"] == mint_client_id(1, 0, "abab", "functions.Bash:0", "toolu_")
    assert out["stop_reason"] == "tool_use"
    assert DeltaRepaired(kind="text_tool_call", detail="kimi") in notes


def test_markup_alone_becomes_a_call() -> None:
    out = sent(answer([orjson.dumps(message({"type": "text", "text": KIMI_MARKUP}))])[0])
    assert [b["type"] for b in out["content"]] == ["tool_use"]


def test_with_text_recovery_off_markup_stays_text() -> None:
    rules = RouteRules(text_tool_calls=False)
    raw = spaced(message({"type": "text", "text": KIMI_MARKUP}))
    event, _, _ = answer([raw], rules=rules)
    assert isinstance(event, Forward) and event.data == raw


def test_a_stop_reason_made_truthful_is_reported() -> None:
    body = message({"type": "text", "text": "No calls."}, reason="tool_use")
    event, _, notes = answer([orjson.dumps(body)])
    assert sent(event)["stop_reason"] == "end_turn"
    assert DeltaRepaired(kind="stop_reason", detail="tool_use -> end_turn") in notes


def test_max_tokens_after_a_call_is_kept() -> None:
    body = message(tool_use("toolu_01A", "Bash", LS), reason="max_tokens")
    raw = spaced(body)
    event, _, notes = answer([raw])
    assert isinstance(event, Forward) and event.data == raw
    assert notes == []


def test_a_replay_beside_a_new_call_needs_no_follow_up() -> None:
    body = message(
        tool_use("functions.Bash:0", "Bash", LS),
        tool_use("functions.Bash:1", "Bash", {"command": "pwd"}),
        reason="tool_use",
    )
    event, followups, _ = answer([orjson.dumps(body)], *HISTORY)
    assert followups == []
    calls = sent(event)["content"]
    assert [c["input"] for c in calls] == [{"command": "pwd"}]


def replay_then(final: JSON) -> JSON:
    replay = message(tool_use("functions.Bash:0", "Bash", LS), reason="tool_use")
    event, followups, _ = answer([orjson.dumps(replay), orjson.dumps(final)], *HISTORY)
    assert len(followups) == 1
    return sent(event)


def test_a_merged_message_keeps_the_first_rounds_id_and_model() -> None:
    final = message({"type": "text", "text": "Done."}) | {"id": "msg_b", "model": "kimi-k2-b"}
    out = replay_then(final)
    assert (out["id"], out["model"]) == ("msg_a", "kimi-k2")


def test_a_merged_message_takes_the_last_rounds_id_and_model_when_the_first_had_none() -> None:
    replay = message(tool_use("functions.Bash:0", "Bash", LS), reason="tool_use")
    del replay["id"], replay["model"]
    final = message({"type": "text", "text": "Done."}) | {"id": "msg_b", "model": "kimi-k2-b"}
    event, _, _ = answer([orjson.dumps(replay), orjson.dumps(final)], *HISTORY)
    out = sent(event)
    assert (out["id"], out["model"]) == ("msg_b", "kimi-k2-b")


def test_a_merged_message_whose_last_round_has_no_content_or_usage_is_merged() -> None:
    final = message() | {"content": None, "usage": None}
    out = replay_then(final)
    assert out["content"] == []
    assert out["usage"] == {"output_tokens": 5}


def test_an_empty_text_block_is_left_out_as_a_stream_leaves_it_out() -> None:
    body = message({"type": "text", "text": ""}, tool_use("toolu_01A", "Bash", LS))
    out = sent(answer([orjson.dumps(body | {"stop_reason": "tool_use"})])[0])
    assert [b["type"] for b in out["content"]] == ["tool_use"]
