"""Property-based tests of the streaming core (SPEC §2, §4).

Generated upstream streams combine per-call quirks (index missing, every call at index 0, ids
repeated on every delta, ids absent or late or counter-shaped, object arguments, arguments cut
into random fragments, final flushes) with random content, line ends and reads. Whatever the
shape, the client must get the same events for any split, valid unique ids, and arguments
that parse to what the generator meant. Fuzzing with random bytes and random JSON shapes
checks that nothing escapes feed/end and that the output stays a well-framed stream.
"""

from __future__ import annotations

import itertools
import json
import os
from collections import Counter
from dataclasses import dataclass
from typing import Any

import orjson
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from proxy.chat.stream import Carry
from tests.chat.helpers import (
    CLIENT_ID_RE,
    MISSING,
    Setup,
    assert_well_formed,
    chunk,
    content_of,
    feed_reads,
    finish_reasons,
    minted,
    parse_sse,
    reassemble,
    sse,
    tool,
    usage_chunk,
)

# CORE_PROPERTY_EXAMPLES=5000 for a deeper local run; the default keeps the suite quick.
EXAMPLES = int(os.environ.get("CORE_PROPERTY_EXAMPLES", "120"))
SETTINGS = settings(
    max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)

# -- generating upstream streams ------------------------------------------------------------

NAMES = ["read_file", "grep", "run_shell_command", "ls", "now"]
ID_STYLES = [
    "native",  # unique, kept verbatim
    "counter",  # call_<k>: rewritten
    "kimi",  # functions.<name>:<k>: rewritten
    "small_int",  # bare integer k: rewritten
    "big_int",  # LM Studio-like integer: kept as its decimal string
    "absent",  # no id key
    "empty",  # ""
    "late",  # native id only on the second delta
    "null_later",  # native id, then the string "null" on continuation deltas
]
ARG_STYLES = ["fragments", "whole_string", "object", "flush"]
EMPTY_STYLES = ["", None, MISSING, "{}", {}]

json_leaf = (
    st.none()
    | st.booleans()
    | st.integers(-(10**6), 10**6)
    | st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=8)
)
json_value = st.recursive(
    json_leaf,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)
arguments = st.dictionaries(
    st.sampled_from(["path", "pattern", "cmd", "n", "é", "x y"]), json_value, max_size=3
)


@dataclass
class GenCall:
    name: str
    args: dict[str, Any]
    id_style: str
    arg_style: str
    empty_style: Any
    cuts: list[int]
    repeat_fields: bool


@dataclass
class GenStream:
    mode: str  # "explicit", "missing", "all_zero"
    base: int  # first index in explicit mode (servers starting at 1)
    calls: list[GenCall]
    content: list[str]
    interleave: list[int]
    # (k, call): a second call with call k's raw id, name and arguments, formatted and cut
    # differently: an in-response duplicate that the client must not see (SPEC §2.4)
    dups: list[tuple[int, GenCall]]
    finish: Any
    done: bool
    usage: bool


@st.composite
def gen_call(draw: Any, mode: str) -> GenCall:
    styles = ID_STYLES
    if mode == "all_zero":
        # at a shared index only a name with a new id tells calls apart (SPEC §4)
        styles = ["native", "counter", "kimi", "small_int", "big_int", "null_later"]
    args = draw(arguments)
    return GenCall(
        name=draw(st.sampled_from(NAMES)),
        args=args,
        id_style=draw(st.sampled_from(styles)),
        arg_style=draw(st.sampled_from(ARG_STYLES if mode != "missing" else ARG_STYLES[:3])),
        empty_style=draw(st.sampled_from(EMPTY_STYLES)),
        cuts=draw(st.lists(st.integers(0, 200), max_size=4)),
        repeat_fields=mode != "missing" and draw(st.booleans()),
    )


