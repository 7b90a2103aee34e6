"""Python opcodes per stream of a core bench, by function: where the interpreted work goes.

Instruction counts (callgrind) say how much a stream costs, but most of it is CPython's
evaluation loop and its object calls, which callgrind names as C functions, not as the
proxy's own. This counts the opcodes each of the proxy's functions runs for one stream of a
core bench (`bench.anthropic_core`, `bench.responses_core`, `bench.bridge_core`): the
difference between one and two streams after the bench's warm-up, so what one stream does
alone. Like instructions, the count repeats exactly; on these benches one opcode is about
100 instructions with what it calls, and the rest is C work over the stream's bytes
(splits, joins, copies), which the count does not see.

    python -m bench.opcodes responses [--call] [--paced] [--top N]
    python -m bench.opcodes anthropic [--call]
    python -m bench.opcodes chat|anthropic_over_chat|responses_over_chat [--call]
                                                    (bench.bridge_core's one Chat stream)
"""

from __future__ import annotations

import argparse
import gc
import sys
from collections import Counter
from collections.abc import Callable
from functools import partial
from types import FrameType
from typing import Any

from bench import anthropic_core, bridge_core, responses_core
from bench.reads import add_paced_flag

Where = tuple[str, str]  # a function: its module's path from the package, its name


def _runs() -> dict[str, Callable[[int, bool], None]]:
    """Each bench's streams: `run(n, call)` runs its warm-up, then `n` streams."""
    benches: dict[str, Callable[[int, bool], None]] = {
        "anthropic": anthropic_core.run,
        "responses": responses_core.run,
    }
    for kind in bridge_core.FACTORIES:  # the Chat stream, as Chat and through each bridge
        name = kind if kind == "chat" else f"{kind}_over_chat"
        benches[name] = partial(bridge_core.run, kind)
    return benches


def _counted(run: Callable[[], None]) -> Counter[Where]:
    counts: Counter[Where] = Counter()

    def trace(frame: FrameType, event: str, arg: Any) -> Any:
        frame.f_trace_opcodes = True
        if event == "opcode":
            code = frame.f_code
            counts[(_module(code.co_filename), code.co_name)] += 1
        return trace

    # No collection while counting: one would run the process's `gc.callbacks` (hypothesis
    # registers one in a test process) in a frame of its own, counted as the stream's.
    collecting = gc.isenabled()
    gc.collect()
    gc.disable()
    previous = sys.gettrace()
    sys.settrace(trace)
    try:
        run()
    finally:
        sys.settrace(previous)
        if collecting:
            gc.enable()
    return counts


def _module(path: str) -> str:
    """A code object's file from its package on (`proxy/responses/runs.py`)."""
    for package in ("/proxy/", "/bench/", "/tests/"):
        at = path.rfind(package)
        if at >= 0:
            return path[at + 1 :]
    return path


def per_stream(bench: str, call: bool = False, paced: bool = False) -> Counter[Where]:
    """The opcodes one stream of `bench` runs, by function (two streams less one); `paced`:
    fed one event a read."""
    run = partial(_runs()[bench], paced=paced)
    run(1, call)  # untraced: what a process does once (caches it fills) is not a stream's
    one = _counted(lambda: run(1, call))
    two = _counted(lambda: run(2, call))
    two.subtract(one)
    return +two  # without the functions only the first run had (none, after the warm-up)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.opcodes", description=__doc__)
    parser.add_argument("bench", choices=sorted(_runs()))
    parser.add_argument("--call", action="store_true", help="end in a rewritten function call")
    parser.add_argument("--top", type=int, default=30, help="functions listed (most first)")
    add_paced_flag(parser)
    args = parser.parse_args(argv)
    counts = per_stream(args.bench, args.call, args.paced)
    print(f"Python opcodes per {args.bench} stream: {sum(counts.values()):,}")
    for (module, name), count in counts.most_common(args.top):
        print(f"  {count:>7,}  {module}:{name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
