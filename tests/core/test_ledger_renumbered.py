"""docs/contract.md §5: replays recognized when the client renumbers its history's ids.

Copilot CLI on a Kimi model rewrites every call's id to `functions.<name>:<n>` (n counted over
the conversation), so the proxy's minted ids, which carry the digest of the id the upstream
first issued, never come back. An upstream whose counter restarts every response issued each
call as `functions.<name>:<place among its response's calls>`, and that is how it replays one.
Such a call is recognized by the place its turn gave it, together with its fingerprint; a call
under any other id, or with other arguments, is a fresh call.
"""

from __future__ import annotations

import pytest

from proxy.core.ids import fingerprint, mint_client_id
from proxy.core.ledger import FORM_RESTARTED, FORM_UPSTREAM, HistoryFacts, HistoryLedger, counter_id

LS = '{"command": "ls"}'
LOG = '{"command": "echo ran >> log.txt"}'
READ = '{"path": "notes.txt"}'


def _facts(turns: list[list[tuple[str, str, str]]], dialect: str = "kimi") -> HistoryFacts:
    """Each turn: (client id, name, arguments) per call, every call answered."""
    ledger = HistoryLedger(dialect)
    for calls in turns:
        ledger.begin_turn()
        for client_id, name, arguments in calls:
            ledger.call(client_id, name, arguments)
        for client_id, _, _ in calls:
            ledger.result(client_id, "ok")
    return ledger.facts()


# Copilot's renumbered history: ls, then the shell command, then a read and the command again
# in one turn (places 0 and 1 of that turn).
RENUMBERED = [
    [("functions.bash:0", "bash", LS)],
    [("functions.bash:1", "bash", LOG)],
    [("functions.read:2", "read", READ), ("functions.bash:3", "bash", LS)],
]


def test_a_restarted_replay_of_a_renumbered_call_is_a_replay() -> None:
    facts = _facts(RENUMBERED)
    # the shell command was its turn's first call: a restarted counter issued it as `:0`
    match = facts.replay_of("functions.bash:0", fingerprint("bash", LOG))
    assert match is not None and (match.form, match.client_id) == (
        FORM_RESTARTED,
        "functions.bash:1",
    )
    assert facts.may_be_replay("functions.bash:0")
    # the bare Kimi form too
    assert facts.replay_of("bash:0", fingerprint("bash", LOG)) is not None


def test_the_place_in_its_turn_decides() -> None:
    facts = _facts(RENUMBERED)
    # `ls` ran first in turn 1 and second in turn 3: either place
    for raw in ("functions.bash:0", "functions.bash:1"):
        assert facts.replay_of(raw, fingerprint("bash", LS)) is not None
    # the read was first in its turn, never second
    assert facts.replay_of("functions.read:0", fingerprint("read", READ)) is not None
    assert facts.replay_of("functions.read:1", fingerprint("read", READ)) is None


@pytest.mark.parametrize(
    ("raw_id", "name", "arguments"),
    [
        ("functions.bash:0", "bash", '{"command": "echo other"}'),  # other arguments
        ("functions.bash:4", "bash", LOG),  # the next number of a conversation-wide counter
        ("functions.bash:7", "bash", LOG),
        ("functions.read:0", "bash", LOG),  # an id naming another tool
        ("call_abc123", "bash", LOG),  # a fresh id of any other shape
        ("functions.bash:x", "bash", LOG),
    ],
)
def test_a_legitimate_rerun_is_not_a_replay(raw_id: str, name: str, arguments: str) -> None:
    facts = _facts(RENUMBERED)
    assert facts.replay_of(raw_id, fingerprint(name, arguments)) is None


def test_the_history_id_still_matches_as_the_upstream_id() -> None:
    # the client's n is the Kimi dialect's own numbering: a replay under the history's id
    # matches the call's upstream id, as before
    facts = _facts(RENUMBERED)
    match = facts.replay_of("functions.bash:1", fingerprint("bash", LOG))
    assert match is not None and match.form == FORM_UPSTREAM


def test_ids_the_client_did_not_renumber_add_nothing() -> None:
    minted = mint_client_id(1, 0, "abcd", "functions.bash:0")
    facts = _facts([[(minted, "bash", LOG)], [("call_Q7vR2kLm9XpT4s", "bash", LS)]])
    assert facts.restarted == {}
    # a Kimi-style id naming another tool than its call is not a renumbering either
    assert _facts([[("functions.read:0", "bash", LOG)]]).restarted == {}


def test_an_unanswered_call_is_not_replayed() -> None:
    ledger = HistoryLedger("kimi")
    ledger.begin_turn()
    ledger.call("functions.bash:0", "bash", LOG)
    facts = ledger.facts()
    assert facts.replay_of("functions.bash:0", fingerprint("bash", LOG)) is None


@pytest.mark.parametrize(
    ("raw_id", "parsed"),
    [
        ("functions.bash:0", ("bash", 0)),
        ("bash:12", ("bash", 12)),
        ("functions.run_shell_command:3", ("run_shell_command", 3)),
        ("functions.bash:12345", None),
        ("call_0", None),
        ("functions.bash", None),
        ("a b:1", None),
    ],
)
def test_counter_ids(raw_id: str, parsed: tuple[str, int] | None) -> None:
    assert counter_id(raw_id) == parsed
