"""SPEC §2, §3, §5, §8, §10 on the Responses request side: what the mutation audit found unpinned in
the translation of `input` (proxy/responses/request.py), the non-streamed response body
(proxy/responses/body.py) and the surface codec (proxy/responses/codec.py)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from proxy.core.errors import ClientRequestError
from proxy.core.events import Forward
from proxy.core.repeat import NOTE_AT
from proxy.core.rounds import RouteRules
from proxy.responses.codec import RESPONSES_CODEC
from proxy.responses.exchange import ResponsesExchange
from proxy.responses.request import offered_tools, translate_request
from tests.responses.helpers import KIMI_MARKUP, USER, entropy, request, run

ARGS = '{"command":"ls"}'


def _call(call_id: Any, **extra: Any) -> dict[str, Any]:
    item = {"type": "function_call", "call_id": call_id, "name": "bash", "arguments": ARGS}
    return {**item, **extra}


def _output(call_id: Any, output: str = "same") -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": call_id, "output": output}


def _rounds(outputs: list[str]) -> list[dict[str, Any]]:
    """One model turn per output: the same call under a fresh id, and its output."""
    items: list[dict[str, Any]] = []
    for n, text in enumerate(outputs):
        items += [_call(f"c{n}"), _output(f"c{n}", text)]
    return items


def _noted(items: list[Any], *guard: Any) -> bool:
    """Whether the repeat guard (`note` unless given) noted the last output item sent
    upstream (SPEC §10)."""
    return "[toolcall-proxy] Note" in _last_output(items, *guard)


def _last_output(items: list[Any], *guard: Any) -> str:
    """The last output item's `output` as sent upstream."""
    body = {"model": "m", "input": items}
    translated = translate_request(body, "passthrough", *(guard or ("note",)))
    sent = translated.body["input"]
    last = [i for i in sent if isinstance(i, dict) and i.get("type") == "function_call_output"][-1]
    return str(last["output"])


# --- request.py: the bytes sent upstream -------------------------------------------------


def test_a_translated_request_goes_upstream_as_the_translated_body() -> None:
    """request.TranslatedRequest.to_bytes__mutmut_1 (the original bytes) and _3 (`null`)."""
    body = {"model": "kimi-k2", "input": [USER, _call("call_a"), _output("call_a")]}
    raw = orjson.dumps(body)
    exchange = ResponsesExchange(body, raw, RouteRules(), entropy=entropy)
    sent = orjson.loads(exchange.upstream_request)
    assert [i.get("call_id") for i in sent["input"][1:]] == ["functions.bash:0"] * 2
    assert sent["model"] == "kimi-k2"


# --- request.py: what a call item tells the ledger ---------------------------------------


def test_a_call_without_a_name_gets_the_kimi_id_of_an_empty_name() -> None:
    """request.call_payload__mutmut_17 (the name kept: `functions.None:0`) and _18."""
    item = {"type": "function_call", "call_id": "call_a", "arguments": ARGS}
    translated = translate_request({"model": "m", "input": [USER, item]}, "kimi")
    assert translated.body["input"][1]["call_id"] == "functions.:0"


def test_a_call_item_carrying_a_role_is_still_a_call() -> None:
    """request.item_type__mutmut_5: any item with a `role` read as a message."""
    items = [USER, _call("call_a", role="assistant"), _output("call_a")]
    translated = translate_request({"model": "m", "input": items}, "kimi")
    assert [i["call_id"] for i in translated.body["input"][1:]] == ["functions.bash:0"] * 2


def test_a_replayed_custom_tool_call_is_matched_by_its_input() -> None:
    """SPEC §5: a custom tool call's `input` is its arguments (request.call_payload__mutmut_6,
    _8, _9, _12, _13: the history's custom call fingerprinted without its input)."""
    history = [
        {"type": "custom_tool_call", "call_id": "ctc_1", "name": "apply_patch", "input": "P"},
        {"type": "custom_tool_call_output", "call_id": "ctc_1", "output": "done"},
    ]
    upstream = {
        "id": "resp_up",
        "object": "response",
        "status": "completed",
        "output": [
            {"type": "custom_tool_call", "call_id": "ctc_1", "name": "apply_patch", "input": "P"}
        ],
    }
    result = run(request(*history, stream=False), orjson.dumps(upstream), stream=False)
    assert [r.raw_id for f in result.followups for r in f.replays] == ["ctc_1"]


