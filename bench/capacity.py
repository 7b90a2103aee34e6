"""`python -m bench.capacity`: how many concurrent paced agent streams one proxy process
carries before deltas arrive late.

Requests per second of a tiny canned answer do not size a deployment; this does. A paced
upstream (bench.paced_upstream) streams like a model on each API the proxy carries (Chat
Completions, Anthropic Messages, Responses): 30 text deltas a second, each stamped with its
send time, then a Kimi-style tool call the proxy rewrites. A load generator in its own
process (bench.capacity_load) opens N such streams at once, direct to the upstream and then
through the candidate, at each N of a rising series; for each N the table shows what the
candidate adds to the per-delta delay (p50, p99), the latest delta, the candidate's CPU and
memory, and the load generator's and the rest of the machine's CPU (so a busy machine or a
saturated load generator shows). The capacity is the largest N before the first step whose
added p99 is 5 ms or more or whose latest delta is 20 ms late or more (bench.capacity_stats).
A step that fails is run once more and the second attempt counts (the table says so): the
machine may be shared, and one busy moment can make a delta late at any N.

Candidates: the proxy (one worker), the proxy with `--workers 2`, and as references the
Python pass-through floor (bench.passthrough; not with `--quick`) and nginx relaying bytes
(when installed; a row says so when not).

    python -m bench.capacity [--quick] [--apis chat,anthropic,responses] [--out FILE]
        [--candidates proxy,proxy_workers_2,...] [--steps 40,80,...] [--budget S]

`--candidates` also takes the proxy with one hand-written piece swapped for the library it
replaces (PIECES): what each piece buys in streams per core.

`--quick` (small N, short streams) takes about a minute and a half; the default about ten.
Every step is bounded in time, and a run stops stepping past a time budget.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import select
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import orjson

from bench import procs
from bench.capacity_stats import (
    MAX_ADDED_P99_MS,
    MAX_LATENESS_MS,
    Delays,
    Sample,
    Step,
    capacity,
    window_usage,
)
from bench.paced_wire import APIS
from bench.proctree import sample_machine, sample_tree
from bench.reference import _NGINX_CONF
from bench.report import Report, Row

RESULTS = Path(__file__).resolve().parent / "results"
SAMPLE_EVERY_S = 0.05
LOAD_GRACE_S = 40.0  # beyond the load generator's own bound, before it is killed
MISSING_SHOWN = 100  # characters of why a candidate did not run, in the table
FAILED_STEPS_TO_STOP = 2  # consecutive failing steps: past capacity, stop stepping


@dataclass(frozen=True, slots=True)
class Plan:
    steps: tuple[int, ...]
    deltas: int  # per stream, then the tool call
    rate: float  # deltas per second per stream
    budget_s: float  # no new step starts past this
    references: bool  # also the Python pass-through floor (nginx runs whenever installed)

    @property
    def stream_s(self) -> float:
        return (self.deltas + 1) / self.rate


QUICK = Plan(steps=(5, 10, 20, 40), deltas=30, rate=30.0, budget_s=105.0, references=False)
DEFAULT = Plan(
    steps=(10, 20, 40, 80, 160, 320, 640), deltas=80, rate=30.0, budget_s=780.0, references=True
)


@dataclass(frozen=True, slots=True)
class Candidate:
    key: str
    label: str
    server: procs.Server | None
    rewrites: bool  # the proxy: the tool call's id must arrive rewritten
    missing: str = ""  # why it did not run


@dataclass(slots=True)
class LoadRun:
    """One load generator run and what was sampled while it ran."""

    result: dict[str, Any]
    target: list[Sample]
    upstream: list[Sample]
    machine: list[Sample]


class LoadGenerator:
    """bench.capacity_load in its own process, serving one job per line on its stdin, so no
    interpreter starts between steps; restarted when a job outlives its bound."""

    def __init__(self, work: Path) -> None:
        self._log = work / "capacity-load.log"
        self._proc = self._start()

    def _start(self) -> subprocess.Popen[bytes]:
        argv = [sys.executable, "-m", "bench.capacity_load", "--serve"]
        with self._log.open("ab") as sink:
            return subprocess.Popen(
                argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=sink
            )

    def run(
        self, port: int, api: str, streams: int, plan: Plan, rewrites: bool, watch: tuple[int, int]
    ) -> LoadRun:
        """One job against `port`, sampling the `watch` processes' trees (the target, the
        upstream) and the machine while it runs."""
        job = {"port": port, "api": api, "streams": streams, "deltas": plan.deltas}
        job |= {"rate": plan.rate, "rewrites": rewrites}
        run = LoadRun({}, [], [], [])
        assert self._proc.stdin is not None
        self._proc.stdin.write(orjson.dumps(job) + b"\n")
        self._proc.stdin.flush()

        def sample() -> None:
            now = time.monotonic_ns()
            run.target.append(sample_tree(watch[0], now))
            run.upstream.append(sample_tree(watch[1], now))
            run.machine.append(sample_machine(now))

        line = self._reply(time.monotonic() + plan.stream_s + 2 + LOAD_GRACE_S, sample)
        if line is not None:
            run.result = orjson.loads(line)
            return run
        # Past its bound, or dead: every stream of the step counts as failed.
        self._proc.kill()
        self._proc.wait(procs.STOP_TIMEOUT_S)
        self._proc = self._start()
        now = time.monotonic_ns()
        run.result = {
            "delays": asdict(Delays.of([])),
            "errors": streams,
            "reasons": [f"the load generator did not answer (see {self._log.name})"],
            "start_ns": now,
            "end_ns": now,
            "cpu_pct": math.nan,
        }
        return run

    def _reply(self, deadline: float, sample: Callable[[], None]) -> bytes | None:
        """The job's result line, sampling every SAMPLE_EVERY_S until it comes; None when
        the deadline passed or the process ended first."""
        assert self._proc.stdout is not None
        fd = self._proc.stdout.fileno()
        buffer = bytearray()
        while time.monotonic() < deadline:
            sample()
            ready, _, _ = select.select([fd], [], [], SAMPLE_EVERY_S)
            if not ready:
                continue
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return None
            buffer += chunk
            if buffer.endswith(b"\n"):
                return bytes(buffer)
        return None

    def close(self) -> None:
        if self._proc.stdin is not None:
            self._proc.stdin.close()
        try:
            self._proc.wait(procs.STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait(procs.STOP_TIMEOUT_S)


def _delays(result: dict[str, Any]) -> Delays:
    return Delays(**result["delays"])


def _step(
    load: LoadGenerator,
    upstream: procs.Server,
    candidate: Candidate,
    api: str,
    streams: int,
    plan: Plan,
    base_kb: int,
) -> dict[str, Any]:
    """N streams direct, then N through the candidate: the step, and what each process used."""
    assert candidate.server is not None
    watch = (candidate.server.pid, upstream.pid)
    direct = load.run(upstream.port, api, streams, plan, False, watch)
    through = load.run(candidate.server.port, api, streams, plan, candidate.rewrites, watch)
    step = Step(
        streams,
        _delays(direct.result),
        _delays(through.result),
        direct.result["errors"] + through.result["errors"],
    )
    start, end = through.result["start_ns"], through.result["end_ns"]
    target = window_usage(through.target, start, end)
    upstream_use = window_usage(through.upstream, start, end)
    machine = window_usage(through.machine, start, end)
    ours = (
        sum(u.cpu_pct for u in (target, upstream_use) if u is not None) + through.result["cpu_pct"]
    )
    return {
        "streams": streams,
        "direct": asdict(step.direct),
        "candidate": asdict(step.candidate),
        "added_p50_ms": step.added_p50_ms,
        "added_p99_ms": step.added_p99_ms,
        "max_lateness_ms": step.max_lateness_ms,
        "errors": step.errors,
        "error_reasons": direct.result["reasons"] + through.result["reasons"],
        "passes": step.passes,
        "candidate_cpu_pct": None if target is None else target.cpu_pct,
        # CPU time per delta relayed: less moved by a busy machine than delays are, and
        # what sizing for a dedicated core needs (a core carries about 1e6 / (this * rate)
        # streams before it is saturated, at 100% busy).
        "candidate_cpu_us_per_delta": None
        if target is None
        else target.cpu_pct / 100 / (streams * plan.rate) * 1e6,
        "candidate_peak_rss_kb": None if target is None else target.peak_rss_kb,
        "candidate_rss_kb_per_stream": None
        if target is None
        else (target.peak_rss_kb - base_kb) / streams,
        "upstream_cpu_pct": None if upstream_use is None else upstream_use.cpu_pct,
        "load_generator_cpu_pct": through.result["cpu_pct"],
        "others_cpu_pct": None if machine is None else max(0.0, machine.cpu_pct - ours),
    }


def _as_step(data: dict[str, Any]) -> Step:
    return Step(
        data["streams"], Delays(**data["direct"]), Delays(**data["candidate"]), data["errors"]
    )


def _measured_step(
    load: LoadGenerator,
    upstream: procs.Server,
    candidate: Candidate,
    api: str,
    streams: int,
    plan: Plan,
    base_kb: int,
) -> dict[str, Any]:
    """A step, run again once when it fails: on a machine shared with other work, one
    busy moment (another process scheduled on both cores) can make a delta late at any N.
    The second attempt is the step's result; the first stays in the record and the table
    shows that there were two."""
    first = _step(load, upstream, candidate, api, streams, plan, base_kb)
    if first["passes"]:
        return {**first, "attempts": 1}
    again = _step(load, upstream, candidate, api, streams, plan, base_kb)
    return {**again, "attempts": 2, "first_attempt": first}


def _series(
    load: LoadGenerator,
    upstream: procs.Server,
    candidate: Candidate,
    api: str,
    plan: Plan,
    deadline: float,
) -> dict[str, Any]:
    """The steps for one API, rising until two in a row fail or the time budget is spent."""
    assert candidate.server is not None
    # One unmeasured run first: the candidate's first requests pay for imports and pools.
    load.run(
        candidate.server.port,
        api,
        plan.steps[0],
        plan,
        candidate.rewrites,
        (candidate.server.pid, upstream.pid),
    )
    # Memory per stream is counted from here: warm, every stream of the warm-up closed.
    base_kb = sample_tree(candidate.server.pid, time.monotonic_ns()).rss_kb
    steps: list[dict[str, Any]] = []
    failed_in_a_row = 0
    stopped = "every step ran"
    for streams in plan.steps:
        if time.monotonic() > deadline:
            stopped = "the time budget ran out"
            break
        print(f"  {candidate.key} {api} N={streams} ...", file=sys.stderr, flush=True)
        steps.append(_measured_step(load, upstream, candidate, api, streams, plan, base_kb))
        failed_in_a_row = 0 if steps[-1]["passes"] else failed_in_a_row + 1
        if failed_in_a_row >= FAILED_STEPS_TO_STOP:
            stopped = f"{FAILED_STEPS_TO_STOP} steps in a row failed"
            break
    return {
        "warm_rss_kb": base_kb,
        "steps": steps,
        "capacity": capacity([_as_step(s) for s in steps]),
        "stopped": stopped,
        # Past a failure, a step that held again: shown, not counted (see capacity()).
        "largest_held": max((s["streams"] for s in steps if s["passes"]), default=None),
    }


def _nginx(upstream: procs.Server, work: Path) -> Candidate:
    """nginx relaying bytes (bench.reference's configuration), or a row saying why not."""
    label = "nginx (proxy_buffering off)"
    nginx = shutil.which("nginx")
    if nginx is None:
        return Candidate("nginx", label, None, False, "nginx is not installed")
    port = procs.free_port()
    conf = work / "nginx-capacity.conf"
    conf.write_text(_NGINX_CONF.format(dir=work, upstream=upstream.port, port=port))
    try:
        server = procs.start_command(
            "nginx-capacity", [nginx, "-p", str(work), "-c", str(conf)], port, work
        )
    except RuntimeError as exc:
        return Candidate("nginx", label, None, False, f"did not start: {exc}")
    return Candidate("nginx", label, server, False)


PASSTHROUGH = "Python pass-through floor (bytes relayed)"


def _passthrough(upstream: procs.Server, work: Path, plan: Plan) -> Candidate | procs.Server:
    """The Python pass-through floor (bench.passthrough: bytes relayed on uvloop): what any
    Python relay costs on this machine at the same load, so the proxy's own share shows."""
    if not plan.references:
        return Candidate("python_passthrough", PASSTHROUGH, None, False, "not run with --quick")
    port = procs.free_port()
    argv = [sys.executable, "-m", "bench.passthrough", str(upstream.port), str(port)]
    return procs.start_command("passthrough-capacity", argv, port, work)


def _proxy(upstream: procs.Server, work: Path, name: str, **how: Any) -> procs.Server:
    return procs.start_proxy(upstream.port, work, name=f"{name}-capacity", **how)


# What each piece the proxy hand-writes buys (docs/performance.md, "What each piece buys"):
# the same proxy with the piece swapped for the library it replaces, one swap per row.
PIECES: dict[str, tuple[str, dict[str, Any]]] = {
    "proxy_variant": ("the proxy's own transport, on the variant launcher", {"transport": "proxy"}),
    "proxy_httpx": ("the proxy on httpx's own transport", {"transport": "default"}),
    "proxy_aiohttp": ("the proxy on httpx-aiohttp's transport", {"transport": "aiohttp"}),
}
DEFAULT_CANDIDATES = ("proxy", "proxy_workers_2", "python_passthrough", "nginx")


def _candidates(upstream: procs.Server, work: Path, plan: Plan) -> dict[str, tuple[str, Any]]:
    """key: (label, starter), in the order they run by default; each starter returns a
    Server, or a Candidate that says why it did not run."""
    table: dict[str, tuple[str, Any]] = {
        "proxy": ("the proxy, 1 worker", lambda: _proxy(upstream, work, "proxy")),
        "proxy_workers_2": (
            "the proxy, --workers 2",
            lambda: _proxy(upstream, work, "proxy-w2", workers=2),
        ),
        "python_passthrough": (PASSTHROUGH, lambda: _passthrough(upstream, work, plan)),
        "nginx": ("nginx (proxy_buffering off)", lambda: _nginx(upstream, work)),
    }
    for key, (label, how) in PIECES.items():
        table[key] = (label, lambda key=key, how=how: _proxy(upstream, work, key, **how))
    return table


def _run_candidate(
    load: LoadGenerator,
    upstream: procs.Server,
    candidate: Candidate,
    apis: list[str],
    plan: Plan,
    deadline: float,
) -> dict[str, Any]:
    if candidate.server is None:
        return {"label": candidate.label, "missing": candidate.missing}
    out: dict[str, Any] = {"label": candidate.label, "apis": {}}
    try:
        for api in apis:
            out["apis"][api] = _series(load, upstream, candidate, api, plan, deadline)
    finally:
        candidate.server.stop()
    return out


def _start(key: str, label: str, starter: Any, rewrites: bool) -> Candidate:
    try:
        started = starter()
    except RuntimeError as exc:  # a candidate that does not start gets a row, not a crash
        return Candidate(key, label, None, rewrites, f"did not start: {exc}")
    if isinstance(started, Candidate):
        return started
    return Candidate(key, label, started, rewrites)


def measure(
    plan: Plan, apis: list[str], work: Path, keys: tuple[str, ...] = DEFAULT_CANDIDATES
) -> dict[str, Any]:
    deadline = time.monotonic() + plan.budget_s
    port = procs.free_port()
    argv = [sys.executable, "-m", "bench.paced_upstream", "--port", str(port)]
    argv += ["--deltas", str(plan.deltas), "--rate", str(plan.rate)]
    upstream = procs.start_command("paced-upstream", argv, port, work)
    load = LoadGenerator(work)
    results: dict[str, Any] = {}
    try:
        table = _candidates(upstream, work, plan)
        for key in keys:
            label, starter = table[key]
            print(f"{label} ...", file=sys.stderr, flush=True)
            # Only the proxy rewrites the tool call's id; the references relay bytes.
            candidate = _start(key, label, starter, rewrites=key.startswith("proxy"))
            results[key] = _run_candidate(load, upstream, candidate, apis, plan, deadline)
    finally:
        load.close()
        upstream.stop()
    return results


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0f}%"


