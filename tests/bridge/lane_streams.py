"""What the bridges' text lanes (proxy/bridge/text_lane.py) are held to: Chat streams of
every shape, read whole, cut anywhere or one event a read, and the reference that turns the
lanes off."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

import orjson
from hypothesis import strategies as st

from proxy.bridge.text_lane import ChatTextLane
from tests.chat.helpers import chunk, finish, header, role, sse, text, usage_chunk
from tests.core.test_near_json import near_json

TEXTS = st.one_of(
    st.text(alphabet="ab é\u2028\x7f", min_size=1, max_size=6),
    st.sampled_from(['"', "\\", "\n", "\x01", "<", "[", "", "é", "a\tb", "\ue000", "\ue001"]),
)


@contextmanager
def no_lane() -> Iterator[None]:
    """The general path for every chunk: the reference."""
    with mock.patch.object(ChatTextLane, "of", classmethod(lambda cls, *args: None)):
        yield


@st.composite
def chat_events(draw: st.DrawFn) -> list[bytes]:
    """A Chat stream's events (each with its blank line): mostly content deltas alike, and
    among them deltas of other shapes, near-JSON, reasoning, calls, usage and comments."""
    events: list[bytes] = [sse(role(), done=False)]
    for _ in range(draw(st.integers(1, 12))):
        kind = draw(st.integers(0, 9))
        item: Any = text(draw(TEXTS))
        if kind == 1:  # other keys or values beside the content
            extra = draw(st.sampled_from([{"system_fingerprint": "fp"}, {"usage": None}]))
            item = text(draw(TEXTS), **extra)
        elif kind == 2:
            item = chunk({"reasoning_content": draw(TEXTS)})
        elif kind == 3:
            item = chunk({"content": draw(TEXTS), "role": "assistant"})
        elif kind == 4:
            item = draw(near_json(orjson.dumps(text(draw(TEXTS))))).join((b"data: ", b""))
        elif kind == 5:
            item = draw(st.sampled_from([b": keep-alive", b"data: [1]", b"event: x"]))
        elif kind == 6:
            item = text(draw(TEXTS), model=draw(st.sampled_from(["m", "other"])))
        elif kind == 7:  # the same text, written by hand with a space or an escape
            item = orjson.dumps(text("ab")).replace(
                b'"ab"', draw(st.sampled_from([b' "ab"', b'"a\\u0062"']))
            )
            item = b"data: " + item
        events.append(
            item if isinstance(item, bytes) and item.endswith(b"\n\n") else sse(item, done=False)
        )
    if draw(st.booleans()):
        call = header(0, "functions.shell:0", "shell", '{"cmd":"pwd"}')
        events.append(sse(chunk({"tool_calls": [call]}), done=False))
    if draw(st.booleans()):
        events.append(
            sse(finish(draw(st.sampled_from(["stop", "tool_calls", "length"]))), done=False)
        )
    if draw(st.booleans()):
        events.append(sse(usage_chunk(), done=False))
    if draw(st.booleans()):
        events.append(b"data: [DONE]\n\n")
    return events


@st.composite
def reads_of(draw: st.DrawFn, events: list[bytes]) -> list[bytes]:
    """The events read whole, one a read, or cut at any bytes."""
    how = draw(st.integers(0, 2))
    joined = b"".join(events)
    if how == 0:
        return [joined]
    if how == 1:
        return events
    cuts = sorted(draw(st.lists(st.integers(0, len(joined)), max_size=6)))
    return [joined[a:b] for a, b in itertools.pairwise([0, *cuts, len(joined)])]
