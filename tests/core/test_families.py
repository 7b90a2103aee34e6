"""SPEC §11 provider families: which family a route and a request belong to, the rules each
brings, and the schema flavors (`proxy.core.families`, `proxy.core.schemas`), with the Chat,
Anthropic and Responses walks that apply them."""

from __future__ import annotations

from typing import Any, get_args

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.anthropic.request import translate_messages
from proxy.chat.history import translate_request
from proxy.config.options import UpstreamProfile
from proxy.config.settings import Route
from proxy.core.families import (
    FAMILIES,
    PROFILES,
    family_of_host,
    family_of_model,
    request_rules,
    route_profile,
)
from proxy.core.notes import DeltaRepaired, Note
from proxy.core.schemas import flavored, strict_compatible
from proxy.ops.startup import route_line
from proxy.responses.request import translate_request as translate_responses


def test_the_setting_names_every_family() -> None:
    assert get_args(UpstreamProfile) == PROFILES
    assert set(PROFILES) - {"auto"} == set(FAMILIES)


@pytest.mark.parametrize(
    ("upstream", "family"),
    [
        ("https://api.deepseek.com/v1", "deepseek"),
        ("https://api.moonshot.ai/v1", "moonshot"),
        ("https://api.moonshot.cn/v1", "moonshot"),
        ("https://open.bigmodel.cn/api/paas/v4", "zhipu"),
        ("https://api.z.ai/api/coding/paas/v4", "zhipu"),
        ("https://api.minimax.io/v1", "minimax"),
        ("https://api.minimax.chat/v1", "minimax"),
        ("https://dashscope-intl.aliyuncs.com/compatible-mode/v1", "qwen"),
        ("https://generativelanguage.googleapis.com/v1beta/openai", "gemini"),
        ("https://api.mistral.ai/v1", "mistral"),
        ("https://api.openai.com/v1", "openai"),
        ("https://api.anthropic.com/v1", "anthropic"),
        ("http://localhost:11434/v1", "ollama"),
        ("http://127.0.0.1:8000/v1", None),
        ("https://openrouter.ai/api/v1", None),
        ("https://evil-api.deepseek.com.example/v1", None),
    ],
)
def test_the_host_names_the_family(upstream: str, family: str | None) -> None:
    assert family_of_host(upstream) == family
    assert route_profile("auto", upstream) == (family or "auto")
    assert route_profile("generic", upstream) == "generic"  # a setting always wins


@pytest.mark.parametrize(
    ("model", "family"),
    [
        ("deepseek-v4-pro", "deepseek"),
        ("deepseek-ai/DeepSeek-R1-Distill-Qwen-32B", "deepseek"),
        ("kimi-k2-thinking", "moonshot"),
        ("moonshotai/Kimi-K2.5", "moonshot"),
        ("glm-5.1", "zhipu"),
        ("MiniMax-M2.7", "minimax"),
        ("qwen3-coder-plus", "qwen"),
        ("gemini-2.5-pro", "gemini"),
        ("devstral-small-2507", "mistral"),
        ("claude-sonnet-4-5", "anthropic"),
        ("gpt-5", "openai"),
        ("o3-mini", "openai"),
        ("llama-3.3-70b", None),
        (None, None),
    ],
)
def test_else_the_model_name_does(model: str | None, family: str | None) -> None:
    assert family_of_model(model) == family
    assert request_rules("auto", False, model).name == (family or "generic")
    assert request_rules("ollama", False, model).name == "ollama"


def test_reasoning_passback_is_the_families_or_the_routes() -> None:
    assert request_rules("auto", False, "deepseek-chat").passback
    assert request_rules("moonshot", False, "x").passback
    assert not request_rules("zhipu", False, "glm-5").passback
    assert request_rules("zhipu", True, "glm-5").passback


def test_the_route_line_names_the_family_and_its_rules() -> None:
    from proxy.config.settings import Settings

    route = Route(name="ds", upstream="https://api.deepseek.com/v1")
    line = route_line(Settings(routes=(route,)), route)
    assert "provider family deepseek (reasoning_passback, role, content, client_only_block)" in (
        line
    )
    local = Route(name="local", upstream="http://127.0.0.1:8000/v1", request_repair=False)
    assert "request repair off" in route_line(Settings(routes=(local,)), local)


def kinds(notes: list[Note]) -> list[str]:
    return [note.kind for note in notes if isinstance(note, DeltaRepaired)]


