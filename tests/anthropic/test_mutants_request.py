"""SPEC §3, §10 as §8 translates them: the request's history (`request.py`) at the edges the
mutation audit found unpinned (the bytes of a translated history, ids that are numbers or
missing, odd `tools` and `content`, and a person's words after a repeat run)."""

from __future__ import annotations

from typing import Any

import orjson

from proxy.anthropic.request import offered_tools, translate_messages
from proxy.core.repeat import note_text, with_note
from tests.anthropic.anthropic_wire import assistant, request, results, tool_use

JSON = dict[str, Any]
LS = {"command": "ls"}


def ids(body: JSON) -> list[tuple[object, object]]:
    return [
        (block.get("id"), block.get("tool_use_id"))
        for message in body["messages"]
        if isinstance(message.get("content"), list)
        for block in message["content"]
        if isinstance(block, dict) and block.get("type") in ("tool_use", "tool_result")
    ]


def test_a_translated_history_goes_upstream_as_translated() -> None:
    body = request(
        assistant(tool_use("toolu_1_0_aaaa1111", "Bash", LS)), results("toolu_1_0_aaaa1111")
    )
    out = translate_messages(body, "auto")
    assert out.changed
    sent = orjson.loads(out.to_bytes(orjson.dumps(body)))
    assert ids(sent) == [("functions.Bash:0", None), (None, "functions.Bash:0")]


def test_a_numeric_id_is_read_as_its_digits_and_pairs_its_result() -> None:
    body = request(assistant(tool_use(5, "Bash", LS)), results(5), model="glm-4.6")  # type: ignore[arg-type]
    out = translate_messages(body, "auto")
    assert ids(out.body) == [("5", None), (None, "5")]


def test_a_call_without_an_id_gets_a_minted_one() -> None:
    call = {"type": "tool_use", "name": "Bash", "input": LS}
    out = translate_messages(request(assistant(call), results("x"), model="glm-4.6"), "auto")
    [(call_id, _), _] = ids(out.body)
    assert isinstance(call_id, str) and call_id.startswith("call_")


def test_an_id_that_is_neither_text_nor_a_number_is_read_as_missing() -> None:
    call = {"type": "tool_use", "id": ["x"], "name": "Bash", "input": LS}
    out = translate_messages(request(assistant(call), model="glm-4.6"), "auto")
    [(call_id, _)] = ids(out.body)
    assert isinstance(call_id, str) and call_id.startswith("call_")


def test_a_request_without_tools_or_with_odd_ones_offers_only_named_tools() -> None:
    body = request()
    del body["tools"]
    assert offered_tools(body) == frozenset()
    assert translate_messages(body, "auto").facts.offered_tools == frozenset()
    odd: JSON = {"tools": ["Bash", {"input_schema": {}}, {"name": 7}, {"name": "grep"}]}
    assert offered_tools(odd) == frozenset({"grep"})
    assert offered_tools({"tools": {"name": "Bash"}}) == frozenset()


def test_content_that_is_not_a_list_holds_no_blocks() -> None:
    body = request({"role": "assistant", "content": 5}, {"role": "user", "content": "go on"})
    out = translate_messages(body, "auto")
    assert not out.changed and out.body is body


def test_a_persons_words_after_a_repeat_run_end_it() -> None:
    history: list[JSON] = []
    for n in range(4):
        history += [assistant(tool_use(f"toolu_0{n}", "Bash", LS)), results(f"toolu_0{n}")]
    ran = translate_messages(request(*history), "passthrough", "on").facts
    assert ran.repeat is not None and ran.repeat_block
    after = request(*history, {"role": "user", "content": "go on"})
    facts = translate_messages(after, "passthrough", "on").facts
    assert facts.repeat is None and not facts.repeat_block


def rounds_answered(*answers: JSON) -> list[JSON]:
    """One identical `Bash ls` round per answer (a tool_result block's other keys)."""
    history: list[JSON] = []
    for n, answer in enumerate(answers):
        call_id = f"toolu_0{n}"
        result = {"type": "tool_result", "tool_use_id": call_id, **answer}
        history += [assistant(tool_use(call_id, "Bash", LS)), {"role": "user", "content": [result]}]
    return history


def test_rounds_whose_results_differ_are_no_repeat_run() -> None:
    same = rounds_answered(*({"content": "ok"} for _ in range(4)))
    assert translate_messages(request(*same), "passthrough", "on").facts.repeat_block
    other = rounds_answered(*({"content": f"ok {n}"} for n in range(4)))
    facts = translate_messages(request(*other), "passthrough", "on").facts
    assert facts.repeat is None and not facts.repeat_block


def test_a_result_that_became_an_error_ends_a_repeat_run() -> None:
    answers = [{"content": "ok"}] * 3 + [{"content": "ok", "is_error": True}]
    facts = translate_messages(request(*rounds_answered(*answers)), "passthrough", "on").facts
    assert facts.repeat is None and not facts.repeat_block


def test_a_kimi_history_names_a_call_without_a_string_name_by_nothing() -> None:
    call = {"type": "tool_use", "id": "toolu_1_0_aaaa1111", "name": 7, "input": LS}
    out = translate_messages(request(assistant(call), results("toolu_1_0_aaaa1111")), "auto")
    assert ids(out.body) == [("functions.:0", None), (None, "functions.:0")]


def test_the_repeat_guard_is_off_unless_asked_for() -> None:
    same = rounds_answered(*({"content": "ok"} for _ in range(4)))
    out = translate_messages(request(*same), "passthrough")
    assert out.facts.repeat is None and not out.changed


def test_a_repeat_run_notes_its_last_result() -> None:
    same = rounds_answered(*({"content": "ok"} for _ in range(3)))
    out = translate_messages(request(*same), "passthrough", "on")
    assert out.facts.repeat is not None and out.changed
    last = out.body["messages"][-1]["content"][0]
    assert last["content"] == with_note("ok", note_text(out.facts.repeat))
    assert last["content"] != "ok"
    earlier = out.body["messages"][-3]["content"][0]
    assert earlier["content"] == "ok"


def test_an_exempt_tool_makes_no_repeat_run() -> None:
    same = rounds_answered(*({"content": "ok"} for _ in range(4)))
    facts = translate_messages(request(*same), "passthrough", "on", ("Bash",)).facts
    assert facts.repeat is None


def test_every_call_of_the_history_is_listed_for_explain() -> None:
    body = request(assistant(tool_use("toolu_01A", "Bash", LS)), results("toolu_01A"))
    calls = translate_messages(body, "passthrough").calls
    assert [(c.client_id, c.name, c.arguments) for c in calls] == [("toolu_01A", "Bash", LS)]
