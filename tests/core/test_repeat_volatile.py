"""SPEC §10: results are compared without what agents add to them that says nothing about the
tool's outcome (proxy/core/repeat.py `_VOLATILE`, `_VOLATILE_VALUE`), so an agent whose every
shell result carries a fresh session number is seen looping like the others, while a poll whose
real output changes still runs every time."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.core.ledger import HistoryLedger
from proxy.core.repeat import BLOCK_AT, blocks, result_digest

CMD = '{"command": "echo ran >> log.txt"}'


def _ledger(results: list[Any], name: str = "bash") -> HistoryLedger:
    """One call per round, the same arguments, each under a fresh id, with these results."""
    ledger = HistoryLedger("kimi")
    for serial, result in enumerate(results):
        ledger.begin_turn()
        ledger.call(f"functions.{name}:{serial}", name, CMD)
        ledger.result(f"functions.{name}:{serial}", result)
    return ledger


def _copilot(shell_id: int, output: str = "") -> str:
    """Copilot CLI's shell result: the output, then its session line."""
    return f"{output}<shellId: {shell_id} completed with exit code 0>"


def test_copilots_shell_sessions_numbered_on_every_run_are_one_run() -> None:
    # the loop: each round's result differs in the shellId only
    ledger = _ledger([_copilot(15 + n) for n in range(BLOCK_AT)])
    run = ledger.repeat_run()
    assert run is not None and run.count == BLOCK_AT
    assert blocks(run, "on")  # the 5th identical call is answered, the 6th stops the response


def test_a_copilot_poll_whose_output_changes_is_no_run() -> None:
    ledger = _ledger([_copilot(15 + n, f"{n + 1}\n") for n in range(6)])
    assert ledger.repeat_run() is None


@pytest.mark.parametrize(
    ("first", "second"),
    [
        # Copilot CLI, also a session still running
        ("<shellId: 3 completed with exit code 1>", "<shellId: 41 completed with exit code 1>"),
        (
            "<command with shellId: 7 is still running>",
            "<command with shellId: 8 is still running>",
        ),
        # Codex: a random chunk, the wall time, a command still running
        (
            "Chunk ID: a1b2c3\nWall time: 0.0012 seconds\nProcess exited with code 0\nOutput:\nok",
            "Chunk ID: 9f8e7d\nWall time: 1.5000 seconds\nProcess exited with code 0\nOutput:\nok",
        ),
        (
            "Wall time: 10.0 seconds\nProcess running with session ID 3\nOutput:\n",
            "Wall time: 10.0 seconds\nProcess running with session ID 4\nOutput:\n",
        ),
        # qwen-code's run_shell_command: the process group, a long command's elapsed time
        (
            "Command: make\nOutput: ok\nExit Code: 0\nSignal: (none)\nProcess Group PGID: 4812",
            "Command: make\nOutput: ok\nExit Code: 0\nSignal: (none)\nProcess Group PGID: 4907",
        ),
        (
            "Output: ok\n\nNote: this foreground command ran for 61s. Next time ...",
            "Output: ok\n\nNote: this foreground command ran for 75s. Next time ...",
        ),
        # Claude Code's Bash in the background; pi's bash output cut short
        (
            "Command running in background with ID: bash_1",
            "Command running in background with ID: bash_2",
        ),
        (
            "x\n\n[Showing lines 1-9 of 20. Full output: /tmp/pi-bash-1f2e.log]",
            "x\n\n[Showing lines 1-9 of 20. Full output: /tmp/pi-bash-77aa.log]",
        ),
    ],
)
def test_what_agents_add_is_compared_without_its_value(first: str, second: str) -> None:
    assert result_digest(first) == result_digest(second)
    parts = [{"type": "text", "text": first}], [{"type": "text", "text": second}]
    assert result_digest(parts[0]) == result_digest(parts[1])  # Anthropic, Responses parts


@pytest.mark.parametrize(
    ("first", "second"),
    [
        # the command's own output: a count, an exit code, the time it prints
        ("<shellId: 1 completed with exit code 0>", "<shellId: 1 completed with exit code 1>"),
        ("Exit Code: 0\nProcess Group PGID: 1", "Exit Code: 2\nProcess Group PGID: 1"),
        ("Thu Jan  1 10:00:00 UTC 2026", "Thu Jan  1 10:00:05 UTC 2026"),
        ("2026-01-01T10:00:00Z done", "2026-01-01T10:00:05Z done"),
        ("elapsed 12s", "elapsed 13s"),
        ("shellId 15", "shellId 16"),  # not the agent's wording
        ("Wall time: 1 second later", ""),
    ],
)
def test_a_tools_own_output_is_compared_whole(first: str, second: str) -> None:
    assert result_digest(first) != result_digest(second)


def test_a_poll_whose_output_changes_runs_every_time() -> None:
    results = [
        f"Command: wc -l log.txt\nOutput: {n}\nExit Code: 0\nProcess Group PGID: {4000 + n}"
        for n in range(1, 7)
    ]
    assert _ledger(results, "run_shell_command").repeat_run() is None


def test_the_same_output_under_fresh_process_groups_is_a_run() -> None:
    results = [
        f"Command: ls\nOutput: a.txt\nExit Code: 0\nProcess Group PGID: {4000 + n}"
        for n in range(5)
    ]
    run = _ledger(results, "run_shell_command").repeat_run()
    assert run is not None and run.count == 5
