"""Issue #52, findings 8 and 10: the proxy's work grows linearly with one call's arguments
and with the number of calls in one response, whatever the surface.

Work is counted, not timed. Two counts repeat exactly from run to run:
- the Python opcodes the proxy's own code runs for a stream (`sys.settrace` with opcode
  events, as bench/opcodes.py counts them): a walk over every earlier call for each new call
  (Chat's routing and header checks, the in-response duplicate check) shows as a ratio near 4
  between 2N and N calls, linear work as about 2;
- the characters handed to the JSON parser and joined for one Responses call's arguments:
  asking whether the whole text so far is complete JSON after every delta (13.5 s of CPU for
  1 MiB in 32-byte deltas) is quadratic, the incremental scan linear.
"""

from __future__ import annotations

import gc
import importlib
import sys
from collections.abc import Callable
from types import FrameType
from typing import Any

import orjson
import pytest

from proxy.responses.calls import CallItem
from tests.core.test_non_json_every_surface import (
    anthropic_end,
    anthropic_event,
    anthropic_start,
    chat_chunk,
    client_bytes,
    responses_completed,
    responses_event,
    responses_head,
)

PROXY = "/proxy/"
# The module, not `proxy.responses.calls` as an attribute (a name the package binds too).
responses_calls = importlib.import_module("proxy.responses.calls")
RATIO = 2.4  # work(2N) / work(N), at most: linear gives 2 and a little
ARGS = '{"a":1}'


def opcodes(run: Callable[[], object]) -> int:
    """The opcodes run in the proxy's own modules while `run` runs."""
    count = 0

    def trace(frame: FrameType, event: str, arg: Any) -> Any:
        nonlocal count
        if PROXY not in frame.f_code.co_filename:
            return None
        frame.f_trace_opcodes = True
        if event == "opcode":
            count += 1
        return trace

    gc.collect()
    gc.disable()  # a collection would run callbacks in frames of their own
    sys.settrace(trace)
    try:
        run()
    finally:
        sys.settrace(None)
        gc.enable()
    return count


# -- many calls in one response -----------------------------------------------------------------


def chat_calls(n: int, *, one_id: bool) -> list[bytes]:
    """`n` calls, each whole in one delta; with `one_id`, all under one raw id (a server
    that repeats it), each with its own arguments."""
    events = [chat_chunk({"role": "assistant", "content": None})]
    for i in range(n):
        raw_id = "call_same" if one_id else f"call_{i:08d}x"
        arguments = orjson.dumps({"n": i}).decode()
        call = {"index": i, "id": raw_id, "type": "function"}
        events.append(
            chat_chunk(
                {"tool_calls": [{**call, "function": {"name": "bash", "arguments": arguments}}]}
            )
        )
    return [*events, chat_chunk({}, "tool_calls"), b"data: [DONE]\n\n"]


def chat_split_calls(n: int) -> list[bytes]:
    """`n` calls whose header and arguments come in separate deltas, the arguments after
    all the headers (the calls stream in parallel)."""
    events = [chat_chunk({"role": "assistant", "content": None})]
    for i in range(n):
        call = {"index": i, "id": f"call_{i:08d}x", "type": "function"}
        events.append(
            chat_chunk({"tool_calls": [{**call, "function": {"name": "bash", "arguments": ""}}]})
        )
    for i in range(n):
        events.append(chat_chunk({"tool_calls": [{"index": i, "function": {"arguments": ARGS}}]}))
    return [*events, chat_chunk({}, "tool_calls"), b"data: [DONE]\n\n"]


def anthropic_calls(n: int) -> list[bytes]:
    events = [anthropic_start()]
    for i in range(n):
        block = {"type": "tool_use", "id": f"toolu_{i:08d}x", "name": "bash", "input": {}}
        events.append(
            anthropic_event({"type": "content_block_start", "index": i, "content_block": block})
        )
        delta = {"type": "input_json_delta", "partial_json": ARGS}
        events.append(anthropic_event({"type": "content_block_delta", "index": i, "delta": delta}))
        events.append(anthropic_event({"type": "content_block_stop", "index": i}))
    return [*events, *anthropic_end("tool_use")[1:]]


