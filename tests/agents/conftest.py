"""Runs every agent run the selected tests need, a few side by side, before the first test;
writes the agent x mode x replay id table to tests/agents/results/latest.md and prints it at
the end of the session."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.agents.agents import AGENTS, NODE_DIR, installed
from tests.agents.runs import Cell, Run, RunKey, run_agent, table

RESULTS = Path(__file__).parent / "results" / "latest.md"
WORKERS = 2  # two agents side by side on 2 cores; more would only slow each other down
_tables: list[str] = []


def _needed(items: list[pytest.Item]) -> list[RunKey]:
    keys: list[RunKey] = []
    for item in items:
        params = getattr(item, "callspec", None)
        routes = getattr(getattr(item, "function", None), "routes", ())
        if params is None or not routes:
            continue
        agent, cell = params.params.get("agent"), params.params.get("cell")
        if isinstance(agent, str) and isinstance(cell, Cell):
            keys += [(agent, cell, route) for route in routes if (agent, cell, route) not in keys]
    return keys


@pytest.fixture(scope="session")
def agent_runs(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[RunKey, Run]]:
    assert installed(), f"run `make agents` (npm ci in {NODE_DIR}) first"
    by_name = {agent.name: agent for agent in AGENTS}
    keys = _needed(request.session.items)
    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        futures = {
            key: pool.submit(
                run_agent, by_name[key[0]], key[1], key[2], tmp_path_factory.mktemp(key[0])
            )
            for key in keys
        }
    runs = {key: future.result() for key, future in futures.items()}
    yield runs
    versions = {agent.name: agent.version for agent in AGENTS}
    text = table([runs[key] for key in keys if key in runs], versions)
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(text + "\n")
    _tables.append(text)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for text in _tables:
        terminalreporter.write_sep("-", "agents: runs of the replayed command, direct vs proxy")
        terminalreporter.write_line(text)
        terminalreporter.write_line(f"(also in {RESULTS})")


__all__ = ["agent_runs"]