# --- request.py: outputs and user input in the repeat guard (SPEC §10) -------------------


def test_identical_rounds_note_the_last_output_after_its_own_text() -> None:
    """request._output_target__mutmut_5: outputs not told to the ledger, so no round is
    whole and nothing is ever noted; request._with_repeat_note__mutmut_9 to _18: the note
    elsewhere, or without the output's text."""
    sent = _last_output([USER, *_rounds(["same"] * NOTE_AT)])
    assert sent.startswith("same") and "[toolcall-proxy] Note" in sent
    assert f"made {NOTE_AT} times" in sent and '"bash"' in sent


def test_rounds_whose_outputs_differ_are_not_noted() -> None:
    """request._output_target__mutmut_3: every output told as None, so all look equal."""
    assert not _noted([USER, *_rounds(["one", "two", "three"][:NOTE_AT])])


def test_an_easy_user_message_ends_a_run_of_identical_rounds() -> None:
    """An `{"role": "user"}` item without a type is user input (request.item_type__mutmut_6:
    only typed items read as messages)."""
    rounds = _rounds(["same"] * NOTE_AT)
    easy = {"role": "user", "content": "try something else"}
    assert not _noted([USER, *rounds[:2], easy, *rounds[2:]])
    typed = {"type": "message", "role": "user", "content": "try something else"}
    assert not _noted([USER, *rounds[:2], typed, *rounds[2:]])


def test_the_guard_is_off_unless_asked_and_off_means_off() -> None:
    """request.translate_request__mutmut_1, _2 (another default) and _39 (the route's mode
    not passed on)."""
    items = [USER, *_rounds(["same"] * NOTE_AT)]
    assert not translate_request({"model": "m", "input": items}, "passthrough").changed
    assert not _noted(items, "off")


def test_an_exempt_tool_is_not_noted() -> None:
    """request.translate_request__mutmut_43: the route's exempt globs not passed on."""
    assert not _noted([USER, *_rounds(["same"] * NOTE_AT)], "note", ("ba*",))


def test_a_stray_non_item_after_the_rounds_opens_no_model_turn() -> None:
    """request.is_model_made__mutmut_2: a non-dict item read as model-made opens an empty
    turn, which ends the run."""
    assert _noted([USER, *_rounds(["same"] * NOTE_AT), "stray"])


def test_an_assistant_message_is_a_model_turn_of_its_own() -> None:
    """An assistant message after the rounds is a turn without calls: the run is over
    (request.is_model_made__mutmut_8 to _16: the message not read as model-made)."""
    said = {"type": "message", "role": "assistant", "content": "I will stop here."}
    assert not _noted([USER, *_rounds(["same"] * NOTE_AT), said])


def test_offered_tools_skip_what_is_not_a_tool_and_a_tools_value_that_is_not_a_list() -> None:
    """request.offered_tools__mutmut_4 (a non-list `tools` listed: a number raises) and _16
    (the walk stopped at the first non-dict tool)."""
    assert offered_tools({"tools": 5}) == frozenset()
    tools = [{"type": "function", "name": "bash"}, "junk"]
    assert offered_tools({"tools": tools}) == frozenset({"bash"})


def test_offered_tools_walk_at_most_ten_thousand_tools() -> None:
    """The bound on the walk (request.offered_tools__mutmut_11: one more)."""
    tools = [{"type": "function", "name": f"t{n}"} for n in range(10_001)]
    names = offered_tools({"tools": tools})
    assert len(names) == 10_000 and "t0" not in names  # popped from the end: t0 is last


# --- request.py: an `input` that is not a list of items ---------------------------------


def test_a_string_input_is_forwarded_byte_for_byte() -> None:
    """request.translate_request__mutmut_27 (marked changed: re-serialized)."""
    raw = b'{"model": "m",  "input": "hi", "tools": []}'
    exchange = ResponsesExchange(orjson.loads(raw), raw, RouteRules(), entropy=entropy)
    assert exchange.upstream_request == raw


