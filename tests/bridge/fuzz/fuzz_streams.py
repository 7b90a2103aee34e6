"""Hypothesis strategies for upstream Chat Completions answers, and a driver that plays the
shell's round loop over a bridge's exchange.

A `Plan` is what the upstream means to say (reasoning, text, tool calls with ids of every
style, a finish reason, usage); `stream_bytes` writes it as a Chat stream and `corrupt`
damages that stream the ways real upstreams and networks do (cut short, `{`-garbage data
lines, an error object, `[DONE]` missing, events after `[DONE]`, `\\r\\n` line ends);
`completion_bytes` writes the same plan as one chat.completion.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from hypothesis import strategies as st

from proxy.core.errors import ProxyError, ReplayLoopDetected, UpstreamStreamError
from proxy.core.events import ExchangeEvent, Forward, LoopDetected, OpenFollowup, UpstreamBroken
from proxy.core.sse import SSEFramingError

JSON = dict[str, Any]

text = st.text(alphabet=st.characters(codec="utf-8"), min_size=1, max_size=10)
ID_STYLES = [
    "kimi",
    "kimi_restart",
    "empty",
    "missing",
    "recurring",
    "number",
    "null",
    *["native"] * 4,
]
ARGUMENTS = ['{"cmd":"ls"}', '{"cmd":"pwd","n":1}', "{}", '{"input":"*** Begin Patch"}', ""]
FINISHES = ["stop", "tool_calls", "length", "content_filter", None, "weird"]


@dataclass(frozen=True)
class Call:
    name: str
    arguments: str
    id_style: str
    cuts: tuple[int, ...]  # where the arguments are split into fragments
    index_style: str  # "dense", "zero" (every call at index 0) or "missing"


@dataclass(frozen=True)
class Plan:
    pieces: tuple[tuple[str, Any], ...]  # ("reasoning" | "reasoning_alt" | "content" |
    # "refusal" | "comment", text) or ("call", Call)
    finish: str | None
    usage: JSON | None
    interleave: bool = False  # consecutive calls stream side by side (header, header, args..)
    model: str = "kimi-k2"


def calls(names: list[str]) -> st.SearchStrategy[Call]:
    return st.builds(
        Call,
        name=st.sampled_from(names),
        arguments=st.sampled_from(ARGUMENTS),
        id_style=st.sampled_from(ID_STYLES),
        cuts=st.lists(st.integers(0, 30), max_size=3).map(lambda c: tuple(sorted(c))),
        index_style=st.sampled_from(["dense", "dense", "zero", "missing"]),
    )


def replays(name: str) -> st.SearchStrategy[Call]:
    """The history's answered call again, under the upstream id the Kimi dialect gave it
    (`functions.{name}:0`), as Moonshot's restarting counter sends it: a replay (SPEC §5)."""
    return st.builds(
        Call,
        name=st.just(name),
        arguments=st.just('{"cmd":"ls"}'),
        id_style=st.just("kimi_restart"),
        cuts=st.lists(st.integers(0, 12), max_size=2).map(lambda c: tuple(sorted(c))),
        index_style=st.just("dense"),
    )


def plans(names: list[str]) -> st.SearchStrategy[Plan]:
    piece = st.one_of(
        st.tuples(st.just("call"), replays(names[0])),
        st.tuples(st.sampled_from(["reasoning", "reasoning_alt"]), text),
        st.tuples(st.just("content"), text),
        st.tuples(st.just("refusal"), text),
        st.tuples(st.just("comment"), st.just("keep-alive")),
        st.tuples(st.just("call"), calls(names)),
    )
    usage = st.none() | st.fixed_dictionaries(
        {"prompt_tokens": st.integers(0, 99), "completion_tokens": st.integers(0, 99)},
        optional={
            "total_tokens": st.integers(0, 200),
            "prompt_tokens_details": st.fixed_dictionaries({"cached_tokens": st.integers(0, 9)}),
        },
    )
    return st.builds(
        Plan,
        pieces=st.lists(piece, max_size=7).map(tuple),
        finish=st.sampled_from(FINISHES),
        usage=usage,
        interleave=st.booleans(),
    )


# -- writing a plan ---------------------------------------------------------------------------------


def _call_id(call: Call, k: int) -> object:
    return {
        "kimi": f"functions.{call.name}:{k}",
        "kimi_restart": f"functions.{call.name}:0",
        "empty": "",
        "missing": None,
        "recurring": "call_same",
        "native": f"call_{k}x9Yq2Lr7Tz",
        "number": 814890118 + k,
        "null": "null",
    }[call.id_style]


def _fragments(arguments: str, cuts: tuple[int, ...]) -> list[str]:
    bounds = [0, *[min(c, len(arguments)) for c in cuts], len(arguments)]
    return [arguments[a:b] for a, b in itertools.pairwise(bounds) if b > a] or [""]


