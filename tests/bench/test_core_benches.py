"""The instruction-count benches of `make bench` (bench.anthropic_core, bench.responses_core,
bench.bridge_core) drive the surfaces' sans-IO exchanges with the tests' own stream builders:
their counted body runs here once, without callgrind, so a moved builder or a changed
exchange interface fails the suite rather than the next `make bench`."""

from __future__ import annotations

import pytest

from bench import anthropic_core, bridge_core, opcodes, responses_core


@pytest.mark.parametrize("call", [False, True])
def test_the_surface_benches_run_their_streams(call: bool) -> None:
    anthropic_core.run(1, call)
    responses_core.run(1, call)


@pytest.mark.parametrize("kind", sorted(bridge_core.FACTORIES))
def test_the_bridge_bench_runs_each_exchange(kind: str) -> None:
    bridge_core.run(kind, 1, call=True)


def test_the_anthropic_bench_stream_ends_in_the_call_it_names() -> None:
    _, upstream, reads = anthropic_core._stream(call=True)
    assert b"".join(reads) == upstream
    assert b'"functions.Bash:0"' in upstream and upstream.rstrip().endswith(b"}")


def test_the_opcode_count_is_one_stream_and_repeats() -> None:
    # One stream's opcodes, twice over: the same count (no warm-up left in the difference),
    # and the proxy's own functions named with their modules.
    first = opcodes.per_stream("responses")
    assert first == opcodes.per_stream("responses")
    assert first[("proxy/responses/stream.py", "feed")] > 0
    assert all(count > 0 for count in first.values())


def test_the_bridge_runs_many_times_chats_opcodes_on_the_same_stream() -> None:
    # Chat's stream read as Chat and through the Responses bridge: the bridge parses every
    # chunk, so it runs many times Chat's opcodes (a count that could not tell them apart
    # would be measuring the harness).
    chat = sum(opcodes.per_stream("chat").values())
    bridged = sum(opcodes.per_stream("responses_over_chat").values())
    assert 0 < chat * 5 < bridged
