"""The streaming core's phases (STREAMING, FOLLOWUP, DONE, FAILED): what moves it from one to
the next, and that nothing leaves it after the stream ended (SPEC §4, §5)."""

from __future__ import annotations

import copy

from proxy.chat.stream import Carry, StreamPhase, StreamSanitizer
from tests.chat.helpers import (
    USER,
    Setup,
    assistant,
    calls,
    chunk,
    content_of,
    feed_reads,
    finish,
    hcall,
    header,
    parse_sse,
    request,
    role,
    sse,
    text,
    tool_msg,
    usage_chunk,
)

NATIVE = "call_Ab3De5Gh7Jk9Lm1No3Pq5Rs"
ARGS = '{"path":"a.py"}'


def answered(args: str = ARGS) -> Setup:
    history = [USER, assistant(hcall(NATIVE, "read_file", args)), tool_msg(NATIVE, "contents")]
    return Setup(body=request(history))


def test_a_plain_stream_is_done_at_done() -> None:
    core = Setup().core()
    assert core.phase is StreamPhase.STREAMING
    core.feed(sse(text("hi"), finish("stop")))
    assert core.phase is StreamPhase.DONE
    assert core.end() == []
    assert core.phase is StreamPhase.DONE


def test_a_body_that_ends_without_done_is_completed_by_end() -> None:
    core = Setup().core()
    out = core.feed(sse(text("hi"), done=False))
    assert core.phase is StreamPhase.STREAMING
    out += core.end()
    assert parse_sse(b"".join(out))[-1].is_done
    assert core.phase is StreamPhase.DONE


def test_a_replay_only_round_swallows_the_rest_and_asks_for_a_follow_up() -> None:
    core = answered().core()
    core.feed(sse(role(), calls(header(0, NATIVE, "read_file", ARGS)), finish(), done=False))
    assert core.phase is StreamPhase.FOLLOWUP
    assert core.feed(sse(text("swallowed"), usage_chunk(), done=False)) == []
    assert core.feed(b"data: [DONE]\n\n") == []
    assert core.phase is StreamPhase.DONE
    assert core.followup is not None
    assert core.followup.carry.usage is not None


def test_bytes_after_done_are_counted_not_forwarded() -> None:
    core = Setup().core()
    core.feed(sse(text("x")))
    late = sse(text("late"))
    assert core.feed(late) == []
    assert core.ignored_bytes == len(late)
    assert core.end() == []
    assert core.feed(b"more") == []
    assert core.ignored_bytes == len(late) + 4


def test_a_looping_replay_decided_at_the_bodys_end_is_the_error_event() -> None:
    # Two replays of an answered call with no arguments: held (possible replays) until the
    # body ends, when "{}" makes them complete and the second trips the breaker. That error
    # must come out of end() like any other, not escape it as an exception.
    setup = answered(args="{}")
    core = setup.core()
    data = sse(
        text("x"), calls(header(0, NATIVE, "read_file")), calls(header(1, NATIVE, "read_file"))
    )
    out = feed_reads(core, [data[: -len(b"data: [DONE]\n\n")]])
    events = parse_sse(out)
    assert core.error is not None
    assert core.phase is StreamPhase.FAILED
    assert events[-1].is_error and content_of(events) == "x"
    assert not any(e.is_done for e in events)
    assert core.end() == []


def test_nothing_follows_the_error_when_the_first_chunk_trips_the_breaker() -> None:
    # A first chunk without an id is handled on its own; the rest of its read must not be
    # processed once the breaker tripped (no content, no [DONE] after the error).
    nameless = chunk(
        {
            "tool_calls": [
                header(0, NATIVE, "read_file", ARGS),
                header(1, NATIVE, "read_file", ARGS),
            ]
        },
        id=None,
    )
    core = answered().core()
    events = parse_sse(b"".join(core.feed(sse(nameless, text("after")))))
    assert core.phase is StreamPhase.FAILED
    assert [e.is_error for e in events] == [True]
    assert core.nothing_released


def test_a_round_does_not_change_the_carry_it_was_given() -> None:
    # The shell may keep the carry (or build the next round from it): the core works on its
    # own copy and hands the next round's carry in FollowupNeeded.
    carry = Carry("chatcmpl-0", 0, "m", {"total_tokens": 1}, [sse(role(), done=False)])
    before = copy.deepcopy(carry)
    core = StreamSanitizer(Setup().ids(), carry=carry)
    events = parse_sse(b"".join(core.feed(sse(role(id="chatcmpl-2"), text("hi"), usage_chunk()))))
    assert carry == before
    assert events[0].data["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert [
        e.data["usage"]["total_tokens"] for e in events if e.is_chunk and e.data.get("usage")
    ] == [16]
