"""SPEC §2 and §4 rule by rule, on the streaming core: which id the client gets, what is sent
when (latency), what passes through untouched, id policies and n > 1."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest

from proxy.chat.stream import Carry, StreamSanitizer
from proxy.core.decide import ResponseIds
from proxy.core.guard import GuardState
from proxy.core.notes import IdRewritten
from tests.chat.helpers import (
    HEX,
    MISSING,
    USER,
    Setup,
    assert_well_formed,
    assistant,
    call_summary,
    calls,
    chunk,
    chunks_of,
    content_of,
    feed_reads,
    finish,
    finish_reasons,
    frag,
    hcall,
    header,
    minted,
    parse_sse,
    request,
    role,
    run,
    sse,
    text,
    tool,
    tool_deltas,
    tool_msg,
    usage_chunk,
)

NATIVE = "call_Ab3De5Gh7Jk9Lm1No3Pq5Rs"
NATIVE2 = "call_Zy9Xw8Vu7Ts6Rq5Po4Nm3Lk2"
ARGS = '{"path":"a.py"}'


def events_of(core: StreamSanitizer, data: bytes) -> list[Any]:
    return parse_sse(feed_reads(core, [data]))


def history(*turns: list[dict[str, Any]], model: str = "gpt-4o", **kw: Any) -> dict[str, Any]:
    msgs: list[Any] = [USER]
    for turn in turns:
        msgs += turn
    return request(msgs, model=model, **kw)


ANSWERED = [assistant(hcall(NATIVE, "read_file", ARGS)), tool_msg(NATIVE, "file a")]


# -- SPEC §2.1: kept verbatim ------------------------------------------------------------------


def test_native_id_is_kept_verbatim() -> None:
    data = sse(calls(header(0, NATIVE, "read_file", ARGS)), finish())
    result = run(Setup().core, data)
    assert call_summary(result.events) == [(NATIVE, "read_file", ARGS)]
    assert not any(isinstance(n, IdRewritten) for n in result.core.notes)


def test_native_id_already_in_history_is_rewritten() -> None:
    # The client holds NATIVE already (unanswered, so not a replay candidate).
    body = history(
        [assistant(hcall(NATIVE, "read_file", ARGS))], [{"role": "user", "content": "?"}]
    )
    data = sse(calls(header(0, NATIVE, "grep", '{"q":1}')), finish())
    result = run(Setup(body=body).core, data)
    assert call_summary(result.events) == [(minted(2, 0), "grep", '{"q":1}')]
    (note,) = [n for n in result.core.notes if isinstance(n, IdRewritten)]
    assert note.reason == "colliding"
    assert note.raw_id == NATIVE


def test_native_id_equal_to_an_earlier_call_in_this_response_is_rewritten() -> None:
    data = sse(
        calls(header(0, NATIVE, "read_file", ARGS)),
        calls(header(1, NATIVE, "read_file", '{"path":"b.py"}')),
        finish(),
    )
    result = run(Setup().core, data)
    assert call_summary(result.events) == [
        (NATIVE, "read_file", ARGS),
        (minted(1, 1), "read_file", '{"path":"b.py"}'),
    ]


# -- SPEC §2.2: rewritten ids ------------------------------------------------------------------


def test_rewritten_id_format_uses_turn_dense_idx_and_one_hex8_per_choice() -> None:
    turns = [
        [assistant(hcall(f"call_{t}_0_cafecafe", "f")), tool_msg(f"call_{t}_0_cafecafe")]
        for t in range(1, 4)
    ]
    body = history(*turns)  # three assistant messages: this is turn 4
    drawn: list[str] = []

    def source() -> str:
        drawn.append("0123")
        return "0123"

    facts = Setup(body=body).translated().facts
    core = StreamSanitizer(ResponseIds(facts, "auto", GuardState(), hex_source=source))
    data = sse(
        calls(header(0, "functions.f:0", "f", '{"x":1}')),
        calls(header(1, "functions.f:0", "f", '{"x":1}')),  # duplicate: dropped, takes no idx
        calls(header(2, "functions.g:2", "g", "{}")),
        finish(),
    )
    events = events_of(core, data)
    assert call_summary(events) == [
        (minted(4, 0, "functions.f:0", hex4="0123"), "f", '{"x":1}'),
        (minted(4, 1, "functions.g:2", hex4="0123"), "g", "{}"),
    ]
    assert drawn == ["0123"]  # one random half per response and choice
    assert_well_formed(events)


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (None, "absent"),
        ("functions.f:0", "invalid"),
        ("call_0", "counter_shaped"),
    ],
)
def test_rewrite_reasons(raw: Any, reason: str) -> None:
    item = tool(index=0, id=MISSING if raw is None else raw, type="function", name="f")
    item["function"]["arguments"] = "{}"
    core = Setup().core()
    events = events_of(core, sse(calls(item), finish()))
    assert call_summary(events) == [(minted(1, 0), "f", "{}")]
    (note,) = [n for n in core.notes if isinstance(n, IdRewritten)]
    assert note.reason == reason
    assert note.client_id == minted(1, 0)


def test_raw_id_equal_to_an_answered_upstream_id_with_new_arguments_gets_a_fresh_id() -> None:
    # SPEC §5: same id, different arguments: not a replay, a fresh call with a fresh client id.
    # In the alnum9 dialect the upstream id is a native-looking 9-character id the client has
    # never seen, so only this rule keeps it from reaching the client.
    body = history(
        [assistant(hcall("call_1_0_aaaa1111", "read_file", ARGS)), tool_msg("call_1_0_aaaa1111")]
    )
    setup = Setup(body=body, dialect="alnum9")
    (upstream_id,) = setup.translated().facts.answered
    data = sse(calls(header(0, upstream_id, "read_file", '{"path":"other.py"}')), finish())
    result = run(setup.core, data)
    assert call_summary(result.events) == [(minted(2, 0), "read_file", '{"path":"other.py"}')]


# -- SPEC §4: unchanged chunks leave as they arrived ----------------------------------------------


def test_a_stream_with_nothing_to_change_is_forwarded_byte_for_byte() -> None:
    data = sse(
        role(),
        text("Hello", logprobs=None),
        chunk({"content": " wörld 🎉"}, system_fingerprint="fp_1"),
        finish("stop"),
        usage_chunk(),
    )
    result = run(Setup().core, data)
    assert result.out == data


def test_unchanged_chunks_keep_their_exact_bytes_even_with_odd_spacing() -> None:
    first = json.dumps(role()).encode()  # json.dumps puts spaces after ':' and ','
    later = json.dumps(text("Hi \u2028 there"), ensure_ascii=True).encode()
    data = b"data: " + first + b"\n\ndata: " + later + b"\n\ndata: [DONE]\n\n"
    result = run(Setup().core, data)
    assert result.out.startswith(b"data: " + first + b"\n\ndata: " + later + b"\n\n")


def test_unchanged_chunks_are_reframed_in_openai_framing() -> None:
    data = sse(role(), text("Hi"), finish("stop"), eol="\r\n", space=False)
    assert run(Setup().core, data).out == sse(role(), text("Hi"), finish("stop"))


# -- SPEC §4: latency ------------------------------------------------------------------------


def feed_chunks(core: StreamSanitizer, *items: dict[str, Any]) -> list[list[Any]]:
    """Feed one chunk per read; the client events each read produced."""
    return [parse_sse(b"".join(core.feed(sse(item, done=False)))) for item in items]


def test_content_is_forwarded_as_it_arrives() -> None:
    core = Setup().core()
    outs = feed_chunks(core, role(), text("a"), text("b"))
    assert [content_of(o) for o in outs] == ["", "a", "b"]


def test_header_is_sent_as_soon_as_name_and_raw_id_are_known() -> None:
    core = Setup().core()
    outs = feed_chunks(
        core,
        calls(tool(index=0, type="function", name="read_file", arguments="")),  # no id yet
        calls(tool(index=0, id=NATIVE, arguments='{"pa')),  # id: header now
        calls(frag(0, 'th":"a.py"}')),
    )
    assert tool_deltas(outs[0]) == []
    assert tool_deltas(outs[1]) == [
        {
            "index": 0,
            "id": NATIVE,
            "type": "function",
            "function": {"name": "read_file", "arguments": '{"pa'},
        }
    ]
    assert tool_deltas(outs[2]) == [{"index": 0, "function": {"arguments": 'th":"a.py"}'}}]


def test_header_with_id_and_name_in_first_delta_goes_out_before_any_arguments() -> None:
    core = Setup().core()
    outs = feed_chunks(core, calls(header(0, "functions.f:0", "f")), calls(frag(0, "{")))
    assert tool_deltas(outs[0]) == [
        {
            "index": 0,
            "id": minted(1, 0),
            "type": "function",
            "function": {"name": "f", "arguments": ""},
        }
    ]
    assert tool_deltas(outs[1]) == [{"index": 0, "function": {"arguments": "{"}}]


def test_call_without_id_is_sent_when_its_arguments_complete() -> None:
    core = Setup().core()
    outs = feed_chunks(
        core,
        calls(tool(index=0, type="function", name="f", arguments='{"a":')),
        calls(frag(0, "1}")),
        calls(tool(index=1, type="function", name="g", arguments="{")),
    )
    assert tool_deltas(outs[0]) == []
    assert tool_deltas(outs[1]) == [
        {
            "index": 0,
            "id": minted(1, 0),
            "type": "function",
            "function": {"name": "f", "arguments": '{"a":1}'},
        }
    ]
    assert tool_deltas(outs[2]) == []  # still undecided
    rest = parse_sse(b"".join(core.feed(sse(calls(frag(1, "}")), done=False))))
    assert tool_deltas(rest)[0]["id"] == minted(1, 1)


@pytest.mark.parametrize(
    ("arguments", "reason", "delivered"),
    [(MISSING, "tool_calls", "{}"), ('{"a":', "length", '{"a":')],
    ids=["no-arguments", "cut-short"],
)
def test_call_without_id_is_sent_when_its_choice_finishes(
    arguments: Any, reason: str, delivered: str
) -> None:
    """SPEC §4: without a raw id, the header waits for complete arguments or the choice's end.
    Here the arguments never complete (a tool without parameters; a reply cut at max_tokens),
    so the finish is what sends the header (with "{}" for arguments that ended empty)."""
    core = Setup().core()
    outs = feed_chunks(core, calls(tool(index=0, type="function", name="f", arguments=arguments)))
    assert tool_deltas(outs[0]) == []
    last = parse_sse(b"".join(core.feed(sse(finish(reason), done=False))))
    assert tool_deltas(last) == [
        {
            "index": 0,
            "id": minted(1, 0, None),
            "type": "function",
            "function": {"name": "f", "arguments": delivered},
        }
    ]
    assert finish_reasons(last) == [reason]


def test_possible_replay_is_held_until_complete_then_released_if_not_a_replay() -> None:
    core = Setup(body=history(ANSWERED)).core()
    outs = feed_chunks(
        core,
        text("Reading again."),
        calls(header(0, NATIVE, "read_file")),
        calls(frag(0, '{"path":')),
        calls(frag(0, '"b.py"}')),  # complete, and different arguments: a fresh call
    )
    assert content_of(outs[0]) == "Reading again."
    assert tool_deltas(outs[1]) == tool_deltas(outs[2]) == []
    assert tool_deltas(outs[3]) == [
        {
            "index": 0,
            "id": minted(2, 0),
            "type": "function",
            "function": {"name": "read_file", "arguments": '{"path":"b.py"}'},
        }
    ]


def test_in_response_duplicate_is_held_until_complete_others_are_not() -> None:
    core = Setup().core()
    outs = feed_chunks(
        core,
        calls(header(0, NATIVE, "f")),
        calls(frag(0, '{"a":1}')),
        calls(header(1, NATIVE, "f")),  # same raw id again: held
        calls(frag(1, '{"a":')),
        calls(header(2, NATIVE2, "g")),  # an unrelated call is not held back
        calls(frag(1, "2}")),
    )
    assert tool_deltas(outs[0])[0]["id"] == NATIVE
    assert tool_deltas(outs[2]) == tool_deltas(outs[3]) == []
    assert tool_deltas(outs[4]) == [
        {"index": 1, "id": NATIVE2, "type": "function", "function": {"name": "g", "arguments": ""}}
    ]
    assert tool_deltas(outs[5]) == [
        {
            "index": 2,
            "id": minted(1, 2),
            "type": "function",
            "function": {"name": "f", "arguments": '{"a":2}'},
        }
    ]


def test_colliding_but_not_answered_id_is_not_held() -> None:
    body = history([assistant(hcall(NATIVE, "f"))], [{"role": "user", "content": "?"}])
    core = Setup(body=body).core()
    outs = feed_chunks(core, calls(header(0, NATIVE, "f")))
    assert tool_deltas(outs[0])[0]["id"] == minted(2, 0)


def test_held_call_that_appeared_first_can_reach_the_client_second() -> None:
    data = sse(
        calls(header(0, NATIVE, "read_file")),  # possible replay: held
        calls(header(1, NATIVE2, "grep", '{"q":1}')),  # delivered first
        calls(frag(0, '{"path":"b.py"}')),
        finish(),
    )
    result = run(Setup(body=history(ANSWERED)).core, data)
    assert_well_formed(result.events)
    assert call_summary(result.events) == [
        (NATIVE2, "grep", '{"q":1}'),
        (minted(2, 1), "read_file", '{"path":"b.py"}'),
    ]


# -- SPEC §4: everything else passes through -----------------------------------------------------


def test_fields_beside_tool_calls_survive_a_rebuilt_chunk() -> None:
    first = chunk(
        {
            "role": "assistant",
            "reasoning_content": "thinking",
            "refusal": None,
            "tool_calls": [header(0, NATIVE, "f", "{}")],
        },
        custom_field=1,
    )
    first["choices"][0]["logprobs"] = {"content": []}
    data = sse(first, finish())
    result = run(Setup().core, data)
    first = chunks_of(result.events)[0]
    assert first["custom_field"] == 1
    ch = first["choices"][0]
    assert ch["logprobs"] == {"content": []}
    assert ch["delta"]["reasoning_content"] == "thinking"
    assert ch["delta"]["role"] == "assistant"
    assert "refusal" in ch["delta"]


def test_event_lines_and_comments_pass_through() -> None:
    data = sse(
        b": ping",
        b"event: message\ndata: " + orjson.dumps(role()),
        b"event: message\ndata: " + orjson.dumps(calls(header(0, NATIVE, "f", "{}"))),
        finish(),
    )
    result = run(Setup().core, data)
    assert result.events[0].other == (": ping",)
    assert result.events[1].other == ("event: message",)
    assert result.events[2].other == ("event: message",)
    assert call_summary(result.events) == [(NATIVE, "f", "{}")]


def test_non_json_data_lines_become_comments_in_place_and_are_counted() -> None:
    # SPEC §4: the openai SDKs raise on a data line that is not JSON; a comment keeps its text.
    data = sse(
        b"data: not json {",
        role(),
        b"event: note\ndata: still not\ndata: json",
        text("x"),
        finish("stop"),
    )
    result = run(Setup().core, data)
    events = result.events
    assert [e.other for e in events[:3]] == [
        (": not json {",),
        (),
        # its `event:` line too: an SDK dispatches a named event even when it has no data
        (": event: note", ": still not", ": json"),
    ]
    assert [e.raw for e in events[:3:2]] == [None, None]  # no data line left in them
    assert content_of(events) == "x"
    assert result.core.non_json.count == 2
    assert_well_formed(events)


def test_empty_finish_reason_on_every_chunk_does_not_end_the_choice() -> None:
    data = sse(
        chunk({"role": "assistant", "content": ""}, ""),
        chunk({"tool_calls": [header(0, NATIVE, "f", "")]}, ""),
        chunk({"tool_calls": [frag(0, '{"a":1}')]}, ""),
        chunk({"tool_calls": [header(1, NATIVE2, "g")]}, ""),
        finish("stop"),
    )
    events = run(Setup().core, data).events
    assert call_summary(events) == [(NATIVE, "f", '{"a":1}'), (NATIVE2, "g", "{}")]
    assert finish_reasons(events) == ["tool_calls"]
    assert_well_formed(events)


def test_second_call_of_a_raw_id_waits_for_the_first_to_complete() -> None:
    core = Setup().core()
    outs = feed_chunks(
        core,
        calls(header(0, NATIVE, "f")),
        calls(header(1, NATIVE, "f", '{"a":1}')),  # complete, but the first one is not yet
        calls(frag(0, '{"a":1}')),  # now both are: the same call, dropped
        calls(header(2, NATIVE, "f", '{"a":2}')),  # complete, compared at once
    )
    assert tool_deltas(outs[0])[0]["id"] == NATIVE
    assert tool_deltas(outs[1]) == []
    assert tool_deltas(outs[2]) == [{"index": 0, "function": {"arguments": '{"a":1}'}}]
    assert tool_deltas(outs[3]) == [
        {
            "index": 1,
            "id": minted(1, 1),
            "type": "function",
            "function": {"name": "f", "arguments": '{"a":2}'},
        }
    ]


def test_finish_reason_length_is_kept_with_calls() -> None:
    data = sse(calls(header(0, NATIVE, "f", '{"a":1}')), finish("length"))
    assert finish_reasons(run(Setup().core, data).events) == ["length"]


def test_finish_reason_content_filter_without_calls_is_kept() -> None:
    data = sse(text("x"), finish("content_filter"))
    assert finish_reasons(run(Setup().core, data).events) == ["content_filter"]


def test_nothing_after_done_is_forwarded() -> None:
    data = sse(text("x"), finish("stop")) + sse(text("late"), done=True)
    events = run(Setup().core, data).events
    assert content_of(events) == "x"
    assert [e.is_done for e in events].count(True) == 1
    assert events[-1].is_done


def test_end_twice_and_feed_after_end_add_nothing() -> None:
    core = Setup().core()
    out = feed_reads(core, [sse(text("x"), done=False)])
    assert parse_sse(out)[-1].is_done
    assert core.end() == []
    assert core.feed(sse(text("y"))) == []


def test_empty_body_ends_with_done_only() -> None:
    events = parse_sse(feed_reads(Setup().core(), [b""]))
    assert [e.is_done for e in events] == [True]


# -- SPEC §2.5: id policies ------------------------------------------------------------------

POLICY_STREAM = sse(
    calls(header(0, NATIVE, "a", "{}")),
    calls(header(1, "functions.b:1", "b", "{}")),
    calls(header(2, "call_0", "c", "{}")),
    calls(tool(index=3, type="function", name="d", arguments="{}")),  # absent
    calls(header(4, "aB3dE5gH9", "e", "{}")),  # collides with the history
    finish(),
)
POLICY_HISTORY = history(
    [assistant(hcall("aB3dE5gH9", "x")), tool_msg("aB3dE5gH9")], [{"role": "user", "content": "?"}]
)


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        (
            "auto",
            [NATIVE, minted(2, 1), minted(2, 2), minted(2, 3), minted(2, 4)],
        ),
        (
            "always",
            [minted(2, 0), minted(2, 1), minted(2, 2), minted(2, 3), minted(2, 4)],
        ),
        (
            "collisions",
            [NATIVE, "functions.b:1", "call_0", minted(2, 3), minted(2, 4)],
        ),
        (
            "off",
            [NATIVE, "functions.b:1", "call_0", minted(2, 3), "aB3dE5gH9"],
        ),
    ],
)
def test_id_policies(policy: str, expected: list[str]) -> None:
    result = run(Setup(body=POLICY_HISTORY, policy=policy).core, POLICY_STREAM)
    assert [c[0] for c in call_summary(result.events)] == expected
    assert [c[1] for c in call_summary(result.events)] == ["a", "b", "c", "d", "e"]


def test_policy_off_keeps_even_a_repeated_raw_id() -> None:
    data = sse(
        calls(header(0, "x:0", "f", '{"a":1}')),
        calls(header(1, "x:0", "f", '{"a":2}')),
        finish(),
    )
    result = run(Setup(policy="off").core, data)
    assert call_summary(result.events) == [("x:0", "f", '{"a":1}'), ("x:0", "f", '{"a":2}')]


# -- n > 1 -----------------------------------------------------------------------------------


def test_choices_are_independent() -> None:
    data = sse(
        calls(header(0, "functions.f:0", "f"), choice=0),
        calls(header(0, "functions.f:0", "f"), choice=1),
        calls(frag(0, '{"a":1}'), choice=1),
        calls(frag(0, '{"a":0}'), choice=0),
        calls(header(1, "functions.g:1", "g", "{}"), choice=1),
        text("no calls here", choice=2),
        finish("tool_calls", choice=0),
        finish("stop", choice=1),
        finish("tool_calls", choice=2),
    )
    setup = Setup(body=request(n=3), hex_values=("aaaa", "bbbb", "cccc"))
    result = run(setup.core, data)
    events = result.events
    assert_well_formed(events)
    assert call_summary(events, 0) == [(minted(1, 0, hex4="aaaa"), "f", '{"a":0}')]
    assert call_summary(events, 1) == [
        (minted(1, 0, hex4="bbbb"), "f", '{"a":1}'),
        (minted(1, 1, hex4="bbbb"), "g", "{}"),
    ]
    assert call_summary(events, 2) == []
    assert finish_reasons(events, 0) == ["tool_calls"]
    assert finish_reasons(events, 1) == ["tool_calls"]
    assert finish_reasons(events, 2) == ["stop"]
    assert content_of(events, 2) == "no calls here"


def test_unfinished_choices_are_all_finished_at_the_end() -> None:
    data = sse(
        calls(header(0, NATIVE, "f", "{}"), choice=0),
        text("b", choice=1),
        done=False,
    )
    setup = Setup(body=request(n=2), hex_values=("aaaa", "bbbb"))
    events = run(setup.core, data).events
    assert_well_formed(events)
    assert finish_reasons(events, 0) == ["tool_calls"]
    assert finish_reasons(events, 1) == ["stop"]


def test_n_greater_than_one_drops_replays_without_followup() -> None:
    body = history(ANSWERED, n=2)
    data = sse(
        calls(header(0, NATIVE, "read_file", ARGS), choice=0),  # replay
        calls(header(0, NATIVE2, "grep", "{}"), choice=1),
        finish("tool_calls", choice=0),
        finish("tool_calls", choice=1),
    )
    setup = Setup(body=body, hex_values=("aaaa", "bbbb"))
    result = run(setup.core, data)
    assert result.core.followup is None
    assert result.core.error is None
    assert_well_formed(result.events)
    assert call_summary(result.events, 0) == []
    assert finish_reasons(result.events, 0) == ["stop"]
    assert call_summary(result.events, 1) == [(NATIVE2, "grep", "{}")]


def test_hex_is_fixed_per_response_not_global() -> None:
    a = Setup(hex_values=("1111",)).core()
    b = Setup(hex_values=("2222",)).core()
    data = sse(calls(header(0, "call_0", "f", "{}")), finish())
    assert call_summary(events_of(a, data))[0][0] == minted(1, 0, hex4="1111")
    assert call_summary(events_of(b, data))[0][0] == minted(1, 0, hex4="2222")
    assert HEX == "dead"


def test_call_recovered_from_text_and_a_native_call_in_one_delta_both_arrive() -> None:
    # With text tool-call recovery on, a delta whose content holds markup and which also
    # carries `tool_calls` must deliver both calls, each with its header (SPEC §4).
    body = request(tools=[{"type": "function", "function": {"name": n}} for n in ("read", "grep")])
    core = StreamSanitizer(Setup(body=body).ids(), text_tool_calls=True)
    content = 'x<tool_call>{"name": "read", "arguments": {"path": "a"}}</tool_call>'
    data = sse(
        chunk({"content": content, "tool_calls": [header(0, NATIVE, "grep", '{"q":1}')]}),
        finish("stop"),
    )
    events = events_of(core, data)
    assert_well_formed(events)
    assert call_summary(events) == [
        (minted(1, 0), "read", '{"path":"a"}'),
        (NATIVE, "grep", '{"q":1}'),
    ]
    assert content_of(events) == "x"


def test_continuation_round_tolerates_any_json_shape() -> None:
    carry = Carry("chatcmpl-0", 0, "m", {"total_tokens": 1})
    data = sse({"id": "x", "choices": True}, {"id": "x", "choices": 5}, {"choices": "abc"})
    events = run(Setup(carry=carry).core, data).events
    assert events[-1].is_done
    assert all(e.data["id"] == "chatcmpl-0" for e in events if e.is_chunk and "id" in e.data)


def test_hot_path_still_sees_spaced_and_repeated_finish_reasons() -> None:
    """The whole-read fast path must hand any non-compact finish_reason to the general path."""
    from proxy.chat.history import HistoryFacts
    from proxy.chat.stream import StreamSanitizer
    from proxy.core.decide import ResponseIds
    from proxy.core.guard import GuardState

    role = b'data: {"id":"x","choices":[{"index":0,"delta":{"role":"assistant"},"finish_reason":null}]}\n\n'
    call = (
        b'data: {"id":"x","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_0",'
        b'"type":"function","function":{"name":"f","arguments":"{}"}}]},"finish_reason":null}]}\n\n'
    )
    for finish_chunk in (
        b'data: {"id":"x","choices":[{"index":0,"delta":{},"finish_reason": "stop"}]}\n\n',
        b'data: {"id":"x","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n',
    ):
        core = StreamSanitizer(ResponseIds(HistoryFacts(), "auto", GuardState(), lambda: "ab12"))
        out = b"".join(core.feed(role) + core.feed(call) + core.feed(finish_chunk) + core.end())
        assert b'"finish_reason":"tool_calls"' in out, out
        assert out.count(b"[DONE]") == 1


def test_a_read_of_many_placeholder_chunks_is_forwarded_whole() -> None:
    """Until a chunk names the response, events go one by one through the general path;
    a read of thousands of nameless placeholders must neither recurse nor lose any."""
    from proxy.chat.history import HistoryFacts
    from proxy.chat.stream import StreamSanitizer
    from proxy.core.decide import ResponseIds
    from proxy.core.guard import GuardState

    placeholder = b'data: {"id":"","model":"","choices":[]}\n\n'
    content = (
        b'data: {"id":"c","choices":[{"index":0,"delta":{"content":"x"},"finish_reason":null}]}\n\n'
    )
    core = StreamSanitizer(ResponseIds(HistoryFacts(), "auto", GuardState()))
    data = placeholder * 5000 + content * 50
    assert b"".join(core.feed(data)) == data


def test_a_first_read_whose_chunks_all_pass_leaves_as_the_bytes_that_arrived() -> None:
    """The first chunk is parsed (it names the response); when it leaves unchanged and every
    later chunk of the read passes the rule, the read itself is the output, not a copy."""
    core = Setup().core()
    data = sse(role(), text("Hello"), text(" there"), done=False)
    assert core.feed(data)[0] is data


def test_a_first_read_with_a_chunk_to_change_is_not_left_whole() -> None:
    core = Setup().core()
    data = sse(role(), text("Hello"), finish("length"), chunk({"content": "x"}), done=False)
    out = b"".join(core.feed(data))
    assert out.startswith(sse(role(), text("Hello"), done=False))
    events = parse_sse(out)
    assert finish_reasons(events) == ["length"]
    assert content_of(events) == "Hellox"