def _step_row(label: str, api: str, s: dict[str, Any]) -> tuple[str, ...]:
    rss = s["candidate_peak_rss_kb"]
    per = s["candidate_rss_kb_per_stream"]
    memory = "n/a" if rss is None else f"{rss / 1024:.0f} MB ({per:+.0f} KB/stream)"
    return (
        label,
        api,
        str(s["streams"]),
        f"{s['added_p50_ms']:+.2f} ms",
        f"{s['added_p99_ms']:+.2f} ms",
        f"{s['max_lateness_ms']:.1f} ms",
        f"{s['direct']['p99']:.2f} ms",
        f"{s['direct']['max'] - s['direct']['p50']:.1f} ms",
        str(s["errors"]),
        _pct(s["candidate_cpu_pct"]),
        "n/a"
        if s["candidate_cpu_us_per_delta"] is None
        else f"{s['candidate_cpu_us_per_delta']:.0f} us",
        memory,
        _pct(s["load_generator_cpu_pct"]),
        _pct(s["upstream_cpu_pct"]),
        _pct(s["others_cpu_pct"]),
        ("yes" if s["passes"] else "NO") + (" (2nd try)" if s["attempts"] > 1 else ""),
    )


_STEP_HEADERS = (
    "candidate",
    "API",
    "N",
    "added p50",
    "added p99",
    "max late",
    "direct p99",
    "direct max late",
    "errors",
    "cand. CPU",
    "CPU/delta",
    "cand. RSS peak",
    "loadgen CPU",
    "upstream CPU",
    "others CPU",
    "ok",
)


