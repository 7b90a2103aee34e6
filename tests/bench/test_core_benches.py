"""The instruction-count benches of `make bench` (bench.anthropic_core, bench.responses_core,
bench.bridge_core) drive the surfaces' sans-IO exchanges with the tests' own stream builders:
their counted body runs here once, without callgrind, so a moved builder or a changed
exchange interface fails the suite rather than the next `make bench`."""

from __future__ import annotations

import pytest

from bench import anthropic_core, bridge_core, opcodes, responses_core
from bench.reads import READ_BYTES, reads_of


@pytest.mark.parametrize("paced", [False, True])
@pytest.mark.parametrize("call", [False, True])
def test_the_surface_benches_run_their_streams(call: bool, paced: bool) -> None:
    anthropic_core.run(1, call, paced)
    responses_core.run(1, call, paced=paced)


@pytest.mark.parametrize("paced", [False, True])
@pytest.mark.parametrize("kind", sorted(bridge_core.FACTORIES))
def test_the_bridge_bench_runs_each_exchange(kind: str, paced: bool) -> None:
    bridge_core.run(kind, 1, call=True, paced=paced)


@pytest.mark.parametrize("paced", [False, True])
def test_the_benches_reads_are_the_body(paced: bool) -> None:
    # 16 KiB reads, or one event a read: joined, the upstream's body as it was built.
    _, upstream, _ = anthropic_core._stream(call=True)
    for body in (upstream, bridge_core.upstream_stream(call=True)):
        cut = reads_of(body, paced)
        assert b"".join(cut) == body
        if paced:
            assert len(cut) == body.count(b"\n\n") and all(r.endswith(b"\n\n") for r in cut)
            assert not any(b"\n\n" in read[:-2] for read in cut)
        else:
            assert len(cut) == -(-len(body) // READ_BYTES)
    assert reads_of(b"data: 1\n\ndata: 2", paced=True) == [b"data: 1\n\n", b"data: 2"]


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
