"""SPEC §3 as §8 translates it: the ids of an Anthropic history, in the route's dialect."""

from __future__ import annotations

import orjson

from proxy.anthropic.request import translate_messages
from tests.anthropic.anthropic_wire import assistant, request, results, tool_use

LS = {"command": "ls"}


def _ids(body: dict) -> list[tuple[str, str]]:
    out = []
    for message in body["messages"]:
        for block in message["content"] if isinstance(message["content"], list) else []:
            if block["type"] == "tool_use":
                out.append(("use", block["id"]))
            elif block["type"] == "tool_result":
                out.append(("result", block["tool_use_id"]))
    return out


def test_kimi_gets_its_own_counter_ids_back_with_input_kept_an_object() -> None:
    """QUIRKS: a gateway that rewrote `functions.Bash:0` to `functions_Bash_0` made Kimi stop
    calling tools; the upstream must get `functions.{name}:{k}` back."""
    body = request(
        assistant({"type": "text", "text": "a"}, tool_use("toolu_1_0_aaaa1111", "Bash", LS)),
        results("toolu_1_0_aaaa1111"),
        assistant(
            tool_use("toolu_2_0_bbbb2222", "Bash", {"command": "pwd"}),
            tool_use("toolu_2_1_bbbb3333", "grep", {"pattern": "x"}),
        ),
        results("toolu_2_1_bbbb3333", "toolu_2_0_bbbb2222"),
    )
    out = translate_messages(body, "auto")
    assert out.facts.dialect == "kimi" and out.facts.turn == 3
    assert _ids(out.body) == [
        ("use", "functions.Bash:0"),
        ("result", "functions.Bash:0"),
        ("use", "functions.Bash:1"),
        ("use", "functions.grep:2"),
        ("result", "functions.grep:2"),
        ("result", "functions.Bash:1"),
    ]
    assert out.body["messages"][1]["content"][1]["input"] == LS
    assert body["messages"][1]["content"][1]["id"] == "toolu_1_0_aaaa1111"  # not mutated


def test_a_history_that_needs_nothing_is_forwarded_byte_for_byte() -> None:
    body = request(
        assistant(tool_use("toolu_01A", "Bash", LS)), results("toolu_01A"), model="glm-4.6"
    )
    raw = orjson.dumps(body, option=orjson.OPT_INDENT_2)
    out = translate_messages(body, "auto")
    assert not out.changed and out.to_bytes(raw) == raw


def test_colliding_history_ids_are_repaired_for_strict_upstreams() -> None:
    """QUIRKS: "tool_use ids must be unique" 400s when a history holds a repeated id."""
    body = request(
        assistant(
            tool_use("grep:3", "grep", {"pattern": "a"}),
            tool_use("grep:3", "grep", {"pattern": "b"}),
        ),
        results("grep:3", "grep:3"),
        model="glm-4.6",
    )
    out = translate_messages(body, "auto")
    ids = _ids(out.body)
    uses = [i for kind, i in ids if kind == "use"]
    assert len(set(uses)) == 2
    assert [i for kind, i in ids if kind == "result"] == uses  # each result follows its call


def test_appending_to_the_history_never_changes_earlier_ids() -> None:
    turn2 = (assistant(tool_use("toolu_1_0_aaaa1111", "Bash", LS)), results("toolu_1_0_aaaa1111"))
    turn3 = (assistant(tool_use("toolu_2_0_bbbb1111", "Bash", LS)), results("toolu_2_0_bbbb1111"))
    short = translate_messages(request(*turn2), "kimi").body["messages"]
    longer = translate_messages(request(*turn2, *turn3), "kimi").body["messages"]
    assert longer[: len(short)] == short


def test_facts_know_answered_calls_by_both_forms() -> None:
    body = request(
        assistant(tool_use("toolu_1_0_aaaa1111", "Bash", LS)), results("toolu_1_0_aaaa1111")
    )
    facts = translate_messages(body, "auto").facts
    assert facts.answered == {"functions.Bash:0": ("Bash", '{"command":"ls"}')}
    assert facts.issued_digests  # the minted toolu_ id carries the raw id's digest
    assert facts.offered_tools == {"Bash", "grep"}


def test_odd_blocks_and_messages_are_left_alone() -> None:
    body = request(
        {"role": "assistant", "content": "plain text"},
        {"role": "user", "content": [None, 3, {"type": "tool_result"}, {"type": "image"}]},
        model="glm-4.6",
    )
    out = translate_messages(body, "auto")
    assert not out.changed and out.facts.turn == 2