def _chunk(delta: JSON, model: str, finish: object = None) -> JSON:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 7,
        "model": model,
        "choices": [choice],
    }


def _call_deltas(call: Call, k: int) -> list[JSON]:
    raw_id = _call_id(call, k)
    index = {"dense": k, "zero": 0, "missing": None}[call.index_style]
    parts = _fragments(call.arguments, call.cuts)
    head: JSON = {"type": "function", "function": {"name": call.name, "arguments": parts[0]}}
    if raw_id is not None:
        head["id"] = raw_id
    deltas = [head] + [{"function": {"arguments": part}} for part in parts[1:]]
    for delta in deltas:
        if index is not None:
            delta["index"] = index
    return [{"tool_calls": [delta]} for delta in deltas]


def _side_by_side(run: list[list[JSON]], interleave: bool) -> list[JSON]:
    """Consecutive calls' deltas one call after the other, or round-robin (servers that
    stream parallel calls at once: every header, then the arguments by turns)."""
    if not interleave:
        return [delta for deltas in run for delta in deltas]
    rows = itertools.zip_longest(*run)
    return [delta for row in rows for delta in row if delta is not None]


def stream_events(plan: Plan) -> list[bytes]:
    """The plan as Chat SSE events (each `data: ...\\n\\n` or a comment), `[DONE]` last."""
    events = [_data(_chunk({"role": "assistant", "content": ""}, plan.model))]
    k = 0
    run: list[list[JSON]] = []  # the deltas of consecutive calls, not written yet
    for kind, value in plan.pieces:
        if kind == "call":
            call = replace(value, index_style="dense") if plan.interleave else value
            run.append(_call_deltas(call, k))
            k += 1
            continue
        events += [_data(_chunk(d, plan.model)) for d in _side_by_side(run, plan.interleave)]
        run = []
        if kind == "comment":
            events.append(b": " + value.encode() + b"\n\n")
        else:
            key = {"reasoning_alt": "reasoning"}.get(kind, kind)
            key = "reasoning_content" if key == "reasoning" and kind == "reasoning" else key
            events.append(_data(_chunk({key: value}, plan.model)))
    events += [_data(_chunk(d, plan.model)) for d in _side_by_side(run, plan.interleave)]
    events.append(_data(_chunk({}, plan.model, plan.finish)))
    if plan.usage is not None:
        usage = {
            "id": "chatcmpl-1",
            "object": "chat.completion.chunk",
            "created": 7,
            "model": plan.model,
            "choices": [],
            "usage": plan.usage,
        }
        events.append(_data(usage))
    events.append(b"data: [DONE]\n\n")
    return events


def _data(obj: JSON) -> bytes:
    return b"data: " + json.dumps(obj, ensure_ascii=False).encode() + b"\n\n"


def completion_bytes(plan: Plan) -> bytes:
    """The same plan as one chat.completion."""
    message: JSON = {"role": "assistant", "content": None}
    texts = [v for kind, v in plan.pieces if kind == "content"]
    if texts:
        message["content"] = "".join(texts)
    for kind, key in (
        ("reasoning", "reasoning_content"),
        ("reasoning_alt", "reasoning"),
        ("refusal", "refusal"),
    ):
        values = [v for k, v in plan.pieces if k == kind]
        if values:
            message[key] = "".join(values)
    tool_calls = []
    for k, call in enumerate(v for kind, v in plan.pieces if kind == "call"):
        entry: JSON = {
            "type": "function",
            "function": {"name": call.name, "arguments": call.arguments},
        }
        raw_id = _call_id(call, k)
        if raw_id is not None:
            entry["id"] = raw_id
        tool_calls.append(entry)
    if tool_calls:
        message["tool_calls"] = tool_calls
    body: JSON = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 7,
        "model": plan.model,
        "choices": [{"index": 0, "message": message, "finish_reason": plan.finish}],
    }
    if plan.usage is not None:
        body["usage"] = plan.usage
    return json.dumps(body, ensure_ascii=False).encode()


# -- damage ---------------------------------------------------------------------------------------

GARBAGE_LINES = [
    b"data: {\n\n",
    b"data: {not json\n\n",
    b"data: [1, 2\n\n",
    b"data: nope\n\n",
    b'data: {"error": {"message": "overloaded", "code": "server_error"}}\n\n',
    b"event: ping\ndata: {}\n\n",
    b"data: 42\n\n",
    b"data: null\n\n",
]


@dataclass(frozen=True)
class Damage:
    garbage: tuple[tuple[int, bytes], ...] = ()  # (position among the events, line)
    drop_done: bool = False
    after_done: tuple[bytes, ...] = ()
    cut: int | None = None  # the body ends cleanly after this many bytes
    crlf: bool = False