def _capacity_text(series: dict[str, Any]) -> str:
    cap, steps = series["capacity"], series["steps"]
    if cap is None:
        return "below the first step" if steps else "no step ran"
    if cap == steps[-1]["streams"]:
        return f">= {cap} streams (the largest step run held)"
    return f"{cap} streams"


def render(report: Report, results: dict[str, Any], apis: list[str]) -> None:
    """Capacity rows (one per candidate and API) and a section with every step."""
    target = f"p99 added < {MAX_ADDED_P99_MS:g} ms, none {MAX_LATENESS_MS:g} ms late"
    rows: list[tuple[str, ...]] = []
    for data in results.values():
        label = data["label"]
        if "missing" in data:
            # The first line only: the JSON has all of it, the candidate's log the rest.
            reason = data["missing"].splitlines()[0][:MISSING_SHOWN]
            report.add(Row(f"{label}: capacity", proxy=f"not measured: {reason}"))
            continue
        for api in apis:
            series = data["apis"].get(api)
            if series is None:
                continue
            report.add(
                Row(
                    f"{label}, {api}: capacity",
                    proxy=_capacity_text(series),
                    delta=f"{series['stopped']}; largest N that held: {series['largest_held']}",
                    target=target,
                )
            )
            rows += [_step_row(label, api, s) for s in series["steps"]]
    report.section(
        "every step: added = through the candidate minus direct (same N, same run); max late ="
        " the latest delta through the candidate minus direct p50; direct max late = the same"
        " for direct (the machine's own noise); CPU % of one core over the streaming window",
        _STEP_HEADERS,
        rows,
    )