@st.composite
def gen_stream(draw: Any) -> GenStream:
    mode = draw(st.sampled_from(["explicit", "missing", "all_zero"]))
    n = draw(st.integers(0, 4))
    calls = [draw(gen_call(mode)) for _ in range(n)]
    content = draw(st.lists(st.text(max_size=6), max_size=3))
    interleave = draw(st.lists(st.integers(0, 5), max_size=40)) if mode == "explicit" else []
    dups = []
    if mode != "all_zero":  # at a shared index the same id continues the call (SPEC §4)
        for k in draw(st.lists(st.integers(0, max(n - 1, 0)), max_size=2 if n else 0)):
            if calls[k].id_style in ("absent", "empty", "late"):
                continue  # without an id there is nothing to tell a duplicate by
            variant = draw(gen_call(mode))
            dups.append(
                (
                    k,
                    GenCall(
                        calls[k].name,
                        calls[k].args,
                        calls[k].id_style,
                        variant.arg_style,
                        variant.empty_style,
                        variant.cuts,
                        variant.repeat_fields,
                    ),
                )
            )
    return GenStream(
        mode=mode,
        base=draw(st.integers(0, 2)) if mode == "explicit" else 0,
        calls=calls,
        content=content,
        interleave=interleave,
        dups=dups,
        finish=draw(st.sampled_from(["tool_calls", "stop", None])),
        done=draw(st.booleans()),
        usage=draw(st.booleans()),
    )


def raw_id_of(call: GenCall, k: int) -> Any:
    return {
        "native": f"call_nat{k}Q9x8Y7z6W5v4U3t2",
        "counter": f"call_{k}",
        "kimi": f"functions.{call.name}:{k}",
        "small_int": k,
        "big_int": 918273640 + k,
        "absent": MISSING,
        "empty": "",
        "late": f"call_late{k}R1s2T3u4V5w6",
        "null_later": f"call_nl{k}A1b2C3d4E5f6G7",
    }[call.id_style]


def expected_client_id(call: GenCall, k: int) -> str | None:
    """The id the client must see when the rules make it certain (None: a minted id)."""
    if call.id_style in ("native", "late", "null_later"):
        return str(raw_id_of(call, k))
    if call.id_style == "big_int":
        return str(918273640 + k)
    return None


def cut(text: str, cuts: list[int]) -> list[str]:
    points = sorted({c % (len(text) + 1) for c in cuts} | {0, len(text)})
    return [text[a:b] for a, b in itertools.pairwise(points) if text[a:b]]


def deltas_of(call: GenCall, k: int, index: Any) -> list[dict[str, Any]]:
    """The tool-call deltas of one call (call k's raw id), in order."""
    raw = raw_id_of(call, k)
    text = json.dumps(call.args, ensure_ascii=False)
    if not call.args:
        pieces: list[Any] = [call.empty_style]
    elif call.arg_style == "object":
        pieces = [call.args]
    elif call.arg_style == "whole_string":
        pieces = [text]
    else:
        pieces = cut(text, call.cuts) or [text]
    first_id = MISSING if call.id_style == "late" else raw
    out = [tool(index=index, id=first_id, type="function", name=call.name, arguments="")]
    for i, piece in enumerate(pieces):
        item = tool(index=index, arguments=piece)
        if call.id_style == "late" and i == 0:
            item["id"] = raw
        elif call.id_style == "null_later":
            item["id"] = "null"
        if call.repeat_fields:
            item.update(id=first_id if first_id is not MISSING else raw, type="function")
            item["function"] = {"name": call.name, **item.get("function", {})}
            if item["id"] is MISSING:
                del item["id"]
        out.append(item)
    if call.id_style == "late" and len(out) == 1:
        out.append(tool(index=index, id=raw))
    if call.arg_style == "flush" and call.args:
        out.append(tool(index=index, arguments=text))  # the whole arguments once more
    return out


