"""The stream core's shortcuts take the decisions the general path takes: a bare argument
fragment routed straight to its open call, and a read that leaves whole when every event in it
left unchanged. Each test is a case where a shortcut taken wrongly changes what the client gets."""

from __future__ import annotations

from typing import Any
from unittest import mock

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.chat import stream
from proxy.chat.calls import ChoiceCalls
from proxy.chat.lane import FragmentLane
from proxy.chat.stream import StreamSanitizer
from proxy.core.notes import DeltaRepaired
from tests.chat.helpers import (
    Setup,
    assistant,
    call_summary,
    calls,
    chunk,
    content_of,
    feed_reads,
    finish,
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
ANSWERED = request(
    [
        {"role": "user", "content": "hi"},
        assistant(hcall(NATIVE, "read_file", ARGS)),
        tool_msg(NATIVE),
    ]
)


def kinds(notes: list[Any]) -> list[str]:
    return [n.kind for n in notes if isinstance(n, DeltaRepaired)]


# -- a bare fragment goes to the open call at its index ------------------------------------------


def test_fragments_of_a_held_call_wait_with_it_then_leave_in_its_header() -> None:
    # The slot is PENDING (a possible replay) while its fragments arrive.
    data = sse(
        calls(header(0, NATIVE, "read_file")),
        calls(frag(0, '{"path":')),
        calls(frag(0, '"b.py"}')),
        finish(),
    )
    result = run(Setup(body=ANSWERED).core, data)
    deltas = tool_deltas(result.events)
    assert deltas == [
        {
            "index": 0,
            "id": minted(2, 0),
            "type": "function",
            "function": {"name": "read_file", "arguments": '{"path":"b.py"}'},
        }
    ]


def test_fragments_of_a_live_call_leave_under_its_client_index() -> None:
    # The first call is a replay (dropped): the second call is the client's call 0, so its
    # fragments, at upstream index 1, must be renumbered.
    data = sse(
        calls(header(0, NATIVE, "read_file", ARGS)),
        calls(header(1, NATIVE2, "grep")),
        calls(frag(1, '{"q":')),
        calls(frag(1, "1}")),
        finish(),
    )
    result = run(Setup(body=ANSWERED, guard=True).core, data)
    assert call_summary(result.events) == [(NATIVE2, "grep", '{"q":1}')]
    assert {d["index"] for d in tool_deltas(result.events)} == {0}


def test_a_final_flush_of_the_whole_arguments_adds_only_what_is_new() -> None:
    data = sse(
        calls(header(0, NATIVE, "f", '{"a":')),
        calls(frag(0, '{"a":1}')),  # the whole arguments again, now complete
        finish(),
    )
    result = run(Setup().core, data)
    assert call_summary(result.events) == [(NATIVE, "f", '{"a":1}')]
    assert "arguments_flush" in kinds(result.core.notes)


def test_a_bare_fragment_at_a_complete_calls_index_goes_to_the_open_call() -> None:
    # SGLang numbers a call's deltas by its tool's position: index 0 is reused by the second
    # call while the first, at index 0 too, is complete.
    data = sse(
        calls(header(0, NATIVE, "f", '{"a":1}')),
        calls(tool(index=1, id=NATIVE2, name="g", arguments="")),
        calls(frag(0, '{"b":')),
        calls(frag(0, "2}")),
        finish(),
    )
    result = run(Setup().core, data)
    assert call_summary(result.events) == [(NATIVE, "f", '{"a":1}'), (NATIVE2, "g", '{"b":2}')]
    assert "index_remapped" in kinds(result.core.notes)


def test_a_fragment_with_an_empty_name_or_null_id_is_still_a_bare_fragment() -> None:
    data = sse(
        calls(header(0, NATIVE, "f", '{"a":')),
        calls(tool(index=0, id=None, function={"name": None, "arguments": "1"})),
        calls(tool(index=0, function={"name": "", "arguments": "}"})),
        finish(),
    )
    result = run(Setup().core, data)
    assert call_summary(result.events) == [(NATIVE, "f", '{"a":1}')]
    assert "repeated_fields" not in kinds(result.core.notes)


def test_a_named_delta_at_a_taken_index_after_completion_starts_another_call() -> None:
    data = sse(
        calls(header(0, NATIVE, "f", '{"a":1}')),
        calls(header(0, NATIVE2, "g", '{"b":')),  # servers that put every call at index 0
        calls(frag(0, "2}")),
        finish(),
    )
    result = run(Setup().core, data)
    assert call_summary(result.events) == [(NATIVE, "f", '{"a":1}'), (NATIVE2, "g", '{"b":2}')]


# -- a read leaves whole only when nothing in it changed -----------------------------------------


def test_a_changed_event_inside_a_read_is_not_lost_when_a_run_ends_the_read() -> None:
    # One read: the first chunk, content, a call whose counter-shaped id is rewritten, then
    # content the rule forwards to the end of the read.
    data = sse(
        role(), text("a"), calls(header(0, "0", "f", "{}")), text("b"), text("c"), done=False
    )
    core = Setup().core()
    out = b"".join(core.feed(data)) + b"".join(core.end())
    events = parse_sse(out)
    assert call_summary(events) == [(minted(1, 0), "f", "{}")]
    assert content_of(events) == "abc"


def test_a_changed_first_chunk_is_not_lost_when_the_rest_of_the_read_is_forwarded() -> None:
    data = sse(calls(header(0, "0", "f", "{}"), role="assistant"), text("b"), text("c"), done=False)
    core = Setup().core()
    out = b"".join(core.feed(data)) + b"".join(core.end())
    events = parse_sse(out)
    assert call_summary(events) == [(minted(1, 0), "f", "{}")]
    assert content_of(events) == "bc"


def test_an_unchanged_read_leaves_as_the_bytes_that_arrived() -> None:
    data = sse(role(), text("a"), text("b"), done=False)
    core = Setup(body=request(tools=[{"type": "function", "function": {"name": "f"}}])).core()
    assert b"".join(core.feed(data)) == data


# -- reads cut inside an event (a fast upstream's bursts) ------------------------------------


def _long_answer(call: bool) -> bytes:
    items = [role(), *(text(f"word{n} ") for n in range(120))]
    if call:
        items.append(calls(header(0, "functions.bash:0", "bash", '{"command":"ls"}')))
    return sse(*items, finish("tool_calls" if call else "stop"), usage_chunk())


@pytest.mark.parametrize("call", [False, True], ids=["text", "call"])
@pytest.mark.parametrize("tools", [False, True], ids=["no tools", "tools"])
@pytest.mark.parametrize("size", [7, 100, 333, 1000, 4096])
def test_reads_cut_inside_events_take_the_hot_path_and_send_what_the_decoder_would(
    size: int, tools: bool, call: bool
) -> None:
    """A read that ends inside an event, or begins inside the one the decoder holds, reads
    its whole events on the hot path; the client gets what byte-by-byte feeding (the
    decoder and the general path for every event) gives."""
    offered = [tool("bash")] if tools else None
    body = request(tools=offered, model="kimi-k2")
    data = _long_answer(call)
    reads = [data[at : at + size] for at in range(0, len(data), size)]
    assert any(not read.endswith(b"\n\n") for read in reads)
    cut, bytewise = Setup(body=body).core(), Setup(body=body).core()
    pieces = [piece for read in reads for piece in cut.feed(read)] + cut.end()
    expected = feed_reads(bytewise, [data[i : i + 1] for i in range(len(data))])
    assert parse_sse(b"".join(pieces)) == parse_sse(expected)
    assert content_of(parse_sse(b"".join(pieces))) == "".join(f"word{n} " for n in range(120))
    # The general path writes each event again, a piece of its own; the hot path sends the
    # whole events between two cuts as one piece, the bytes as they arrived.
    if size >= 1000:
        assert len(pieces) < 2 * len(reads) + 8 < 120


# -- a held call's fragments taken from their bytes (proxy/chat/lane.py) ----------------------

HELD_ID = "functions.read_file:0"
# The kimi dialect sends the answered call upstream as `functions.read_file:0`: a call under
# that raw id may be its replay, so it is held until its arguments are complete.
HELD_BODY = request(
    [
        {"role": "user", "content": "hi"},
        assistant(hcall(NATIVE, "read_file", ARGS)),
        tool_msg(NATIVE),
    ],
    model="kimi-k2",
)
PIECES = st.sampled_from(
    ['{"path":', '"a.py"}', '"b.py"', "}", "]", " ", "\n", '"é', '\\"', "{", "[", "1", "", ARGS]
)


def _fragment_event(piece: str, shape: str) -> dict[str, Any]:
    event = calls(frag(0, piece))
    if shape == "usage":
        event["usage"] = {"prompt_tokens": 1}
    elif shape == "null usage":
        event["usage"] = None
    elif shape == "logprobs":
        event["choices"][0]["logprobs"] = {"content": []}
    elif shape == "finish":
        event["choices"][0]["finish_reason"] = "tool_calls"
    elif shape == "other index":
        event = calls(frag(1, piece))
    elif shape == "typed":
        event = calls(tool(index=0, type="function", function={"arguments": piece}))
    elif shape == "named":
        event = calls(tool(index=0, function={"name": "read_file", "arguments": piece}))
    elif shape == "other envelope":
        event["id"] = "chatcmpl-2"
    return event


SHAPES = st.sampled_from(
    ["plain"] * 6
    + ["usage", "null usage", "logprobs", "finish", "other index", "typed", "named"]
    + ["other envelope"]
)


def _without_lane() -> Any:
    # The switch, not a replaced method: the core is compiled, its calls go direct (setup.py).
    return mock.patch.object(stream, "FRAGMENT_LANE", False)


def _run(data: bytes, reads: list[bytes]) -> tuple[StreamSanitizer, bytes]:
    core = Setup(body=HELD_BODY, dialect="kimi").core()
    out = b"".join(piece for read in reads for piece in core.feed(read))
    out += b"".join(core.end())
    return core, out


def _outcome(data: bytes, reads: list[bytes]) -> tuple[bytes, list[Any], Any, bool]:
    core, out = _run(data, reads)
    return out, core.notes, core.followup, core.error is None


@settings(max_examples=300, deadline=None)
@given(
    pieces=st.lists(st.tuples(PIECES, SHAPES), max_size=8),
    header_args=st.sampled_from(["", "{", ARGS]),
    by_event=st.booleans(),
)
def test_the_lane_sends_and_decides_what_the_general_path_does(
    pieces: list[tuple[str, str]], header_args: str, by_event: bool
) -> None:
    events = [
        role(),
        text("a"),
        calls(header(0, HELD_ID, "read_file", header_args)),
        *(_fragment_event(piece, shape) for piece, shape in pieces),
        finish(),
    ]
    data = sse(*events)
    reads = [sse(event, done=False) for event in events] + [b"data: [DONE]\n\n"]
    chosen = reads if by_event else [data]
    with _without_lane():
        expected = _outcome(data, chosen)
    assert _outcome(data, chosen) == expected


def test_the_lane_takes_a_held_calls_fragments_and_leaves_the_completing_one() -> None:
    data = sse(
        role(),
        text("a"),
        calls(header(0, HELD_ID, "read_file")),
        calls(frag(0, '{"path":')),
        calls(frag(0, '"b.py"')),
        calls(frag(0, "}")),
        finish(),
    )
    core, out = _run(data, [data])
    # The two fragments that cannot complete the arguments; the closing one is parsed.
    assert core._lane is not None and core._lane.taken == 2
    assert call_summary(parse_sse(out)) == [(minted(2, 0), "read_file", '{"path":"b.py"}')]
    assert core._lane.built == 1  # the completing one: built from the lane's chunk, not parsed
    with _without_lane():
        general, general_out = _run(data, [data])
        assert (general_out, general.notes) == (out, core.notes)
        assert general._lane is None
        # each fragment parsed: two more chunks than with the lane
        assert general.parsed_chunks == core.parsed_chunks + 2


def test_a_fragment_that_may_be_a_final_flush_is_not_taken() -> None:
    # `1` then `12`: no bracket ever opened, so `12` is a flush of `1` (complete JSON that
    # starts with the arguments); the lane must leave it to the general path.
    data = sse(
        calls(header(0, HELD_ID, "read_file")),
        calls(frag(0, "1")),
        calls(frag(0, "12")),
        finish(),
    )
    with _without_lane():
        expected = _outcome(data, [data])
    assert _outcome(data, [data]) == expected
    assert "arguments_flush" in kinds(expected[1])


# -- the first content taken from its bytes (tools offered: text calls are recovered) ----------

READ_FILE = {"type": "function", "function": {"name": "read_file", "parameters": {}}}
# Tools offered and a history that answered a call: the round may end in a follow-up, so the
# rule looks for usage too, as on the stream agents get.
TOOLS_BODY = request(
    [
        {"role": "user", "content": "hi"},
        assistant(hcall(NATIVE, "read_file", ARGS)),
        tool_msg(NATIVE),
    ],
    tools=[READ_FILE],
)
WHOLE_CALL = '{"name": "read_file", "arguments": {"path": "a.py"}}'
FIRST_TEXTS = st.sampled_from(
    [
        *("Hello", "a", "é, then more", " leading space", "\u00a0no-break space", "\n", "{"),
        *("[", WHOLE_CALL, '[{"name": "read_file"', "<tool_call>", "a<b", "x[y", 'say "hi"'),
        *("tab\there", "[TOOL_CALLS]", "``` json", "", "a\\b"),
    ]
)
LATER_TEXTS = st.sampled_from(
    [" more text", " {", WHOLE_CALL, "<tool_call>", "[TOOL_CALLS]", "done.", "\n"]
)
FIRST_SHAPES = st.sampled_from(
    ["plain"] * 4 + ["with role", "usage", "finish", "other index", "logprobs", "first"]
)


def _first_event(first: str, shape: str) -> dict[str, Any]:
    if shape == "with role":
        return chunk({"role": "assistant", "content": first})
    if shape == "usage":
        return text(first, usage={"prompt_tokens": 1})
    if shape == "finish":
        return text(first, finish="stop")
    if shape == "other index":
        return text(first, choice=1)
    event = text(first)
    if shape == "logprobs":
        event["choices"][0]["logprobs"] = {"content": []}
    return event


def _without_plain_start() -> Any:
    return mock.patch.object(stream, "PLAIN_START", False)


def _text_calls_run(reads: list[bytes]) -> tuple[StreamSanitizer, bytes]:
    core = StreamSanitizer(Setup(body=TOOLS_BODY).ids(), text_tool_calls=True)
    out = b"".join(piece for read in reads for piece in core.feed(read))
    return core, out + b"".join(core.end())


@settings(max_examples=400, deadline=None)
@given(
    first=FIRST_TEXTS,
    shape=FIRST_SHAPES,
    later=st.lists(LATER_TEXTS, max_size=4),
    by_event=st.booleans(),
)
def test_the_plain_start_sends_and_decides_what_the_general_path_does(
    first: str, shape: str, later: list[str], by_event: bool
) -> None:
    events = [_first_event(first, shape), *(text(t) for t in later), finish("stop")]
    if shape != "first":
        events.insert(0, role())
    data = sse(*events)
    reads = [sse(event, done=False) for event in events] + [b"data: [DONE]\n\n"]
    chosen = reads if by_event else [data]
    with _without_plain_start():
        general, expected = _text_calls_run(chosen)
    core, out = _text_calls_run(chosen)
    assert (out, core.notes, core.followup) == (expected, general.notes, general.followup)


def test_a_plain_first_content_is_taken_from_its_bytes() -> None:
    data = sse(role(), text("Hello"), text(" there"), text(" {"), finish("stop"))
    core, out = _text_calls_run([data])
    with _without_plain_start():
        general, general_out = _text_calls_run([data])
    assert out == general_out
    assert content_of(parse_sse(out)) == "Hello there {"
    # the first content is not parsed: the role chunk and the finish are
    assert general.parsed_chunks == core.parsed_chunks + 1 == 3


def test_a_first_content_that_may_be_a_whole_message_call_is_still_recovered() -> None:
    data = sse(role(), text(WHOLE_CALL[:20]), text(WHOLE_CALL[20:]), finish("stop"))
    _, out = _text_calls_run([data])
    events = parse_sse(out)
    assert [(name, args) for _, name, args in call_summary(events)] == [
        ("read_file", '{"path":"a.py"}')
    ]
    assert content_of(events) == ""


def test_later_json_is_text_once_a_plain_first_content_was_taken() -> None:
    data = sse(role(), text("Here: "), text(WHOLE_CALL), finish("stop"))
    core, out = _text_calls_run([data])
    assert core.parsed_chunks == 2  # the role chunk and the finish
    assert content_of(parse_sse(out)) == "Here: " + WHOLE_CALL
    assert call_summary(parse_sse(out)) == []


@pytest.mark.parametrize("fragment", ["}", '"é"}', '\\"}', " ] } "])
def test_the_chunk_left_to_the_general_path_is_what_its_bytes_parse_into(fragment: str) -> None:
    header_chunk = calls(header(0, HELD_ID, "read_file"), x_groq={"id": "req_1", "n": [1.5]})
    lane = FragmentLane.draw(header_chunk, header_chunk["choices"][0], _calls(), 0)
    assert lane is not None
    event = sse(calls(frag(0, fragment), x_groq={"id": "req_1", "n": [1.5]}), done=False)
    data = b"data: [DONE]\n\n" + event
    start = len(data) - len(event)
    assert not lane.take(data, start, len(data))  # may complete the call: left
    assert lane.left_chunk(data, start - 1) is None  # another event
    built = lane.left_chunk(data, start)
    assert built == orjson.loads(event[6:-2])
    assert list(built) == list(orjson.loads(event[6:-2]))  # the keys in their order
    assert lane.left_chunk(data, start) is None  # answered once


def _calls() -> ChoiceCalls:
    core = Setup(body=HELD_BODY, dialect="kimi").core()
    core.feed(sse(calls(header(0, HELD_ID, "read_file")), done=False))
    held = core._choices.held_call(0)
    assert held is not None
    return held[0]