# -- the Chat walk -----------------------------------------------------------------------------

TOOLS: list[Any] = [
    {"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}
]


def turn(call_id: str, **extra: Any) -> dict[str, Any]:
    call = {"id": call_id, "type": "function", "function": {"name": "bash", "arguments": "{}"}}
    return {"role": "assistant", "content": "", "tool_calls": [call], **extra}


def chat(messages: list[Any], profile: str, model: str = "m", tools: Any = TOOLS) -> Any:
    body: dict[str, Any] = {"model": model, "messages": messages}
    if tools is not None:
        body["tools"] = tools
    return translate_request(
        body, "passthrough", repair=True, family=request_rules(profile, False, model)
    )


def test_passback_only_where_tools_are_offered() -> None:
    messages = [turn("c1"), {"role": "tool", "tool_call_id": "c1", "content": "ok"}]
    assert chat(messages, "moonshot").body["messages"][0]["reasoning_content"] == ""
    assert "reasoning_content" not in chat(messages, "moonshot", tools=None).body["messages"][0]
    kept = [turn("c1", reasoning_content="thought"), messages[1]]
    assert chat(kept, "deepseek").body["messages"][0]["reasoning_content"] == "thought"
    assert "reasoning_passback" not in kinds(chat(kept, "deepseek").repairs)


def test_generic_leaves_the_request_byte_for_byte() -> None:
    tools: list[Any] = [
        {
            "type": "function",
            "function": {"name": "b", "parameters": {"type": "object", "properties": {}}},
        }
    ]
    messages = [
        {"role": "developer", "content": "x"},
        turn("c1"),
        {"role": "tool", "tool_call_id": "c1", "content": ""},
    ]
    translated = chat(messages, "generic", tools=tools)
    assert not translated.changed and translated.repairs == []


def test_openai_keeps_developer_and_drops_only_a_strict_it_would_refuse() -> None:
    loose = {"type": "object", "properties": {"a": {"type": "string"}}}
    closed = {**loose, "required": ["a"], "additionalProperties": False}
    tools = [
        {"type": "function", "function": {"name": "l", "strict": True, "parameters": loose}},
        {"type": "function", "function": {"name": "c", "strict": True, "parameters": closed}},
    ]
    translated = chat([{"role": "developer", "content": "x"}], "openai", tools=tools)
    sent = translated.body["tools"]
    assert "strict" not in sent[0]["function"] and sent[1]["function"]["strict"] is True
    assert sent[0]["function"]["parameters"] == loose
    assert translated.body["messages"][0]["role"] == "developer"


histories = st.lists(
    st.sampled_from(
        [
            {"role": "developer", "content": "d"},
            {"role": "user", "content": "u"},
            turn("c1"),
            turn("c2", content=None),
            turn("c3", reasoning="r"),
            {"role": "tool", "tool_call_id": "c1", "content": ""},
        ]
    ),
    max_size=8,
)


@settings(deadline=None)
@given(histories, histories, st.sampled_from(sorted(FAMILIES)))
def test_appending_never_changes_how_earlier_messages_were_sent(
    head: list[Any], tail: list[Any], profile: str
) -> None:
    """SPEC §11: prefix-stable (the pairing repairs aside, which have their own test)."""
    family = request_rules(profile, False, "m")

    def sent(messages: list[Any]) -> list[Any]:
        body = {"model": "m", "messages": messages, "tools": TOOLS}
        out = translate_request(body, "passthrough", repair=True, family=family).body
        return [m for m in out["messages"] if m.get("role") != "tool"]

    before = sent(head)
    after = sent(head + tail)
    assert after[: len(before)] == before


# -- Anthropic and Responses --------------------------------------------------------------------


def test_tool_reference_blocks_become_text_for_an_anthropic_compatible_upstream() -> None:
    reference = {"type": "tool_reference", "tool_name": "get_weather"}
    messages = [
        {"role": "user", "content": "find the weather tool"},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "toolu_1", "name": "search", "input": {}}],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": [reference]}],
        },
    ]
    body = {"model": "kimi-k2.5", "messages": messages}
    moonshot = translate_messages(
        body, "passthrough", repair=True, family=request_rules("auto", False, "kimi-k2.5")
    )
    result = moonshot.body["messages"][2]["content"][0]
    assert result["content"] == [{"type": "text", "text": "tool_reference: get_weather"}]
    assert kinds(moonshot.repairs) == ["client_only_block"]
    anthropic = translate_messages(
        {**body, "model": "claude-opus-4-5"},
        "passthrough",
        repair=True,
        family=request_rules("auto", False, "claude-opus-4-5"),
    )
    assert not anthropic.changed


