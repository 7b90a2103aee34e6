"""SPEC §3: ids the upstream receives (request direction), and the facts the response side
needs (SPEC §0 turn, §5 answered calls)."""

from __future__ import annotations

import copy
import re
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.chat.history import resolve_dialect, translate_request
from proxy.core.ids import fingerprint
from tests.chat.helpers import USER, assistant, hcall, request, tool_msg

ALNUM9 = re.compile(r"[A-Za-z0-9]{9}")


def upstream_call_ids(body: dict[str, Any]) -> list[str]:
    return [
        call["id"]
        for m in body["messages"]
        if isinstance(m, dict) and m.get("role") == "assistant"
        for call in m.get("tool_calls") or ()
        if isinstance(call, dict)
    ]


def tool_ids(body: dict[str, Any]) -> list[str]:
    return [m["tool_call_id"] for m in body["messages"] if m.get("role") == "tool"]


TWO_TURNS = [
    USER,
    assistant(hcall("call_1_0_aaaa1111", "read_file", '{"path":"a"}')),
    tool_msg("call_1_0_aaaa1111"),
    assistant(
        hcall("call_2_0_bbbb2222", "grep", '{"q":"x"}'),
        hcall("call_2_1_bbbb2222", "read_file", '{"path":"b"}'),
    ),
    tool_msg("call_2_0_bbbb2222"),
    tool_msg("call_2_1_bbbb2222"),
    {"role": "user", "content": "go on"},
]


# -- passthrough -------------------------------------------------------------------------------


def test_passthrough_forwards_unchanged() -> None:
    body = request(TWO_TURNS)
    snapshot = copy.deepcopy(body)
    tr = translate_request(body, "passthrough")
    assert not tr.changed
    assert tr.body == snapshot
    assert body == snapshot  # the caller's body is never mutated
    original = b'{"model": "gpt-4o",  "messages": [] }'  # odd spacing survives
    assert tr.to_bytes(original) is original


def test_passthrough_is_the_default_for_other_models() -> None:
    tr = translate_request(request(TWO_TURNS, model="gpt-4o"), "auto")
    assert tr.facts.dialect == "passthrough"
    assert not tr.changed


def test_int_ids_in_history_are_sent_as_strings() -> None:
    body = request([USER, assistant(hcall(5, "f")), tool_msg(5)])
    tr = translate_request(body, "passthrough")
    assert tr.changed
    assert upstream_call_ids(tr.body) == ["5"]
    assert tool_ids(tr.body) == ["5"]


def test_changed_request_serializes_with_same_keys_and_order() -> None:
    body = request([USER, assistant(hcall("call_0", "f", {"b": 1, "a": 2}))], temperature=0.2)
    tr = translate_request(body, "passthrough")
    assert tr.changed
    out = orjson.loads(tr.to_bytes(b"ignored"))
    assert list(out) == list(body)
    assert out["temperature"] == 0.2
    assert list(out["messages"][1]["tool_calls"][0]) == ["id", "type", "function"]


# -- kimi ------------------------------------------------------------------------------------


def test_kimi_numbers_calls_across_assistant_messages() -> None:
    tr = translate_request(request(TWO_TURNS, model="kimi-k2"), "auto")
    assert tr.facts.dialect == "kimi"
    assert tr.changed
    assert upstream_call_ids(tr.body) == [
        "functions.read_file:0",
        "functions.grep:1",
        "functions.read_file:2",
    ]
    assert tool_ids(tr.body) == upstream_call_ids(tr.body)


def test_kimi_tool_messages_follow_their_call_out_of_order() -> None:
    msgs = [
        USER,
        assistant(hcall("a", "f"), hcall("b", "g")),
        tool_msg("b"),
        tool_msg("a"),
    ]
    tr = translate_request(request(msgs), "kimi")
    assert upstream_call_ids(tr.body) == ["functions.f:0", "functions.g:1"]
    assert tool_ids(tr.body) == ["functions.g:1", "functions.f:0"]


def test_kimi_keeps_everything_but_ids() -> None:
    body = request(TWO_TURNS, model="kimi-k2")
    tr = translate_request(body, "kimi")
    for before, after in zip(body["messages"], tr.body["messages"], strict=True):
        if before.get("role") == "assistant":
            for b, a in zip(before["tool_calls"], after["tool_calls"], strict=True):
                assert {**b, "id": None} == {**a, "id": None}
        elif before.get("role") == "tool":
            assert {**before, "tool_call_id": None} == {**after, "tool_call_id": None}
        else:
            assert before == after