def test_a_string_input_request_still_recovers_calls_of_offered_tools_from_text() -> None:
    """SPEC §8: the offered tools are known without input items (request.
    translate_request__mutmut_18 to _20, _22, _24 to _26: no facts, or no tools)."""
    body = {"model": "m", "input": "run it", "tools": [{"type": "function", "name": "bash"}]}
    message = {
        "type": "message",
        "id": "msg_1",
        "role": "assistant",
        "content": [{"type": "output_text", "text": "ok " + KIMI_MARKUP}],
    }
    upstream = {"id": "resp_up", "object": "response", "status": "completed"}
    result = run(body, orjson.dumps({**upstream, "output": [message]}), stream=False)
    output = orjson.loads(result.body)["output"]
    assert [i["type"] for i in output] == ["message", "function_call"]
    assert output[1]["name"] == "bash" and output[1]["arguments"] == ARGS


def test_an_assistant_message_opening_a_round_is_not_user_input() -> None:
    """request._walk__mutmut_49: every message (the assistant's too) read as user input,
    which ends the run."""
    rounds = _rounds(["same"] * NOTE_AT)
    said = {"type": "message", "role": "assistant", "content": "once more"}
    assert _noted([USER, *rounds[:-2], said, *rounds[-2:]])


def test_a_history_opening_with_an_assistant_message_counts_it_as_a_turn() -> None:
    """SPEC §2.2: a minted client id carries the turn (request._walk__mutmut_6: the first
    model-made item taken as already inside a turn)."""
    said = {"type": "message", "role": "assistant", "content": "hello"}
    body = {"model": "m", "input": [said, USER], "tools": [{"type": "function", "name": "b"}]}
    upstream = {
        "id": "resp_up",
        "object": "response",
        "status": "completed",
        "output": [{"type": "function_call", "name": "b", "arguments": "{}"}],
    }
    result = run(body, orjson.dumps(upstream), stream=False)
    [call] = orjson.loads(result.body)["output"]
    assert call["call_id"].startswith("call_2_0_")


def test_items_after_a_stray_non_item_are_still_translated() -> None:
    """request._walk__mutmut_14: the walk stopped at the first non-dict item."""
    items = [USER, "stray", _call("call_a"), _output("call_a")]
    translated = translate_request({"model": "m", "input": items}, "kimi")
    assert [i["call_id"] for i in translated.body["input"][2:]] == ["functions.bash:0"] * 2


# --- request.py: what `sanitize --explain` is told of the translation ------------------


def test_translations_name_the_call_or_the_output_type_and_the_client_id() -> None:
    """request.translate_request__mutmut_64 to _75, _86, _89, _90: each translated call
    and output, as (client id or None, upstream id, name or type)."""
    items = [
        USER,
        _call("call_a"),
        _output("call_a"),
        {"type": "custom_tool_call", "call_id": 5, "input": "P"},
    ]
    translated = translate_request({"model": "m", "input": items}, "kimi")
    assert translated.translations == [
        ("call_a", "functions.bash:0", "bash"),
        ("call_a", "functions.bash:0", "function_call_output"),
        (None, "functions.:1", "custom_tool_call"),
    ]


# --- request.py: outputs of calls the request does not hold ------------------------------


def test_an_output_without_a_call_id_is_forwarded_as_it_is() -> None:
    """request._output_target__mutmut_9: a missing id decoded as if it were a string."""
    items = [USER, {"type": "function_call_output", "output": "x"}, _output(7)]
    translated = translate_request({"model": "m", "input": items}, "passthrough")
    assert translated.body["input"] == items and not translated.changed


def test_an_unanswered_call_under_an_encoded_id_does_not_make_its_raw_id_a_replay() -> None:
    """SPEC §5: only answered calls are replayed (request._issued_raw__mutmut_1: an
    unanswered call's encoded client id counted as issued)."""
    history = [_call("call_0a1b2c3d_up1"), {"role": "user", "content": "never mind"}]
    upstream = {
        "id": "resp_up",
        "object": "response",
        "status": "completed",
        "output": [_call("up1")],
    }
    result = run(request(*history, stream=False), orjson.dumps(upstream), stream=False)
    assert not result.followups
    [item] = orjson.loads(result.body)["output"]
    assert item["type"] == "function_call" and item["call_id"].endswith("up1")