def upstream_chunks(gen: GenStream) -> list[dict[str, Any]]:
    chunks: list[dict[str, Any]] = [chunk({"role": "assistant", "content": ""})]
    chunks += [chunk({"content": c}) for c in gen.content]
    everything = [*enumerate(gen.calls), *gen.dups]
    per_call = [
        deltas_of(c, k, {"explicit": gen.base + pos, "missing": MISSING, "all_zero": 0}[gen.mode])
        for pos, (k, c) in enumerate(everything)
    ]
    if gen.mode == "explicit" and per_call:
        # interleave fragments of parallel calls, each call's own order kept
        queues = [list(d) for d in per_call]
        for pick in gen.interleave:
            live = [q for q in queues if q]
            if not live:
                break
            chunks.append(chunk({"tool_calls": [live[pick % len(live)].pop(0)]}))
        for q in queues:
            chunks += [chunk({"tool_calls": [d]}) for d in q]
    else:
        for deltas in per_call:
            chunks += [chunk({"tool_calls": [d]}) for d in deltas]
    if gen.finish is not None:
        chunks.append(chunk({}, gen.finish))
    if gen.usage:
        chunks.append(usage_chunk())
    return chunks


def encode(gen: GenStream, eol: str) -> bytes:
    return sse(*upstream_chunks(gen), done=gen.done, eol=eol)


def reads_of(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in itertools.pairwise(points)]


# -- the property ------------------------------------------------------------------------------


@SETTINGS
@given(
    gen=gen_stream(),
    eol=st.sampled_from(["\n", "\r\n", "\r"]),
    cuts=st.lists(st.integers(0, 10**6), max_size=12),
)
def test_generated_streams(gen: GenStream, eol: str, cuts: list[int]) -> None:
    data = encode(gen, eol)
    whole = feed_reads(Setup().core(), [data])
    split = feed_reads(Setup().core(), reads_of(data, cuts))
    lf = feed_reads(Setup().core(), [encode(gen, "\n")])
    events = parse_sse(whole)
    assert parse_sse(split) == events  # the same client events whatever the reads
    assert parse_sse(lf) == events  # ... and whatever the line ends
    assert_well_formed(events)

    delivered = reassemble(events)
    ids = [c["id"] for c in delivered]
    assert len(set(ids)) == len(ids)
    assert all(CLIENT_ID_RE.fullmatch(i) for i in ids)
    got = Counter(
        (
            c["function"]["name"],
            orjson.dumps(json.loads(c["function"]["arguments"]), option=orjson.OPT_SORT_KEYS),
        )
        for c in delivered
    )
    meant = Counter((c.name, orjson.dumps(c.args, option=orjson.OPT_SORT_KEYS)) for c in gen.calls)
    assert got == meant
    by_id = {c["id"]: c for c in delivered}
    for k, call in enumerate(gen.calls):
        expected = expected_client_id(call, k)
        if expected is not None:
            assert expected in by_id, (expected, ids)
            assert by_id[expected]["function"]["name"] == call.name
            assert json.loads(by_id[expected]["function"]["arguments"]) == call.args
    for index, c in enumerate(delivered):
        if c["id"] not in {expected_client_id(call, k) for k, call in enumerate(gen.calls)}:
            assert c["id"] == minted(1, index)
    assert content_of(events) == "".join(gen.content)
    assert finish_reasons(events) == (["tool_calls"] if gen.calls else ["stop"])


# -- fuzzing -----------------------------------------------------------------------------------


def framed_events(out: bytes) -> list[bytes]:
    """Split the client stream into events without trusting the proxy's decoder: each event
    is `\\n`-separated lines ending in a blank line."""
    assert b"\r" not in out
    if not out:
        return []
    assert out.endswith(b"\n\n")
    blocks = out[:-2].split(b"\n\n")
    assert all(blocks), "empty event"
    return blocks


def assert_stream_ends_properly(out: bytes) -> None:
    blocks = framed_events(out)
    assert blocks
    last = blocks[-1]
    if last == b"data: [DONE]":
        assert blocks.count(b"data: [DONE]") == 1
    else:
        assert last.startswith(b"data: "), last
        assert "error" in orjson.loads(last[6:]), last


