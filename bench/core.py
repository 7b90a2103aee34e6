"""CPU time per chunk of the sans-IO stream core alone (`proxy.chat.stream.StreamSanitizer`).

No sockets, no event loop: chunks are fed one `feed()` call each, as they would arrive from a
paced upstream, and the process CPU clock is read around the feeding only.

- pass-through: a content delta, which the core forwards without parsing it (the hot path);
- tool-call: argument fragments of a streamed tool call, which the core parses, assigns to
  a call slot and re-serializes in OpenAI's shape.
"""

from __future__ import annotations

import gc
import statistics
import time
from dataclasses import dataclass

import orjson

from bench.upstream import ROLE, sse_event
from proxy.chat import sse_scan, stream
from proxy.chat.history import HistoryFacts
from proxy.chat.stream import StreamSanitizer
from proxy.core.decide import ResponseIds
from proxy.core.guard import GuardState

# The fastest of several rounds is the core's own cost (timeit's rule: slower rounds were
# slowed by other processes, not by the code); the median is reported next to it.
ROUNDS = 7
PASS_CHUNKS = 4000  # per round: 20 streams of 200 deltas
TOOL_CHUNKS = 2000  # per round: 40 streams of one call in 50 deltas

# The same events the benchmark upstream streams.
CONTENT = [sse_event({"content": f"word{n} "}) for n in range(200)]


def _tool_stream(fragments: int) -> list[bytes]:
    """One call as OpenAI streams it: a header with id and name, then argument pieces."""
    arguments = orjson.dumps({"path": "src/" + "x" * (fragments * 3), "limit": 100}).decode()
    step = -(-len(arguments) // (fragments - 1))
    pieces = [arguments[i : i + step] for i in range(0, len(arguments), step)]
    header = {
        "index": 0,
        "id": "call_Xq3bV9kLm2Np4Rs6Tu8Wy0Za",
        "type": "function",
        "function": {"name": "read_file", "arguments": ""},
    }
    events = [sse_event({"role": "assistant", "content": None, "tool_calls": [header]})]
    events += [
        sse_event({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]})
        for piece in pieces
    ]
    return events


TOOL = _tool_stream(50)


def _core() -> StreamSanitizer:
    ids = ResponseIds(HistoryFacts(), "auto", GuardState())
    return StreamSanitizer(ids)


def _round(events: list[bytes], chunks: int) -> float:
    """CPU us per chunk spent feeding `events`, stream after stream, about `chunks` in all (the
    role chunk that opens each stream untimed)."""
    spent = fed = 0
    clock = time.process_time_ns
    for _ in range(chunks // len(events)):
        core = _core()
        core.feed(ROLE)
        start = clock()
        for event in events:
            out = core.feed(event)
        spent += clock() - start
        fed += len(events)
        assert out, "the core held back the stream's last chunk"
    return spent / fed / 1000


@dataclass(frozen=True, slots=True)
class CoreResult:
    """Per chunk, the fastest round (least disturbed by other processes) and the median.

    `pass_through_python_scan_us` is the pass-through cost where the compiled scan is missing
    (proxy.chat.sse_scan falls back to `scan_py`); None when it is missing here already."""

    pass_through_us: float
    tool_call_us: float
    pass_through_median_us: float
    tool_call_median_us: float
    native_scan: bool = False
    pass_through_python_scan_us: float | None = None


def measure() -> CoreResult:
    _round(CONTENT, PASS_CHUNKS)  # warm up
    _round(TOOL, TOOL_CHUNKS)
    passes: list[float] = []
    tools: list[float] = []
    gc.collect()
    for _ in range(ROUNDS):  # interleaved, so both see the same disturbances
        passes.append(_round(CONTENT, PASS_CHUNKS))
        tools.append(_round(TOOL, TOOL_CHUNKS))
    fallback = None
    if sse_scan.native_scan is not None:
        native, stream.scan = stream.scan, sse_scan.scan_py
        try:
            _round(CONTENT, PASS_CHUNKS)  # warm up
            fallback = min(_round(CONTENT, PASS_CHUNKS) for _ in range(ROUNDS))
        finally:
            stream.scan = native
    return CoreResult(
        min(passes),
        min(tools),
        statistics.median(passes),
        statistics.median(tools),
        native_scan=sse_scan.native_scan is not None,
        pass_through_python_scan_us=fallback,
    )


if __name__ == "__main__":
    print(measure())