def test_kimi_history_already_in_kimi_shape_is_forwarded_byte_for_byte() -> None:
    msgs = [USER, assistant(hcall("functions.f:0", "f")), tool_msg("functions.f:0")]
    tr = translate_request(request(msgs, model="kimi-k2"), "auto")
    assert not tr.changed


@pytest.mark.parametrize(
    ("model", "dialect"),
    [
        ("kimi-k2-instruct", "kimi"),
        ("moonshotai/Kimi-K2-Instruct", "kimi"),
        ("MOONSHOT-v1-8k", "kimi"),
        ("accounts/fireworks/models/KIMI-k2", "kimi"),
        ("gpt-4o", "passthrough"),
        ("mistral-large", "passthrough"),
        ("", "passthrough"),
    ],
)
def test_auto_dialect_by_model_name(model: str, dialect: str) -> None:
    assert resolve_dialect("auto", model) == dialect
    assert translate_request(request([USER], model=model), "auto").facts.dialect == dialect


def test_auto_dialect_without_a_string_model() -> None:
    assert resolve_dialect("auto", None) == "passthrough"
    assert resolve_dialect("auto", 7) == "passthrough"


def test_explicit_dialect_wins_over_model_name() -> None:
    assert translate_request(request([USER], model="kimi-k2"), "passthrough").facts.dialect == (
        "passthrough"
    )
    assert translate_request(request([USER], model="gpt-4o"), "kimi").facts.dialect == "kimi"


# -- alnum9 ------------------------------------------------------------------------------------


def test_alnum9_ids_are_nine_alnum_and_tool_messages_follow() -> None:
    tr = translate_request(request(TWO_TURNS), "alnum9")
    ids = upstream_call_ids(tr.body)
    assert all(ALNUM9.fullmatch(i) for i in ids), ids
    assert len(set(ids)) == 3
    assert tool_ids(tr.body) == ids


def test_alnum9_is_deterministic() -> None:
    first = translate_request(request(TWO_TURNS), "alnum9").body
    second = translate_request(request(copy.deepcopy(TWO_TURNS)), "alnum9").body
    assert first == second


def test_alnum9_keeps_ids_that_already_fit() -> None:
    msgs = [USER, assistant(hcall("aB3dE5gH9", "f")), tool_msg("aB3dE5gH9")]
    tr = translate_request(request(msgs), "alnum9")
    assert not tr.changed
    assert upstream_call_ids(tr.body) == ["aB3dE5gH9"]


def test_alnum9_unique_in_request_even_for_repeated_client_ids() -> None:
    msgs = [
        USER,
        assistant(hcall("aB3dE5gH9", "f"), hcall("aB3dE5gH9", "g")),
        tool_msg("aB3dE5gH9"),
        tool_msg("aB3dE5gH9"),
        assistant(hcall("call_0", "f"), hcall("call_0", "f")),
        tool_msg("call_0"),
        tool_msg("call_0"),
    ]
    tr = translate_request(request(msgs), "alnum9")
    ids = upstream_call_ids(tr.body)
    assert ids[0] == "aB3dE5gH9"
    assert len(set(ids)) == 4
    assert all(ALNUM9.fullmatch(i) for i in ids)
    assert tool_ids(tr.body) == ids


# -- repair of colliding histories (every dialect) ------------------------------------------------

COLLIDING = [
    USER,
    assistant(hcall("call_0", "read_file", '{"path":"a"}')),
    tool_msg("call_0", "A"),
    assistant(hcall("call_0", "grep", '{"q":"x"}')),
    tool_msg("call_0", "B"),
]


def test_passthrough_repairs_two_turns_reusing_call_0() -> None:
    tr = translate_request(request(COLLIDING), "passthrough")
    assert tr.changed
    first, second = upstream_call_ids(tr.body)
    assert first == "call_0"  # the first use is kept
    assert second != "call_0"
    assert re.fullmatch(r"[A-Za-z0-9_-]{1,40}", second)
    # each tool message answers the nearest earlier call of its id
    assert tool_ids(tr.body) == [first, second]
    assert [m["content"] for m in tr.body["messages"] if m["role"] == "tool"] == ["A", "B"]


