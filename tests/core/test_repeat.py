"""SPEC §10, the repeat guard's core: the run read from a history, and the decision on the next
identical call (the surfaces' tests check the note and the follow-up in each grammar)."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.core.decide import FORM_REPEAT, ResponseIds, Verdict
from proxy.core.errors import RepeatLoopDetected, ReplayLoopDetected
from proxy.core.guard import GuardState, plan_followup
from proxy.core.ledger import HistoryLedger
from proxy.core.repeat import (
    DEFAULT_EXEMPT,
    REPEAT_ANSWER,
    is_exempt,
    note_text,
    result_digest,
    with_note,
)

LS = '{"command": "ls"}'


def _ledger(
    rounds: list[list[tuple[str, str, Any]]], *, user_after: int | None = None
) -> HistoryLedger:
    """Each round: (name, arguments, result content) per call, each under a fresh id."""
    ledger = HistoryLedger("passthrough")
    serial = 0
    for number, calls in enumerate(rounds):
        ledger.begin_turn()
        ids = []
        for name, arguments, _ in calls:
            serial += 1
            ids.append(f"call_{serial}")
            ledger.call(ids[-1], name, arguments)
        for call_id, (_, _, result) in zip(ids, calls, strict=True):
            ledger.result(call_id, result)
        if user_after == number:
            ledger.user_input()
    return ledger


def _same(n: int, name: str = "Bash", result: Any = "file.txt") -> list[list[tuple[str, str, Any]]]:
    return [[(name, LS, result)] for _ in range(n)]


@pytest.mark.parametrize(("rounds", "count"), [(1, None), (2, None), (3, 3), (4, 4), (7, 7)])
def test_the_run_counts_identical_rounds_from_three(rounds: int, count: int | None) -> None:
    run = _ledger(_same(rounds)).repeat_run()
    assert (run.count if run else None) == count


def test_arguments_compare_canonically_and_names_are_listed_without_arguments() -> None:
    rounds = [*_same(2), [("Bash", '{ "command" : "ls" }', "file.txt")]]
    run = _ledger(rounds).repeat_run()
    assert run is not None and run.count == 3 and run.names == ("Bash",)
    note = note_text(run)
    assert '"Bash"' in note and "command" not in note  # never the arguments


def test_a_different_result_in_between_ends_the_run() -> None:
    rounds = [*_same(2), [("Bash", LS, "other.txt")], *_same(2)]
    assert _ledger(rounds).repeat_run() is None
    assert _ledger(rounds + _same(1)).repeat_run() is not None  # three again after it


def test_a_different_call_in_between_ends_the_run() -> None:
    rounds = [*_same(2), [("Bash", '{"command": "pwd"}', "file.txt")], *_same(2)]
    assert _ledger(rounds).repeat_run() is None


def test_user_input_between_rounds_ends_the_run() -> None:
    assert _ledger(_same(4), user_after=1).repeat_run() is None  # 2 rounds since the user
    assert _ledger(_same(5), user_after=1).repeat_run().count == 3  # type: ignore[union-attr]
    assert _ledger(_same(4), user_after=3).repeat_run() is None  # the user spoke last


def test_parallel_duplicates_count_once_per_round() -> None:
    doubled = [[("Bash", LS, "file.txt"), ("Bash", LS, "file.txt")] for _ in range(3)]
    assert _ledger(doubled).repeat_run().count == 3  # type: ignore[union-attr]
    mixed = _same(2) + doubled[:1]  # a round with the call twice is the same set of calls
    assert _ledger(mixed).repeat_run().count == 3  # type: ignore[union-attr]


def test_a_round_with_an_unanswered_call_is_no_part_of_a_run() -> None:
    ledger = _ledger(_same(3))
    ledger.begin_turn()
    ledger.call("call_x", "Bash", LS)  # no result yet
    assert ledger.repeat_run() is None


def test_results_compare_by_content_of_any_shape() -> None:
    blocks = [{"type": "text", "text": "file.txt"}]
    assert _ledger(_same(3, result=blocks)).repeat_run() is not None
    assert result_digest(blocks) == result_digest([{"text": "file.txt", "type": "text"}])
    assert result_digest("a") != result_digest(["a"])


@pytest.mark.parametrize(
    ("name", "exempt"),
    [
        ("wait_for_job", True),
        ("Sleep", True),
        ("poll", True),
        ("get_status", True),
        ("check_build", True),
        ("write_stdin", True),
        ("Bash", False),
        ("read_file", False),
    ],
)
def test_tools_that_wait_or_poll_are_exempt_by_default(name: str, exempt: bool) -> None:
    assert is_exempt((name,), DEFAULT_EXEMPT) is exempt
    facts = _ledger(_same(5, name=name)).facts(repeat_guard="on", repeat_exempt=DEFAULT_EXEMPT)
    assert (facts.repeat is None) is exempt


@pytest.mark.parametrize(
    ("mode", "rounds", "noted", "blocked"),
    [
        ("on", 2, False, False),
        ("on", 3, True, False),
        ("on", 4, True, True),
        ("note", 4, True, False),
        ("off", 6, False, False),
    ],
)
def test_the_route_mode_decides_note_and_block(
    mode: str, rounds: int, noted: bool, blocked: bool
) -> None:
    facts = _ledger(_same(rounds)).facts(repeat_guard=mode, repeat_exempt=DEFAULT_EXEMPT)
    assert (facts.repeat is not None) is noted
    assert facts.repeat_block is blocked


class _Call:
    def __init__(self, name: str, arguments: str) -> None:
        self.name = name
        self._arguments = arguments

    def arguments_text(self) -> str:
        return self._arguments


def _ids(rounds: int, mode: str = "on") -> ResponseIds:
    facts = _ledger(_same(rounds)).facts(repeat_guard=mode, repeat_exempt=DEFAULT_EXEMPT)
    return ResponseIds(facts, "auto", GuardState(entropy=lambda n: b"\x01" * n))


def test_the_fifth_identical_call_is_answered_by_the_proxy_under_any_id() -> None:
    ids = _ids(4)
    choice = ids.choice(0)
    assert ids.needs_hold(choice, None, "Bash")  # its arguments decide: held until complete
    decision = ids.decide(choice, "call_fresh_99", _Call("Bash", '{"command":"ls"}'))
    assert decision.verdict is Verdict.REPLAY and decision.reason == FORM_REPEAT
    assert decision.dropped(0, "Bash", "call_fresh_99").reason == "repeat"
    [repeat] = choice.replays
    assert repeat.repeat == 4
    answers, _ = plan_followup(ids.facts, ids.guard, choice.replays)
    assert answers[0].text == REPEAT_ANSWER.format(name="Bash", count=4)
    assert "Duplicate tool call id" not in answers[0].text


def test_other_calls_after_a_blocked_run_are_delivered() -> None:
    ids = _ids(4)
    choice = ids.choice(0)
    assert not ids.needs_hold(choice, None, "read_file")
    other = ids.decide(choice, None, _Call("Bash", '{"command":"pwd"}'))
    assert other.verdict is Verdict.DELIVER


def test_four_rounds_in_note_mode_and_three_in_on_mode_deliver_the_call() -> None:
    for ids in (_ids(4, "note"), _ids(3)):
        decision = ids.decide(ids.choice(0), "call_x", _Call("Bash", LS))
        assert decision.verdict is Verdict.DELIVER


def test_the_same_call_after_the_proxy_answered_it_stops_the_response() -> None:
    ids = _ids(4)
    choice = ids.choice(0)
    ids.decide(choice, "call_a", _Call("Bash", LS))
    _, facts = plan_followup(ids.facts, ids.guard, choice.replays)
    again = ResponseIds(facts, "auto", ids.guard)
    with pytest.raises(RepeatLoopDetected) as caught:
        again.decide(again.choice(0), "call_b", _Call("Bash", LS))
    error = caught.value
    assert isinstance(error, ReplayLoopDetected)  # every surface's breaker handles it
    assert error.code == "tool_call_repeat_loop" and error.error_type == "loop_detected"
    assert error.message.startswith("Tool-call repeat loop detected")
    assert '"Bash"' in error.message


def test_the_note_goes_into_the_result_in_its_own_shape() -> None:
    assert with_note("out", "N") == "out\n\nN"
    assert with_note("", "N") == "N"
    assert with_note(None, "N") == "N"
    assert with_note([{"type": "text", "text": "x"}], "N")[-1] == {"type": "text", "text": "N"}
    parts = [{"type": "input_text", "text": "x"}]
    assert with_note(parts, "N")[-1] == {"type": "input_text", "text": "N"}
    assert with_note(7, "N") == 7


def test_codex_output_lines_that_change_every_run_are_not_compared() -> None:
    """Codex's shell output opens with a random chunk id and the wall time; the rest decides."""

    def output(chunk: str, took: str, body: str = "") -> str:
        return (
            f"Chunk ID: {chunk}\nWall time: {took} seconds\nProcess exited with code 0\n"
            f"Original token count: 0\nOutput:\n{body}"
        )

    runs = [
        [("exec_command", LS, output(c, t))]
        for c, t in (("a1b2c3", "0.0001"), ("9f8e7d", "0.0100"), ("00aa11", "0.2000"))
    ]
    assert _ledger(runs).repeat_run().count == 3  # type: ignore[union-attr]
    progress = [[("exec_command", LS, output("a1b2c3", "0.1", f"{n} lines"))] for n in range(3)]
    assert _ledger(progress).repeat_run() is None  # a count in the output still differs
    assert result_digest("Wall time: 1 second later") != result_digest("")
