"""Anthropic Messages: what `anthropic` accumulates through the proxy (`messages.stream()` +
`get_final_message()`, and the beta namespace's accumulator, which Claude Code's shape of
client uses) equals what it accumulates straight from the upstream, but for what SPEC §8 lets
the proxy change (compare.py)."""

from __future__ import annotations

import pytest

from tests.differential.corpus import Case, recorded
from tests.differential.harness import Anthropic, Bench, check
from tests.differential.simulated import anthropic_cases, capture
from tests.servers import ServerThread

# An upstream's odd values (an integer id) make the SDK's own dumps warn; the comparison
# is what judges them.
pytestmark = pytest.mark.filterwarnings("ignore:Pydantic serializer warnings:UserWarning")

SURFACES = [Anthropic(beta=False), Anthropic(beta=True)]
STREAMS = [c for c in recorded("anthropic") + anthropic_cases() if c.stream]
BODIES = [c for c in recorded("anthropic") if not c.stream]
# Events without `event:` lines are left out: the anthropic SDK reads nothing of them.
PROFILES = [
    "reference",
    "reference+thinking",
    "kimi",
    "name-index",
    "call-index",
    "empty-id",
    "int-id",
    "missing-id",
    "dup-in-response",
    "final-flush",
    "no-finish",
    "no-block-stop",
    "no-index",
    "fault-crlf",
]


@pytest.fixture(scope="module")
def simulated(simulator: ServerThread) -> dict[str, Case]:
    return capture(simulator.url, "anthropic", PROFILES)


@pytest.mark.parametrize("surface", SURFACES, ids=lambda s: s.name)
@pytest.mark.parametrize("case", STREAMS, ids=str)
def test_stream(bench: Bench, case: Case, surface: Anthropic) -> None:
    check(surface, bench.canned, bench.anthropic, case, "stream")


@pytest.mark.parametrize("case", STREAMS, ids=str)
def test_create_of_the_same_answer(bench: Bench, case: Case) -> None:
    check(SURFACES[1], bench.canned, bench.anthropic, case, "create-of-stream")


@pytest.mark.parametrize("surface", SURFACES, ids=lambda s: s.name)
@pytest.mark.parametrize("case", BODIES, ids=str)
def test_create(bench: Bench, case: Case, surface: Anthropic) -> None:
    check(surface, bench.canned, bench.anthropic, case, "create")


@pytest.mark.parametrize("mode", ["stream", "json"])
@pytest.mark.parametrize("profile", PROFILES)
def test_simulator_profile(
    bench: Bench, simulated: dict[str, Case], profile: str, mode: str
) -> None:
    case = simulated[f"sim-{profile}-{mode}"]
    check(SURFACES[1], bench.canned, bench.anthropic, case, "stream" if case.stream else "create")
