"""SPEC §11 on Chat Completions: a history the upstream would refuse is repaired before it
leaves (pairing, arguments, empty schemas), counted by kind, and a history that needs nothing
still goes upstream byte for byte.

OpenAI's refusal these rules answer: "An assistant message with 'tool_calls' must be followed
by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have
response messages: ..." (and "Invalid parameter: messages with role 'tool' must be a response
to a preceeding message with 'tool_calls'."; "Invalid schema for function ...")."""

from __future__ import annotations

from typing import Any

import orjson

from proxy.chat.exchange import ChatExchange
from proxy.chat.history import translate_request
from proxy.core.notes import DeltaRepaired
from proxy.core.request_repair import MISSING_RESULT
from proxy.core.rounds import RouteRules
from tests.chat.helpers import USER, assistant, hcall, request, tool_msg


def repaired(messages: list[Any], dialect: str = "passthrough", **body: Any) -> Any:
    return translate_request(request(messages, **body), dialect, repair=True)


def kinds(translated: Any) -> list[str]:
    return [note.kind for note in translated.repairs]


def roles(body: dict[str, Any]) -> list[str]:
    return [m["role"] for m in body["messages"]]


def first_unpaired(messages: list[dict[str, Any]]) -> str | None:
    """What a strict upstream checks (OpenAI): each assistant message's calls are answered by
    the tool messages right after it, and a tool message answers a call of that message."""
    awaiting: list[str] = []
    for message in messages:
        if message["role"] == "tool":
            if message["tool_call_id"] not in awaiting:
                return f"unexpected {message['tool_call_id']}"
            awaiting.remove(message["tool_call_id"])
            continue
        if awaiting:
            return f"unanswered {awaiting}"
        awaiting = [call["id"] for call in message.get("tool_calls") or ()]
    return f"unanswered {awaiting}" if awaiting else None


READ = hcall("call_a", "read_file", '{"path":"a"}')
GREP = hcall("call_b", "grep", '{"q":"x"}')


def test_an_interrupted_call_gets_a_synthetic_result_right_after_it() -> None:
    history = [USER, assistant(READ, GREP), tool_msg("call_a", "A"), USER]
    tr = repaired(history)
    assert first_unpaired(history) is not None
    assert first_unpaired(tr.body["messages"]) is None
    assert roles(tr.body) == ["user", "assistant", "tool", "tool", "user"]
    synthetic = tr.body["messages"][3]
    assert synthetic == {"role": "tool", "tool_call_id": "call_b", "content": MISSING_RESULT}
    assert "no result was recorded" in MISSING_RESULT.lower()
    assert kinds(tr) == ["missing_result"]
    assert tr.repairs[0] == DeltaRepaired(kind="missing_result", detail="grep")


def test_a_synthetic_result_is_not_an_answered_call_for_the_guards() -> None:
    """SPEC §5 and §10 read the history the client sent: the call the proxy answered with
    "no result recorded" is no answered call, so the same call again is not a replay."""
    tr = repaired([USER, assistant(READ, GREP), tool_msg("call_a", "A"), USER])
    assert set(tr.facts.answered) == {"call_a"}
    assert tr.facts.replay_of("call_b", ("grep", '{"q":"x"}')) is None
    assert tr.facts.replay_of("call_a", ("read_file", '{"path":"a"}')) is not None


def test_a_result_after_a_note_is_moved_up_and_the_note_follows_it() -> None:
    note = {"role": "system", "content": "the user pressed a key"}
    history = [USER, assistant(READ, GREP), tool_msg("call_a", "A"), note, tool_msg("call_b")]
    tr = repaired(history)
    assert [m.get("tool_call_id") or m["content"] for m in tr.body["messages"][1:]] == [
        None,
        "call_a",
        "call_b",
        "the user pressed a key",
    ]
    assert kinds(tr) == ["result_moved"]
    assert first_unpaired(tr.body["messages"]) is None


def test_an_orphan_result_becomes_marked_user_text_where_it_stood() -> None:
    history = [
        USER,
        assistant(READ),
        tool_msg("call_gone", "compacted away"),
        tool_msg("call_a", "A"),
        USER,
    ]
    tr = repaired(history)
    assert roles(tr.body) == ["user", "assistant", "tool", "user", "user"]
    text = tr.body["messages"][3]["content"]
    assert text.startswith("[The result of a tool call that is not in this conversation]")
    assert text.endswith("compacted away")  # nothing lost
    assert kinds(tr) == ["orphan_result"]
    assert first_unpaired(tr.body["messages"]) is None


def test_a_duplicate_result_is_kept_as_marked_text() -> None:
    history = [USER, assistant(READ), tool_msg("call_a", "A"), tool_msg("call_a", "again"), USER]
    tr = repaired(history)
    assert roles(tr.body) == ["user", "assistant", "tool", "user", "user"]
    text = tr.body["messages"][3]["content"]
    assert "read_file" in text and text.endswith("again")
    assert kinds(tr) == ["duplicate_result"]


def test_parts_content_of_an_orphan_is_kept_after_the_mark() -> None:
    parts = [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}]
    tr = repaired([USER, {"role": "tool", "tool_call_id": "x", "content": parts}])
    content = tr.body["messages"][1]["content"]
    assert content[1:] == parts and content[0]["type"] == "text"


def test_a_call_at_the_end_of_the_history_is_answered_too() -> None:
    tr = repaired([USER, assistant(READ)])
    assert roles(tr.body) == ["user", "assistant", "tool"]