def responses_many_calls(n: int) -> list[bytes]:
    events = responses_head()
    for i in range(n):
        item = {
            "type": "function_call",
            "id": f"fc_{i}",
            "call_id": f"call_{i:08d}x",
            "name": "bash",
        }
        ref = {"item_id": f"fc_{i}", "output_index": i}
        events.append(responses_event("response.output_item.added", output_index=i, item=item))
        events.append(responses_event("response.function_call_arguments.delta", **ref, delta=ARGS))
        events.append(
            responses_event("response.function_call_arguments.done", **ref, arguments=ARGS)
        )
        done = {**item, "arguments": ARGS, "status": "completed"}
        events.append(responses_event("response.output_item.done", output_index=i, item=done))
    return [*events, responses_completed()]


STREAMS: dict[str, tuple[str, Callable[[int], list[bytes]]]] = {
    "chat": ("chat", lambda n: chat_calls(n, one_id=False)),
    "chat, one raw id": ("chat", lambda n: chat_calls(n, one_id=True)),
    "chat, headers first": ("chat", chat_split_calls),
    "anthropic": ("anthropic", anthropic_calls),
    "responses": ("responses", responses_many_calls),
    "responses over chat": ("responses over chat", lambda n: chat_calls(n, one_id=False)),
}


@pytest.mark.parametrize("stream", sorted(STREAMS))
def test_the_work_grows_linearly_with_the_calls_of_a_response(stream: str) -> None:
    """Finding 10: 20,000 calls took 13.7 s on Chat Completions (each new call looked at
    every earlier one); twice the calls is now about twice the work."""
    pairing, build = STREAMS[stream]
    work = {}
    for n in (300, 600):
        reads = [b"".join(build(n))]
        outcome: list[bool] = []

        def run(reads: list[bytes] = reads, outcome: list[bool] = outcome) -> None:
            outcome.append(client_bytes(pairing, reads)[2])

        work[n] = opcodes(run)
        assert outcome == [False], "the stream ends normally"
    assert work[600] <= RATIO * work[300], work


# -- one call's long arguments on Responses -----------------------------------------------------


def responses_long_call(deltas: int) -> list[bytes]:
    item = {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "bash"}
    ref = {"item_id": "fc_1", "output_index": 0}
    delta = "response.function_call_arguments.delta"
    events = [
        *responses_head(),
        responses_event("response.output_item.added", output_index=0, item=item),
    ]
    events.append(responses_event(delta, **ref, delta='{"command": "'))
    events += [responses_event(delta, **ref, delta="x" * 31 + "}") for _ in range(deltas)]
    events.append(responses_event(delta, **ref, delta='"}'))
    return [*events, responses_completed()]


def test_one_responses_calls_arguments_are_parsed_linearly(monkeypatch: pytest.MonkeyPatch) -> None:
    """Finding 8: 1 MiB of arguments in 32-byte deltas took 13.5 s of CPU on Responses (the
    whole text so far parsed after every delta). Each delta here ends in a closing bracket
    (inside the string), the worst case for a scan that waits for one."""
    parsed = [0]
    real = responses_calls.is_complete_json

    def counted(text: str) -> bool:
        parsed[0] += len(text)
        return bool(real(text))

    monkeypatch.setattr(responses_calls, "is_complete_json", counted)
    work = {}
    for deltas in (2000, 4000):
        parsed[0] = 0
        out, _, broken = client_bytes("responses", [b"".join(responses_long_call(deltas))])
        assert not broken
        assert out.count(b'"type":"response.function_call_arguments.delta"') == deltas + 2
        work[deltas] = parsed[0]
        assert parsed[0] <= 4 * 32 * deltas, "each character parsed a few times at most"
    assert work[4000] <= RATIO * work[2000], work


@pytest.mark.parametrize("piece", [1, 7, 32, 4096])
def test_a_call_items_work_is_linear_in_its_text(piece: int) -> None:
    """The call's own count: every character joined, compared, scanned or parsed."""
    text = orjson.dumps({"path": "a/b", "content": "}x]" * 40_000}).decode()
    call = CallItem.start({"type": "function_call", "call_id": "c", "name": "write"})
    sent = []
    for at in range(0, len(text), piece):
        call.add_delta(text[at : at + piece])
        sent.append(call.unsent())
    assert call.complete
    assert "".join(sent) == call.text == text
    assert call.work <= 6 * len(text), (call.work, len(text))
