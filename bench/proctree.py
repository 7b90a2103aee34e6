"""CPU and memory of a process with its children (a server's worker processes), and of the
whole machine, read from /proc: what the capacity benchmark samples while a load runs."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from bench.capacity_stats import Sample

_TICK = os.sysconf("SC_CLK_TCK")
_PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024


def tree(pid: int) -> list[int]:
    """`pid` and its descendants alive now (bounded by what /proc lists)."""
    out: list[int] = []
    todo = [pid]
    while todo and len(out) < 1024:
        current = todo.pop()
        out.append(current)
        with contextlib.suppress(OSError):
            for task in Path(f"/proc/{current}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
    return out


def _cpu_and_rss(pid: int) -> tuple[float, int]:
    """User plus system CPU seconds, and resident KiB, of one process (0 when it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0, 0
    # After the name: state is field 0, utime 11, stime 12, rss (pages) 21.
    return (int(fields[11]) + int(fields[12])) / _TICK, int(fields[21]) * _PAGE_KB


def sample_tree(pid: int, at_ns: int) -> Sample:
    """The summed CPU seconds and RSS of `pid`'s tree. CPU of a child that exited since the
    last sample is lost: the servers measured keep their workers for the whole run."""
    cpu, rss = 0.0, 0
    for member in tree(pid):
        member_cpu, member_rss = _cpu_and_rss(member)
        cpu += member_cpu
        rss += member_rss
    return Sample(at_ns, cpu, rss)


def sample_machine(at_ns: int) -> Sample:
    """CPU seconds every core spent busy so far (all of /proc/stat's time but idle and
    iowait), as a Sample without memory."""
    first = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    ticks = [int(v) for v in first[:8]]  # guest time is already in user time
    busy = sum(ticks) - ticks[3] - ticks[4]
    return Sample(at_ns, busy / _TICK, 0)