# --- body.py: a non-streamed response's output (SPEC §8) ---------------------------------


def _text(*parts: Any, item_id: str = "msg_1", kind: str = "message") -> dict[str, Any]:
    return {"type": kind, "id": item_id, "role": "assistant", "content": list(parts)}


def _part(text: str, kind: str = "output_text") -> dict[str, Any]:
    return {"type": kind, "text": text}


def _answer(
    output: Any, body: dict[str, Any] | None = None, rules: RouteRules | None = None
) -> tuple[bytes, Any]:
    """What the client gets for a non-streamed upstream body with this `output`: its bytes
    (as written here, with spaces orjson would not write) and the exchange's run."""
    upstream = b'{"id": "resp_up", "object": "response", "status": "completed", "output": '
    raw = upstream + orjson.dumps(output) + b"}"
    result = run(body or request(stream=False), raw, stream=False, rules=rules)
    return raw, result


def _output_of(output: Any, **kw: Any) -> list[Any]:
    _, result = _answer(output, **kw)
    return list(orjson.loads(result.body)["output"])


def test_a_body_without_an_output_list_or_with_nothing_to_change_is_passed_on_as_it_is() -> None:
    """body.sanitize_output__mutmut_10 (no output list read as changed) and _17 (everything
    read as changed): the client gets the upstream's bytes."""
    for output in (None, [_text(_part("hello"))]):
        raw, result = _answer(output)
        assert result.body == raw


def test_a_non_item_in_output_is_dropped_and_what_follows_is_kept() -> None:
    """body.sanitize_output__mutmut_19, _20 (the drop not marked a change: the upstream's
    bytes) and _21 (the items after it lost)."""
    assert _output_of([7, _text(_part("hello"))]) == [_text(_part("hello"))]
    assert _output_of([_text(_part("hello")), 7]) == [_text(_part("hello"))]


def test_items_after_a_message_holding_a_text_call_are_kept() -> None:
    """body.sanitize_output__mutmut_62: the walk stopped after a recovered call."""
    call = {"type": "function_call", "call_id": "c1", "name": "bash", "arguments": ARGS}
    output = [_text(_part(KIMI_MARKUP)), call, _text(_part("hello"), item_id="msg_2")]
    kinds = [i["type"] for i in _output_of(output)]
    assert kinds == ["message", "function_call", "function_call", "message"]


def test_a_repeated_message_id_gets_a_fresh_id_of_the_same_prefix() -> None:
    """body.sanitize_output__mutmut_24 to _37: the other item id looked up, compared and set
    under `id`; the rename is a change."""
    first, second = _output_of([_text(_part("a")), _text(_part("b"))])
    assert first["id"] == "msg_1"
    assert second["id"] != "msg_1" and second["id"].startswith("msg_")
    assert second["content"] == [_part("b")]


def test_object_input_of_a_custom_tool_call_becomes_a_string_and_is_noted() -> None:
    """body._stringified__mutmut_2 to _11 (the custom call's `input` left an object) and
    _19 to _22 (the note's kind)."""
    call = {"type": "custom_tool_call", "call_id": "c1", "name": "p", "input": {"a": 1}}
    _, result = _answer([call])
    [item] = orjson.loads(result.body)["output"]
    assert item["input"] == '{"a":1}' and "arguments" not in item
    kinds = [n.kind for n in result.exchange.report()[0] if hasattr(n, "kind")]
    assert kinds == ["object_arguments"]


def test_a_text_call_is_recovered_and_noted_with_its_format() -> None:
    """body._recover__mutmut_38 (the text left around it joined with junk) and _39 to _45
    (the note: kind and format)."""
    _, result = _answer([_text(_part("ok " + KIMI_MARKUP + " done"))])
    message, call = orjson.loads(result.body)["output"]
    assert message["content"] == [_part("ok  done")]
    assert (call["type"], call["name"], call["arguments"]) == ("function_call", "bash", ARGS)
    notes = [(n.kind, n.detail) for n in result.exchange.report()[0] if hasattr(n, "kind")]
    assert notes == [("text_tool_call", "kimi")]