damages = st.builds(
    Damage,
    garbage=st.lists(st.tuples(st.integers(0, 30), st.sampled_from(GARBAGE_LINES)), max_size=2).map(
        tuple
    ),
    drop_done=st.booleans(),
    after_done=st.lists(
        st.sampled_from([*GARBAGE_LINES, b'data: {"choices": []}\n\n']), max_size=2
    ).map(tuple),
    cut=st.none() | st.integers(0, 3000),
    crlf=st.booleans(),
)


def corrupt(events: list[bytes], damage: Damage) -> bytes:
    out = list(events)
    done = out.pop() if out and out[-1] == b"data: [DONE]\n\n" else None
    for position, line in damage.garbage:
        out.insert(min(position, len(out)), line)
    if done is not None and not damage.drop_done:
        out.append(done)
    out += damage.after_done
    body = b"".join(out)
    if damage.crlf:
        body = body.replace(b"\n", b"\r\n")
    return body if damage.cut is None else body[: damage.cut]


def split(body: bytes, cuts: list[int]) -> list[bytes]:
    """The body in reads cut at these byte positions (also inside a UTF-8 character)."""
    bounds = sorted({0, len(body), *[c % (len(body) + 1) for c in cuts]})
    return [body[a:b] for a, b in itertools.pairwise(bounds) if b > a]


# -- the shell's round loop -------------------------------------------------------------------------

FINAL_ROUND = stream_events(Plan((("content", "done"),), "stop", None))
FINAL_COMPLETION = completion_bytes(Plan((("content", "done"),), "stop", None))


def counter_entropy() -> Callable[[int], bytes]:
    counter = itertools.count(1)

    def entropy(n: int) -> bytes:
        return next(counter).to_bytes(8, "big")[-n:].rjust(n, b"\x01")

    return entropy


@dataclass
class Outcome:
    client: bytes = b""
    http_error: ProxyError | None = None  # answered as a plain HTTP error (nothing streamed)
    rounds: int = 0
    ended: bool = False  # the response ended (a last Forward, or an error)
    events: list[str] = field(default_factory=list)


SHELL_ERRORS = (SSEFramingError, UpstreamStreamError)  # what the shell maps (SPEC §6)


def play(
    exchange: Any,
    rounds: list[list[bytes]],
    *,
    stream: bool,
    loop_in_stream: bool,
) -> Outcome:
    """Each round's reads fed as the shell does (`proxy.server.exchange_handler._rounds`);
    a follow-up beyond the rounds given gets a plain answer."""
    outcome = Outcome()
    final = [FINAL_ROUND[0] + b"".join(FINAL_ROUND[1:])] if stream else [FINAL_COMPLETION]
    for reads in itertools.chain(rounds, itertools.repeat(final)):
        outcome.rounds += 1
        assert outcome.rounds < 10, "the exchange asked for round after round"
        exchange.begin_round(stream=stream)
        step = _round(exchange, reads, outcome, stream=stream, loop_in_stream=loop_in_stream)
        if step is None:
            return outcome
    raise AssertionError("unreachable")


def _round(
    exchange: Any, reads: list[bytes], outcome: Outcome, *, stream: bool, loop_in_stream: bool
) -> OpenFollowup | None:
    try:
        for read in reads:
            step = _act(exchange, exchange.feed(read), outcome, stream, loop_in_stream)
            if step is not None or outcome.ended:
                return step
        return _act(exchange, exchange.end(), outcome, stream, loop_in_stream)
    except SHELL_ERRORS as exc:
        error = exc if isinstance(exc, UpstreamStreamError) else UpstreamStreamError(str(exc))
        _fail(exchange, error, outcome, stream)
        return None


def _act(
    exchange: Any,
    events: list[ExchangeEvent],
    outcome: Outcome,
    stream: bool,
    loop_in_stream: bool,
) -> OpenFollowup | None:
    for event in events:
        outcome.events.append(type(event).__name__)
        if isinstance(event, bytes):
            assert stream, "bytes from a whole-message round"
            assert event, "an empty write"
            outcome.client += event
        elif isinstance(event, Forward):
            outcome.client += event.data
            if event.last:
                outcome.ended = True
                return None
        elif isinstance(event, OpenFollowup):
            return event
        elif isinstance(event, LoopDetected):
            assert isinstance(event.error, ReplayLoopDetected)
            if not stream or (not outcome.client and not loop_in_stream):
                outcome.http_error = event.error
            else:
                outcome.client += exchange.stream_error(event.error)
            outcome.ended = True
            return None
        else:
            assert isinstance(event, UpstreamBroken), event
            _fail(exchange, event.error, outcome, stream)
            return None
    return None


def _fail(exchange: Any, error: ProxyError, outcome: Outcome, stream: bool) -> None:
    if stream:
        outcome.client += exchange.stream_error(error)
    else:
        outcome.http_error = error
    outcome.ended = True
