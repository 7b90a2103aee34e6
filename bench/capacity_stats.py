"""The capacity benchmark's arithmetic, free of I/O: per-delta delays, one step's verdict, the
capacity a list of steps shows, and a process's CPU and memory over a time window.

A delta's delay is its arrival at the client minus its send time at the upstream (both
CLOCK_MONOTONIC, one clock for every process of the machine). What the proxy adds is judged
against the same measure on a direct connection at the same load in the same run, so the
loopback's and the load generator's own share cancels out.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass

from bench.report import percentile

# The capacity criterion (issue #36): what an agent would notice as a stream that stutters.
MAX_ADDED_P99_MS = 5.0
MAX_LATENESS_MS = 20.0


def delays_ms(stamps: Sequence[tuple[int, int]]) -> list[float]:
    """(send ns, arrival ns) per delta -> arrival minus send, in ms."""
    return [(arrived - sent) / 1e6 for sent, arrived in stamps]


@dataclass(frozen=True, slots=True)
class Delays:
    """A side's per-delta delays at one step, summarized (ms)."""

    count: int
    p50: float
    p99: float
    max: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Delays:
        return cls(
            len(values),
            percentile(list(values), 50),
            percentile(list(values), 99),
            max(values, default=float("nan")),
        )


@dataclass(frozen=True, slots=True)
class Step:
    """One load step: N concurrent streams, direct and through the candidate."""

    streams: int
    direct: Delays
    candidate: Delays
    errors: int  # streams that failed or arrived incomplete, on either side

    @property
    def added_p50_ms(self) -> float:
        return self.candidate.p50 - self.direct.p50

    @property
    def added_p99_ms(self) -> float:
        return self.candidate.p99 - self.direct.p99

    @property
    def max_lateness_ms(self) -> float:
        """The latest delta through the candidate, past what a delta takes direct (p50)."""
        return self.candidate.max - self.direct.p50

    @property
    def passes(self) -> bool:
        """Every stream whole, p99 added under 5 ms, and no delta 20 ms late. NaN (no delta
        measured) fails: a comparison with NaN is false."""
        return (
            self.errors == 0
            and self.candidate.count > 0
            and self.added_p99_ms < MAX_ADDED_P99_MS
            and self.max_lateness_ms < MAX_LATENESS_MS
        )


def capacity(steps: Sequence[Step]) -> int | None:
    """The largest N before the first failing step (steps in any order; N ascending is how
    they are judged). A pass above a failure is not counted: on a shared machine it is luck,
    and a team sizing proxies needs the N that held every time below it. None: the smallest
    step failed already."""
    best: int | None = None
    for step in sorted(steps, key=lambda s: s.streams):
        if not step.passes:
            break
        best = step.streams
    return best


@dataclass(frozen=True, slots=True)
class Sample:
    """A process tree's state at one moment: monotonic ns, CPU seconds so far, RSS KiB."""

    at_ns: int
    cpu_s: float
    rss_kb: int


@dataclass(frozen=True, slots=True)
class Usage:
    cpu_pct: float  # of one core, over the window
    peak_rss_kb: int
    seconds: float


def window_usage(samples: Sequence[Sample], start_ns: int, end_ns: int) -> Usage | None:
    """CPU % and peak RSS between the first sample at or after `start_ns` and the last at
    or before `end_ns` (samples in time order). None: fewer than two samples inside."""
    times = [s.at_ns for s in samples]
    first = bisect.bisect_left(times, start_ns)
    last = bisect.bisect_right(times, end_ns) - 1
    if last <= first:
        return None
    inside = samples[first : last + 1]
    seconds = (inside[-1].at_ns - inside[0].at_ns) / 1e9
    cpu = inside[-1].cpu_s - inside[0].cpu_s
    return Usage(100 * cpu / seconds, max(s.rss_kb for s in inside), seconds)
