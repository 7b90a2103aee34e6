"""The instruction-count benches of `make bench` (bench.anthropic_core, bench.responses_core,
bench.bridge_core) drive the surfaces' sans-IO exchanges with the tests' own stream builders:
their counted body runs here once, without callgrind, so a moved builder or a changed
exchange interface fails the suite rather than the next `make bench`."""

from __future__ import annotations

import pytest

from bench import anthropic_core, bridge_core, responses_core


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