def test_text_calls_are_left_in_the_text_when_the_route_turns_recovery_off() -> None:
    """body.sanitize_output__mutmut_13: the offered tools used even when off."""
    raw, result = _answer([_text(_part(KIMI_MARKUP))], rules=RouteRules(text_tool_calls=False))
    assert result.body == raw


def test_only_output_text_parts_of_messages_are_scanned_and_other_parts_are_kept() -> None:
    """body._recover__mutmut_6 (items that are not messages scanned), _17 (parts of other
    types with a string text scanned), _18 (a non-dict part read as a dict), _27, _28 (the
    parts before a call's part lost or cut)."""
    other = _text(_part(KIMI_MARKUP), kind="mystery")
    assert _output_of([other]) == [other]
    parts = ["plain", _part(KIMI_MARKUP, "refusal"), _part("ok " + KIMI_MARKUP)]
    [message, call] = _output_of([_text(*parts)])
    assert message["content"] == ["plain", _part(KIMI_MARKUP, "refusal"), _part("ok ")]
    assert call["name"] == "bash"


def test_a_replayed_text_call_opens_a_follow_up_with_the_round_items_only() -> None:
    """SPEC §5: body.sanitize_output__mutmut_55 (a recovered replay's item kept nowhere),
    _100 and _102 (call items and non-items of the round sent again as round items)."""
    body = request(
        {"type": "function_call", "call_id": "functions.bash:0", "name": "bash", "arguments": ARGS},
        {"type": "function_call_output", "call_id": "functions.bash:0", "output": "done"},
        model="kimi-k2",
        stream=False,
    )
    reasoning = {"type": "reasoning", "id": "rs_1", "summary": []}
    for output, round_items in (
        # The message goes upstream as the client got it: its leaked call is the call item
        # after it, not its markup as well (the upstream would see the call twice).
        ([_text(_part("ok " + KIMI_MARKUP))], [_text(_part("ok "))]),
        ([7, reasoning, _call("functions.bash:0")], [reasoning]),
    ):
        _, result = _answer(output, body=body)
        [followup] = result.followups
        sent = orjson.loads(followup.body)["input"]
        assert sent[:3] == body["input"]
        assert sent[3:-2] == round_items
        assert [i["type"] for i in sent[-2:]] == ["function_call", "function_call_output"]


# --- codec.py: the Responses surface's body rule and exchange (SPEC §8) ------------------


def test_input_must_be_a_string_or_a_list_of_items() -> None:
    """codec.parse_responses_body__mutmut_1 to _17: the rule, its message and its code."""
    for body in ({"model": "m"}, {"input": "hi"}, {"input": [USER]}):
        assert RESPONSES_CODEC.parse_body(orjson.dumps(body)) == body
    for bad in (5, {"role": "user"}):
        with pytest.raises(ClientRequestError) as caught:
            RESPONSES_CODEC.parse_body(orjson.dumps({"input": bad}))
        assert caught.value.message == "'input' must be a string or a list of items"
        assert caught.value.code == "invalid_input" and caught.value.status == 400


def test_the_codecs_exchange_translates_the_body_and_mints_from_the_given_entropy() -> None:
    """codec.new_responses_exchange__mutmut_1 to _8: the body, bytes, rules and entropy the
    shell gives reach the exchange."""
    tool = {"type": "function", "name": "bash", "parameters": {"type": "object"}}
    body = {"model": "m", "input": "hi", "tools": [tool]}
    raw = orjson.dumps(body) + b" "
    rules = RouteRules(ids="always")
    exchange = RESPONSES_CODEC.new_exchange(body, raw, rules, lambda n: b"\xab" * n)
    assert exchange.upstream_request == raw
    exchange.begin_round(stream=False)
    call = {"type": "function_call", "call_id": "c1", "name": "bash", "arguments": ARGS}
    exchange.feed(orjson.dumps({"id": "r", "object": "response", "output": [call]}))
    [answer] = exchange.end()
    assert isinstance(answer, Forward)
    [item] = orjson.loads(answer.data)["output"]
    assert item["call_id"] == "call_abababab_c1"  # `always`: encoded, with that entropy