def test_repair_is_deterministic() -> None:
    a = translate_request(request(COLLIDING), "passthrough").body
    b = translate_request(request(copy.deepcopy(COLLIDING)), "passthrough").body
    assert a == b


def test_kimi_repairs_colliding_history_by_numbering() -> None:
    tr = translate_request(request(COLLIDING, model="kimi-k2"), "auto")
    assert upstream_call_ids(tr.body) == ["functions.read_file:0", "functions.grep:1"]
    assert tool_ids(tr.body) == ["functions.read_file:0", "functions.grep:1"]


def test_repair_same_id_twice_in_one_message() -> None:
    # Kimi coding endpoint: parallel calls both `grep:3`.
    msgs = [
        USER,
        assistant(hcall("grep:3", "grep", '{"q":"a"}'), hcall("grep:3", "grep", '{"q":"b"}')),
        tool_msg("grep:3", "A"),
        tool_msg("grep:3", "B"),
    ]
    tr = translate_request(request(msgs), "passthrough")
    ids = upstream_call_ids(tr.body)
    assert ids[0] == "grep:3"
    assert len(set(ids)) == 2
    assert tool_ids(tr.body) == ids  # first answer -> first call, second -> second


def test_tool_message_pairs_with_nearest_earlier_unanswered_call() -> None:
    # Neither call_0 was answered before the second turn; answers come after both.
    msgs = [
        USER,
        assistant(hcall("call_0", "a")),
        assistant(hcall("call_0", "b")),
        tool_msg("call_0", "for b"),
        tool_msg("call_0", "for a"),
    ]
    tr = translate_request(request(msgs), "kimi")
    assert upstream_call_ids(tr.body) == ["functions.a:0", "functions.b:1"]
    # nearest earlier assistant message first, then the older one
    assert tool_ids(tr.body) == ["functions.b:1", "functions.a:0"]


def test_unmatched_tool_message_is_left_alone() -> None:
    msgs = [USER, assistant(hcall("x", "f")), tool_msg("x"), tool_msg("nobody")]
    tr = translate_request(request(msgs), "kimi")
    assert tool_ids(tr.body) == ["functions.f:0", "nobody"]


def test_object_arguments_become_strings() -> None:
    msgs = [USER, assistant(hcall("call_abcdefgh123", "f", {"b": [1, 2], "a": "é"}))]
    tr = translate_request(request(msgs), "passthrough")
    assert tr.changed
    args = tr.body["messages"][1]["tool_calls"][0]["function"]["arguments"]
    assert isinstance(args, str)
    assert orjson.loads(args) == {"b": [1, 2], "a": "é"}
    assert upstream_call_ids(tr.body) == ["call_abcdefgh123"]


# -- facts ---------------------------------------------------------------------------------


def test_turn_is_one_plus_assistant_messages() -> None:
    assert translate_request(request([USER]), "auto").facts.turn == 1
    assert translate_request(request(TWO_TURNS), "auto").facts.turn == 3
    msgs = [USER, {"role": "assistant", "content": "hello"}, {"role": "user", "content": "x"}]
    assert translate_request(request(msgs), "auto").facts.turn == 2


def test_facts_answered_holds_upstream_ids_and_fingerprints() -> None:
    msgs = [
        USER,
        assistant(
            hcall("a", "read_file", '{"path": "x", "n": 1}'),
            hcall("b", "grep", '{"q":"y"}'),
        ),
        tool_msg("a"),  # b is never answered
    ]
    passthrough = translate_request(request(msgs), "passthrough").facts
    assert dict(passthrough.answered) == {"a": fingerprint("read_file", '{"n":1,"path":"x"}')}
    assert passthrough.client_ids == {"a", "b"}
    assert passthrough.tool_call_count == 2
    kimi = translate_request(request(msgs), "kimi").facts
    assert dict(kimi.answered) == {"functions.read_file:0": ("read_file", '{"n":1,"path":"x"}')}
    assert kimi.client_ids == {"a", "b"}


def test_facts_answered_uses_repaired_ids() -> None:
    facts = translate_request(request(COLLIDING), "passthrough").facts
    tr = translate_request(request(COLLIDING), "passthrough")
    first, second = upstream_call_ids(tr.body)
    assert dict(facts.answered) == {
        first: ("read_file", '{"path":"a"}'),
        second: ("grep", '{"q":"x"}'),
    }