def test_responses_developer_items_go_as_system_outside_openai() -> None:
    body = {
        "model": "deepseek-v4-flash",
        "input": [{"type": "message", "role": "developer", "content": "be brief"}],
    }
    out = translate_responses(
        body, "passthrough", repair=True, family=request_rules("auto", False, body["model"])
    )
    assert out.body["input"][0]["role"] == "system"
    same = translate_responses(
        body, "passthrough", repair=True, family=request_rules("openai", False, "x")
    )
    assert not same.changed


# -- the flavors -------------------------------------------------------------------------------

schemas = st.recursive(
    st.fixed_dictionaries(
        {},
        optional={
            "type": st.sampled_from(["string", "integer", "number", "boolean"]),
            "description": st.text(max_size=5),
            "enum": st.lists(st.sampled_from(["a", "b", 1, 2]), min_size=1, max_size=3),
        },
    ),
    lambda inner: st.one_of(
        st.fixed_dictionaries(
            {"properties": st.dictionaries(st.sampled_from("pqrs"), inner, max_size=3)},
            optional={"type": st.just("object"), "required": st.lists(st.sampled_from("pqx"))},
        ),
        st.fixed_dictionaries({"items": inner}, optional={"type": st.just("array")}),
        st.fixed_dictionaries(
            {"anyOf": st.lists(inner, min_size=1, max_size=3)},
            optional={"type": st.just("string")},
        ),
    ),
    max_leaves=8,
)


def _named(schema: Any, path: str = "") -> dict[str, Any]:
    """Each property's name, description and enum (what a flavor must never lose), by path."""
    out: dict[str, Any] = {}
    if not isinstance(schema, dict):
        return out
    for name, child in (schema.get("properties") or {}).items():
        where = f"{path}/{name}"
        if isinstance(child, dict):
            out[where] = (child.get("description"), child.get("enum"), child.get("type"))
        out.update(_named(child, where))
    if isinstance(schema.get("items"), dict):
        out.update(_named(schema["items"], path + "[]"))
    return out


@settings(deadline=None)
@given(schemas, st.sampled_from(["moonshot", "gemini"]))
def test_a_flavor_never_loses_a_name_description_enum_or_type(schema: Any, flavor: str) -> None:
    root = {"type": "object", "properties": {"x": schema}}
    out = flavored(root, flavor) or root
    before, after = _named(root), _named(out)
    assert set(before) <= set(after)
    for where, (description, enum, kind) in before.items():
        assert after[where][0] == description and after[where][1] == enum
        if kind is not None and "anyOf" not in (root if where == "/x" else {}):
            assert after[where][2] in (kind, None)  # moved into an anyOf's members at most
    assert flavored(out, flavor) is None  # a flavored schema needs nothing more


@settings(deadline=None)
@given(schemas)
def test_a_moonshot_schema_passes_the_strict_simulated_validator(schema: Any) -> None:
    from proxy.simulator.providers import moonshot_schema_problem

    root = {"type": "object", "properties": {"x": schema}}
    assert moonshot_schema_problem(flavored(root, "moonshot") or root) is None


def test_refs_are_inlined_and_a_recursive_one_ends() -> None:
    tree = {
        "type": "object",
        "properties": {"root": {"$ref": "#/$defs/Node", "description": "the top"}},
        "$defs": {
            "Node": {
                "type": "object",
                "description": "a node",
                "properties": {"children": {"type": "array", "items": {"$ref": "#/$defs/Node"}}},
            }
        },
    }
    out = flavored(tree, "gemini")
    assert out is not None and "$defs" not in out
    node = out["properties"]["root"]
    assert node["description"] == "the top" and node["type"] == "object"
    assert node["properties"]["children"]["items"] == {"type": "object"}


def test_strict_mode_wants_closed_objects_that_require_everything() -> None:
    assert strict_compatible(
        {"type": "object", "properties": {}, "required": [], "additionalProperties": False}
    )
    assert not strict_compatible({"type": "object", "properties": {"a": {"type": "string"}}})


def test_minimax_gets_an_object_with_properties() -> None:
    assert flavored({"type": "object"}, "minimax") == {"type": "object", "properties": {}}
    assert flavored({"type": "object", "properties": {}}, "minimax") is None