def test_kimi_ids_reach_the_synthetic_and_moved_results() -> None:
    history = [
        USER,
        assistant(READ, GREP),
        USER,
        tool_msg("call_a"),
    ]
    tr = repaired(history, "kimi")
    messages = tr.body["messages"]
    assert [m.get("tool_call_id") for m in messages[2:4]] == [
        "functions.read_file:0",
        "functions.grep:1",
    ]
    assert messages[3]["content"] == MISSING_RESULT
    assert kinds(tr) == ["result_moved", "missing_result"]


def test_cut_arguments_are_closed_after_their_last_complete_member() -> None:
    cut = hcall("call_a", "write", '{"path": "a.py", "content": "print(1')
    tr = repaired([USER, assistant(cut), tool_msg("call_a"), USER])
    assert tr.body["messages"][1]["tool_calls"][0]["function"]["arguments"] == '{"path": "a.py"}'
    assert kinds(tr) == ["history_arguments"]


def test_arguments_that_are_no_object_become_an_empty_object() -> None:
    for arguments in ("[1, 2]", "nonsense", "", None, 42):
        call = hcall("call_a", "run", arguments)
        tr = repaired([USER, assistant(call), tool_msg("call_a"), USER])
        assert tr.body["messages"][1]["tool_calls"][0]["function"]["arguments"] == "{}"
        assert kinds(tr) == ["history_arguments"], arguments


def test_a_doubled_flush_keeps_the_first_object() -> None:
    call = hcall("call_a", "run", '{"a":1}{"a":1}')
    tr = repaired([USER, assistant(call), tool_msg("call_a"), USER])
    assert tr.body["messages"][1]["tool_calls"][0]["function"]["arguments"] == '{"a":1}'


def test_a_tool_without_parameters_gets_an_empty_object_schema() -> None:
    tools = [
        {"type": "function", "function": {"name": "now"}},
        {"type": "function", "function": {"name": "ping", "parameters": {}}},
        {"type": "function", "function": {"name": "bare", "parameters": {"type": "object"}}},
        {"type": "function", "function": {"name": "ok", "parameters": {"type": "object", "x": 1}}},
    ]
    tr = repaired([USER], tools=tools)
    schemas = [tool["function"].get("parameters") for tool in tr.body["tools"]]
    empty = {"type": "object", "properties": {}}
    assert schemas == [empty, empty, {"type": "object"}, {"type": "object", "x": 1}]
    assert kinds(tr) == ["tool_schema"] * 2


def test_a_history_that_needs_nothing_goes_byte_for_byte() -> None:
    history = [USER, assistant(READ, GREP), tool_msg("call_a"), tool_msg("call_b"), USER]
    body = request(
        history,
        tools=[
            {
                "type": "function",
                "function": {"name": "x", "parameters": {"type": "object", "properties": {}}},
            }
        ],
    )
    raw = (
        b'{"messages" : '
        + orjson.dumps(body["messages"])
        + b', "model":"m",  "tools": '
        + orjson.dumps(body["tools"])
        + b"}"
    )
    tr = translate_request(orjson.loads(raw), "passthrough", repair=True)
    assert not tr.changed and tr.repairs == []
    assert tr.to_bytes(raw) == raw
    exchange = ChatExchange(orjson.loads(raw), raw, RouteRules())
    assert exchange.upstream_request == raw


def test_repairs_are_prefix_stable() -> None:
    """Appending turns to a repaired history never changes how the earlier part was repaired:
    the bytes of the repaired prefix stay as they were (prompt caches stay warm)."""
    history: list[Any] = [
        USER,
        assistant(READ, GREP),
        tool_msg("call_a", "A"),
        {"role": "system", "content": "note"},
        tool_msg("call_ghost", "orphan"),
        assistant(hcall("call_c", "write", '{"p": 1, "q": "cu')),
        USER,
    ]
    first = repaired(history, "kimi").body["messages"]
    longer = [
        *history,
        assistant(hcall("call_d", "ls", "{}")),
        tool_msg("call_d", "D"),
        assistant(content="done"),
        {"role": "user", "content": "next"},
    ]
    second = repaired(longer, "kimi").body["messages"]
    assert orjson.dumps(second[: len(first)]) == orjson.dumps(first)
    assert repaired(history, "kimi").body == repaired(history, "kimi").body  # deterministic


def test_a_late_result_takes_its_synthetic_results_place() -> None:
    history: list[Any] = [USER, assistant(READ), USER]
    first = repaired(history).body["messages"]
    assert first[2]["content"] == MISSING_RESULT
    second = repaired([*history, tool_msg("call_a", "late")]).body["messages"]
    assert second[2] == tool_msg("call_a", "late") and len(second) == len(first)


def test_request_repair_off_forwards_the_history_as_it_came() -> None:
    history = [USER, assistant(READ, GREP), tool_msg("call_a", "A"), USER]
    body = request(history)
    raw = orjson.dumps(body)
    exchange = ChatExchange(body, raw, RouteRules(request_repair=False))
    assert exchange.upstream_request == raw
    notes, _ = exchange.report()
    assert notes == []


def test_the_exchange_reports_each_repair_as_a_note() -> None:
    history = [USER, assistant(READ, GREP), tool_msg("call_a", "A"), USER]
    body = request(history)
    exchange = ChatExchange(body, orjson.dumps(body), RouteRules())
    sent = orjson.loads(exchange.upstream_request)
    assert first_unpaired(sent["messages"]) is None
    notes, _ = exchange.report()
    assert notes == [DeltaRepaired(kind="missing_result", detail="grep")]