def test_facts_n_and_offered_tools() -> None:
    body = request([USER], n=3, tools=[{"type": "function", "function": {"name": "f"}}])
    facts = translate_request(body, "auto").facts
    assert facts.choices == 3
    assert facts.offered_tools == {"f"}
    assert translate_request(request([USER], n=0), "auto").facts.choices == 1


def test_odd_messages_do_not_break_translation() -> None:
    msgs: list[Any] = [
        "not a message",
        None,
        {"role": "assistant", "tool_calls": "nope"},
        {"role": "assistant", "tool_calls": [None, 3, {"id": "x"}]},
        {"role": "tool"},
        {"role": "tool", "tool_call_id": ["x"]},
    ]
    tr = translate_request(request(msgs), "kimi")
    assert tr.facts.turn == 3
    translate_request(request(msgs), "alnum9")
    translate_request(request(msgs), "passthrough")


# -- properties ------------------------------------------------------------------------------

IDS = st.sampled_from(["call_0", "call_1", "x", "aB3dE5gH9", "functions.f:0", "grep:3", 5, None])
NAMES = st.sampled_from(["f", "grep", "read_file"])
ARGS = st.sampled_from(['{"a":1}', "{}", {"a": 1}, "", '{"b": [1,2]}'])

history_call = st.builds(hcall, IDS, NAMES, ARGS)
message = st.one_of(
    st.just(USER),
    st.lists(history_call, min_size=0, max_size=3).map(lambda cs: assistant(*cs)),
    IDS.map(tool_msg),
    st.just({"role": "assistant", "content": "text only"}),
)
histories = st.lists(message, max_size=10)
DIALECTS = st.sampled_from(["passthrough", "kimi", "alnum9"])


@settings(max_examples=120, deadline=None)
@given(msgs=histories, dialect=DIALECTS)
def test_translation_is_deterministic(msgs: list[Any], dialect: str) -> None:
    a = translate_request(request(copy.deepcopy(msgs)), dialect)
    b = translate_request(request(copy.deepcopy(msgs)), dialect)
    assert a.body == b.body
    assert a.changed == b.changed
    assert a.facts == b.facts


@settings(max_examples=120, deadline=None)
@given(msgs=histories, more=histories, dialect=DIALECTS)
def test_appending_never_changes_earlier_translation(
    msgs: list[Any], more: list[Any], dialect: str
) -> None:
    short = translate_request(request(copy.deepcopy(msgs)), dialect).body["messages"]
    full = translate_request(request(copy.deepcopy(msgs + more)), dialect).body["messages"]
    assert full[: len(short)] == short


@settings(max_examples=120, deadline=None)
@given(msgs=histories, dialect=DIALECTS)
def test_upstream_ids_unique_and_tool_messages_answer_a_call(msgs: list[Any], dialect: str) -> None:
    body = request(copy.deepcopy(msgs))
    original = copy.deepcopy(body)
    tr = translate_request(body, dialect)
    assert body == original  # the input is never mutated
    ids = upstream_call_ids(tr.body)
    assert len(set(ids)) == len(ids), ids
    if dialect == "alnum9":
        assert all(ALNUM9.fullmatch(i) for i in ids), ids
    if dialect == "kimi":
        assert ids == [f"functions.{c.name}:{k}" for k, c in enumerate(tr.translations)]
    seen: list[str] = []
    client_seen: set[Any] = set()
    for before, after in zip(original["messages"], tr.body["messages"], strict=True):
        if after.get("role") == "assistant" and isinstance(after.get("tool_calls"), list):
            seen += [c["id"] for c in after["tool_calls"]]
            for call in after["tool_calls"]:
                assert isinstance(call["function"]["arguments"], str)
            client_seen |= {
                str(c["id"]) if isinstance(c["id"], int) else c["id"] for c in before["tool_calls"]
            }
        elif after.get("role") == "tool":
            client = before["tool_call_id"]
            client = str(client) if isinstance(client, int) else client
            if client is not None and client in client_seen:
                assert after["tool_call_id"] in seen
            else:
                assert after["tool_call_id"] == before["tool_call_id"]
