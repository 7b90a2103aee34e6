"""The history walk every API surface shares (proxy.core.ledger): told in order where turns
begin, which calls they made and which got results, it decides upstream ids, pairs results
and states the facts. Chat Completions' own walk is covered by test_history.py; these pin the
ledger's contract as another surface's walk uses it."""

from __future__ import annotations

from proxy.core.ids import fingerprint
from proxy.core.ledger import FORM_ISSUED, FORM_UPSTREAM, HistoryLedger


def test_object_and_string_arguments_are_one_fingerprint() -> None:
    """An Anthropic `input` object and a Chat Completions arguments string of the same call
    are one answered call (SPEC §8: input is canonicalized as an object)."""
    ledger = HistoryLedger("passthrough")
    ledger.begin_turn()
    ledger.call("toolu_01A", "Bash", {"command": "ls", "timeout": 5})
    assert ledger.result("toolu_01A") is not None
    facts = ledger.facts()
    key = fingerprint("Bash", '{"timeout": 5, "command": "ls"}')
    assert facts.replay_of("toolu_01A", key) is not None
    assert facts.replay_of("toolu_01A", fingerprint("Bash", {"command": "pwd"})) is None


def test_kimi_ids_count_calls_across_turns_and_results_follow_them() -> None:
    ledger = HistoryLedger("kimi")
    ledger.begin_turn()
    first = ledger.call("toolu_1_0_aaaa23fd", "Bash", {"command": "ls"})
    assert ledger.result("toolu_1_0_aaaa23fd") is first
    ledger.begin_turn()
    second = ledger.call("toolu_2_0_bbbb23fd", "Read", {"path": "a"})
    third = ledger.call("toolu_2_1_bbbb23fd", "Bash", {"command": "pwd"})
    assert [first.upstream_id, second.upstream_id, third.upstream_id] == [
        "functions.Bash:0",
        "functions.Read:1",
        "functions.Bash:2",
    ]
    assert ledger.result("toolu_2_1_bbbb23fd") is third
    facts = ledger.facts(offered_tools=frozenset({"Bash", "Read"}))
    assert facts.turn == 3 and facts.tool_call_count == 3 and facts.dialect == "kimi"
    assert set(facts.answered) == {"functions.Bash:0", "functions.Bash:2"}
    assert facts.offered_tools == {"Bash", "Read"}


def test_a_reused_id_pairs_with_the_nearest_earlier_turn_first_unanswered_call() -> None:
    """Kimi's restarted counters: the same client id in two turns; each result answers the
    call of the turn it follows, and the repeated id gets a distinct upstream id."""
    ledger = HistoryLedger("passthrough")
    ledger.begin_turn()
    old = ledger.call("functions.Bash:0", "Bash", {"command": "ls"})
    assert ledger.result("functions.Bash:0") is old
    ledger.begin_turn()
    new = ledger.call("functions.Bash:0", "Bash", {"command": "pwd"})
    assert new.upstream_id != old.upstream_id
    assert ledger.result("functions.Bash:0") is new
    # A second answer to an id whose calls are all answered follows the latest call.
    assert ledger.result("functions.Bash:0") is new
    assert ledger.result("never-issued") is None
    assert ledger.result(None) is None


def test_answered_calls_are_found_by_both_forms_of_spec_5() -> None:
    """A replay under the id this request sent upstream, or under the id the upstream first
    issued (a kept id, or the digest a minted id carries)."""
    ledger = HistoryLedger("kimi")
    ledger.begin_turn()
    # minted from raw id "call_0" (digest 23fd), sent upstream as functions.Bash:0
    ledger.call("toolu_1_0_aaaa23fd", "Bash", {"command": "ls"})
    ledger.result("toolu_1_0_aaaa23fd")
    facts = ledger.facts()
    key = fingerprint("Bash", {"command": "ls"})
    upstream = facts.replay_of("functions.Bash:0", key)
    issued = facts.replay_of("call_0", key)
    assert upstream is not None and upstream.form == FORM_UPSTREAM
    assert issued is not None and issued.form == FORM_ISSUED
    assert issued.client_id == "toolu_1_0_aaaa23fd"


def test_a_history_that_starts_with_a_call_opens_a_turn() -> None:
    ledger = HistoryLedger("passthrough")
    record = ledger.call("call_abc", "f", "{}")
    assert record.turn == 1 and ledger.facts().turn == 2