@settings(max_examples=EXAMPLES * 5 // 2, deadline=None)
@given(data=st.binary(max_size=300), cuts=st.lists(st.integers(0, 400), max_size=6))
def test_random_bytes_never_escape(data: bytes, cuts: list[int]) -> None:
    core = Setup().core()
    out = feed_reads(core, reads_of(data, cuts))
    assert_stream_ends_properly(out)


@settings(max_examples=EXAMPLES * 5 // 3, deadline=None)
@given(
    lines=st.lists(
        st.one_of(
            st.binary(max_size=40).map(lambda b: b"data: " + b.replace(b"\n", b"")),
            st.sampled_from([b"data: [DONE]", b": ping", b"event: x", b"", b"data:{}"]),
            st.builds(
                lambda d: b"data: " + orjson.dumps(d),
                st.fixed_dictionaries({"choices": st.lists(json_value, max_size=2)}),
            ),
        ),
        max_size=12,
    ),
    eol=st.sampled_from([b"\n", b"\r\n", b"\r"]),
)
def test_random_lines_never_escape(lines: list[bytes], eol: bytes) -> None:
    data = eol.join(lines) + eol
    out = feed_reads(Setup().core(), [data])
    assert_stream_ends_properly(out)
    assert feed_reads(Setup().core(), [data[i : i + 1] for i in range(len(data))]) == out


tool_item = st.one_of(
    json_value,
    st.fixed_dictionaries(
        {},
        optional={
            "index": st.one_of(st.integers(-2, 3), st.none(), st.text(max_size=2), st.booleans()),
            "id": st.one_of(
                st.sampled_from(["call_0", "", "null", "functions.f:0", "call_Ab3De5Gh7Jk9"]),
                st.integers(-3, 3),
                json_value,
            ),
            "type": st.one_of(st.just("function"), json_value),
            "function": st.one_of(
                json_value,
                st.fixed_dictionaries(
                    {},
                    optional={
                        "name": st.one_of(st.sampled_from(["f", "g", ""]), json_value),
                        "arguments": st.one_of(
                            st.sampled_from(['{"a":1}', "{", "}", '"x"', "", "[1]"]), json_value
                        ),
                    },
                ),
            ),
        },
    ),
)
delta = st.fixed_dictionaries(
    {},
    optional={
        "role": st.just("assistant"),
        "content": st.one_of(st.text(max_size=5), st.none(), json_value),
        "tool_calls": st.one_of(st.lists(tool_item, max_size=3), tool_item),
    },
)
choice = st.fixed_dictionaries(
    {},
    optional={
        "index": st.one_of(st.integers(0, 2), json_value),
        "delta": st.one_of(delta, json_value),
        "finish_reason": st.one_of(
            st.sampled_from(["stop", "tool_calls", "length", None]), json_value
        ),
    },
)
chunk_shape = st.fixed_dictionaries(
    {
        "id": st.one_of(st.just("chatcmpl-1"), st.just(""), json_value),
        "choices": st.one_of(st.lists(choice, max_size=2), json_value),
    },
    optional={
        "usage": st.one_of(st.fixed_dictionaries({"total_tokens": st.integers(0, 9)}), json_value),
        "model": json_value,
    },
)


@dataclass
class Shape:
    chunks: list[Any]
    guard_history: bool
    n: int


@settings(max_examples=EXAMPLES * 2, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    chunks=st.lists(chunk_shape, max_size=8),
    history=st.booleans(),
    n=st.sampled_from([None, 2]),
    done=st.booleans(),
    cuts=st.lists(st.integers(0, 5000), max_size=5),
    continuation=st.booleans(),
)
def test_random_json_shapes_never_escape(
    chunks: list[Any],
    history: bool,
    n: int | None,
    done: bool,
    cuts: list[int],
    continuation: bool,
) -> None:
    from tests.chat.helpers import USER, assistant, hcall, request, tool_msg

    msgs: list[Any] = [USER]
    if history:
        msgs += [assistant(hcall("call_0", "f", '{"a":1}')), tool_msg("call_0")]
    setup = Setup(body=request(msgs, n=n), hex_values=("aaaa", "bbbb", "cccc"))
    if continuation:  # a follow-up round (SPEC §5) rewrites every chunk
        setup.carry = Carry("chatcmpl-0", 0, "m-0", {"total_tokens": 1})
    data = sse(*chunks, done=done)
    out = feed_reads(setup.core(), [data])
    assert_stream_ends_properly(out)
    core = setup.core()
    assert feed_reads(core, reads_of(data, cuts)) == out
    if core.followup is None:
        events = parse_sse(out)
        assume(not events[-1].is_error)
        for body in (e.data for e in events if e.is_chunk):
            if isinstance(body.get("choices"), list):
                for ch in body["choices"]:
                    if isinstance(ch, dict) and isinstance(ch.get("delta"), dict):
                        assert ch["delta"].get("tool_calls") != []
        _shape_rules(events)


def _shape_rules(events: list[Any]) -> None:
    """SPEC §4's header rules hold for any input: one header per (choice, index), then bare
    argument fragments; ids valid and unique per choice; dense indexes."""
    seen: dict[Any, list[int]] = {}
    ids: dict[Any, list[str]] = {}
    for e in events:
        if not e.is_chunk or not isinstance(e.data.get("choices"), list):
            continue
        for ch in e.data["choices"]:
            if not isinstance(ch, dict) or not isinstance(ch.get("delta"), dict):
                continue
            items = ch["delta"].get("tool_calls")
            if items is None:
                continue
            key = json.dumps(ch.get("index"))
            for item in items:
                indexes = seen.setdefault(key, [])
                if item["index"] not in indexes:
                    assert item["index"] == len(indexes)
                    indexes.append(item["index"])
                    assert set(item) == {"index", "id", "type", "function"}
                    assert CLIENT_ID_RE.fullmatch(item["id"])
                    ids.setdefault(key, []).append(item["id"])
                    assert isinstance(item["function"]["name"], str) and item["function"]["name"]
                    assert isinstance(item["function"]["arguments"], str)
                else:
                    assert item == {
                        "index": item["index"],
                        "function": {"arguments": item["function"]["arguments"]},
                    }
                    assert isinstance(item["function"]["arguments"], str)
    for values in ids.values():
        assert len(set(values)) == len(values)


message_shape = st.fixed_dictionaries(
    {},
    optional={
        "role": st.just("assistant"),
        "content": st.one_of(st.text(max_size=5), json_value),
        "tool_calls": st.one_of(st.lists(tool_item, max_size=3), tool_item),
    },
)
completion_shape = st.fixed_dictionaries(
    {
        "id": json_value,
        "choices": st.one_of(
            st.lists(
                st.fixed_dictionaries(
                    {},
                    optional={
                        "index": st.one_of(st.integers(0, 2), json_value),
                        "message": st.one_of(message_shape, json_value),
                        "finish_reason": json_value,
                    },
                ),
                max_size=2,
            ),
            json_value,
        ),
    },
    optional={"usage": json_value},
)


@settings(max_examples=EXAMPLES, deadline=None)
@given(body=completion_shape, later=completion_shape)
def test_random_completions_never_escape(body: dict[str, Any], later: dict[str, Any]) -> None:
    from proxy.chat.message import merge_continuation, sanitize_completion

    result = sanitize_completion(body, Setup().ids())
    orjson.dumps(result.body)
    for choice in result.body["choices"] if isinstance(result.body["choices"], list) else ():
        message = choice.get("message") if isinstance(choice, dict) else None
        if isinstance(message, dict):
            for call in message.get("tool_calls") or ():  # null passes as null
                assert CLIENT_ID_RE.fullmatch(call["id"])
                assert call["type"] == "function"
                assert isinstance(call["function"]["arguments"], str)
    merged = merge_continuation(Carry("chatcmpl-0", 0, "m", {"total_tokens": 1}), "x", later)
    orjson.dumps(merged)