def _environment() -> dict[str, Any]:
    rev = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    )
    return {
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "git": rev.stdout.strip(),
        "loadavg_start": os.getloadavg(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.capacity",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--quick", action="store_true", help="small N, short streams: a smoke run")
    parser.add_argument("--apis", default=",".join(APIS), help="comma-separated: " + ",".join(APIS))
    parser.add_argument("--out", type=Path, default=RESULTS / "capacity.json")
    known = (*DEFAULT_CANDIDATES, *PIECES)
    parser.add_argument(
        "--candidates",
        default=",".join(DEFAULT_CANDIDATES),
        help="comma-separated, in the order to run: " + ",".join(known),
    )
    parser.add_argument("--steps", help="comma-separated N to step through (default per plan)")
    parser.add_argument("--budget", type=float, help="seconds: no new step starts past this")
    args = parser.parse_args(argv)
    apis = [a for a in args.apis.split(",") if a]
    if not apis or any(a not in APIS for a in apis):
        parser.error(f"--apis takes some of {','.join(APIS)}")
    keys = tuple(k for k in args.candidates.split(",") if k)
    if not keys or any(k not in known for k in keys):
        parser.error(f"--candidates takes some of {','.join(known)}")
    plan = QUICK if args.quick else DEFAULT
    if args.steps:
        plan = replace(plan, steps=tuple(int(n) for n in args.steps.split(",")))
    if args.budget:
        plan = replace(plan, budget_s=args.budget)
    RESULTS.mkdir(parents=True, exist_ok=True)
    env = _environment()
    started = time.monotonic()
    results = measure(plan, apis, RESULTS, keys)
    env["loadavg_end"] = os.getloadavg()
    env["duration_s"] = round(time.monotonic() - started, 1)
    report = Report(
        f"toolcall-proxy capacity: {env['cpus']} cpus, python {env['python']}, loopback; "
        f"{plan.rate:g} deltas/s per stream, {plan.deltas} deltas then a Kimi-style tool call; "
        f"N steps {', '.join(map(str, plan.steps))}"
    )
    report.data.update({"plan": asdict(plan), "environment": env, "candidates": results})
    render(report, results, apis)
    print(report.render())
    report.write_json(args.out)
    print(f"\n{args.out} written in {env['duration_s']:g} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
