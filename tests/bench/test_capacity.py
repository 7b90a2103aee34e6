"""The capacity benchmark's pure parts: per-delta delays, a step's verdict, the capacity a
list of steps shows, the CPU/memory window, and the paced streams' wire (stamps found once
however the reads split them; every API's stream whole, with the raw or the rewritten id)."""

from __future__ import annotations

import math

import orjson
import pytest

from bench.capacity_stats import (
    MAX_ADDED_P99_MS,
    MAX_LATENESS_MS,
    Delays,
    Sample,
    Step,
    capacity,
    delays_ms,
    window_usage,
)
from bench.paced_wire import APIS, RAW_ID, SCRIPTS, check_reply, scan_stamps, stamp_text


def _delays(p50: float, p99: float, most: float, count: int = 100) -> Delays:
    return Delays(count, p50, p99, most)


def _step(streams: int, added_p99: float = 1.0, late: float = 5.0, errors: int = 0) -> Step:
    direct = _delays(0.2, 0.5, 1.0)
    candidate = _delays(0.4, 0.5 + added_p99, 0.2 + late)
    return Step(streams, direct, candidate, errors)


def test_delay_is_arrival_minus_send_in_ms() -> None:
    stamps = [(1_000_000, 1_250_000), (2_000_000, 5_000_000), (7, 7)]
    assert delays_ms(stamps) == [0.25, 3.0, 0.0]


def test_delays_summary_uses_observed_values() -> None:
    values = [float(v) for v in range(1, 101)]  # 1..100 ms
    summary = Delays.of(values)
    assert (summary.count, summary.p50, summary.p99, summary.max) == (100, 50.0, 99.0, 100.0)
    empty = Delays.of([])
    assert empty.count == 0 and math.isnan(empty.p99) and math.isnan(empty.max)


def test_step_adds_against_direct_at_the_same_load() -> None:
    step = Step(40, _delays(0.3, 1.0, 4.0), _delays(0.5, 3.5, 12.0), 0)
    assert step.added_p50_ms == pytest.approx(0.2)
    assert step.added_p99_ms == pytest.approx(2.5)
    # The latest delta past what a delta typically takes direct (its p50), not past 0.
    assert step.max_lateness_ms == pytest.approx(11.7)
    assert step.passes


@pytest.mark.parametrize(
    ("step", "passes"),
    [
        (_step(10, added_p99=MAX_ADDED_P99_MS - 0.01), True),
        (_step(10, added_p99=MAX_ADDED_P99_MS), False),  # "under 5 ms": 5 is not under
        (_step(10, late=MAX_LATENESS_MS - 0.01), True),
        (_step(10, late=MAX_LATENESS_MS), False),
        (_step(10, errors=1), False),  # a broken stream is never capacity
    ],
)
def test_step_verdict_at_the_limits(step: Step, passes: bool) -> None:
    assert step.passes is passes


def test_a_step_without_deltas_fails() -> None:
    step = Step(10, Delays.of([0.1, 0.2]), Delays.of([]), 0)
    assert not step.passes


def test_capacity_is_the_last_step_before_the_first_failure() -> None:
    steps = [_step(10), _step(20), _step(40, added_p99=7.0), _step(80)]
    # 80 held again, by luck: a team sizing proxies needs the N that held every time below.
    assert capacity(steps) == 20
    assert capacity(list(reversed(steps))) == 20  # judged in ascending N, whatever the order
    assert capacity([_step(10), _step(20), _step(40)]) == 40
    assert capacity([_step(10, late=25.0), _step(20)]) is None
    assert capacity([]) is None


def test_window_usage_counts_only_samples_inside_the_window() -> None:
    samples = [
        Sample(0, 0.0, 100),
        Sample(1_000_000_000, 0.5, 900),  # before the window: its peak is not the step's
        Sample(2_000_000_000, 1.0, 200),
        Sample(3_000_000_000, 1.25, 300),
        Sample(4_000_000_000, 1.5, 250),
        Sample(5_000_000_000, 3.0, 999),  # after it
    ]
    usage = window_usage(samples, 1_500_000_000, 4_200_000_000)
    assert usage is not None
    assert usage.seconds == pytest.approx(2.0)
    assert usage.cpu_pct == pytest.approx(25.0)  # 0.5 s of CPU in 2 s
    assert usage.peak_rss_kb == 300
    assert window_usage(samples, 2_500_000_000, 3_500_000_000) is None  # one sample inside


def _whole_stream(api: str, stamps: list[int]) -> bytes:
    script = SCRIPTS[api]
    body = script.head + b"".join(
        script.delta(stamp, script.first_seq + n) for n, stamp in enumerate(stamps)
    )
    text = "".join(stamp_text(s) for s in stamps)
    return body + script.tail(text, script.first_seq + len(stamps))


@pytest.mark.parametrize("api", APIS)
def test_stamps_are_found_once_however_reads_split_them(api: str) -> None:
    stamps = [19_930_404_388_496 + 33_000_000 * n for n in range(5)]
    body = _whole_stream(api, stamps)
    for size in (1, 7, 31, len(body)):
        received, start, found = bytearray(), 0, []
        for at in range(0, len(body), size):
            received += body[at : at + size]
            new, start = scan_stamps(received, start)
            found += new
        # The Responses tail repeats the whole text: its joined stamps must not count again.
        assert found == stamps, (api, size)


@pytest.mark.parametrize("api", APIS)
def test_check_reply_tells_the_raw_id_from_a_rewritten_one(api: str) -> None:
    body = _whole_stream(api, [1, 2, 3])
    assert check_reply(api, 200, body, 3, 3, rewrites=False) is None
    assert check_reply(api, 200, body, 3, 3, rewrites=True) == (
        "the tool call's id was not rewritten"
    )
    minted = {"chat": "call_1_0_abcd1234", "anthropic": "toolu_1_0_abcd1234"}.get(
        api, "call_abcd1234_" + RAW_ID
    )
    rewritten = body.replace(orjson.dumps(RAW_ID), orjson.dumps(minted))
    assert check_reply(api, 200, rewritten, 3, 3, rewrites=True) is None
    assert check_reply(api, 200, body, 4, 3, rewrites=False) == "3 stamped deltas of 4"
    assert check_reply(api, 200, body[: len(body) // 2], 3, 3, rewrites=False) is not None
    assert check_reply(api, 502, body, 3, 3, rewrites=False) is not None


def test_responses_sequence_numbers_strictly_increase() -> None:
    body = _whole_stream("responses", [5, 6, 7])
    numbers = [
        orjson.loads(line[6:])["sequence_number"]
        for line in body.split(b"\n")
        if line.startswith(b"data: ")
    ]
    assert numbers == list(range(len(numbers)))
