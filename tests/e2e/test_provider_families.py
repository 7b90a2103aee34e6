"""SPEC §11 provider families end to end: for each family rule, a request an agent really
sends is refused by the strict simulated provider of that family (its own error text,
`proxy.simulator.providers`), straight from the openai SDK, and accepted through the real
proxy on loopback, whose route detects the family from the model name (or is told it).
docs/contract.md §11 gives the public source of every provider text used here."""

from __future__ import annotations

from typing import Any

import openai
import pytest

from proxy.simulator import SimulatorLog
from proxy.simulator.providers import (
    DEEPSEEK_REASONING,
    MINIMAX_EMPTY,
    MOONSHOT_ANYOF,
    OLLAMA_NULL,
)
from tests.e2e.conftest import ProxyFactory
from tests.servers import ServerThread

TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": "bash",
            "description": "run a command",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
        },
    }
]


def call(call_id: str, command: str) -> dict[str, Any]:
    arguments = '{"command": "' + command + '"}'
    return {"id": call_id, "type": "function", "function": {"name": "bash", "arguments": arguments}}


def history(content: Any = None, result: Any = "a.py b.py", **turn: Any) -> list[Any]:
    """A session one tool round old, its tool-call turn as a client that drops reasoning
    (or keeps it under another name: `turn`) writes it."""
    return [
        {"role": "user", "content": "list the files"},
        {"role": "assistant", "content": content, "tool_calls": [call("call_ls01", "ls")], **turn},
        {"role": "tool", "tool_call_id": "call_ls01", "content": result},
        {"role": "user", "content": "and now?"},
    ]


def client(base: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base + "/v1", api_key="sk-test", max_retries=0)


def create(base: str, model: str, messages: list[Any], tools: list[Any] = TOOLS) -> Any:
    return client(base).chat.completions.create(
        model=model, messages=messages, tools=tools, stream=False
    )


def refused(base: str, model: str, messages: list[Any], tools: list[Any] = TOOLS) -> str:
    with pytest.raises(openai.APIStatusError) as error:
        create(base, model, messages, tools)
    return str(error.value)


def sent(log: SimulatorLog) -> dict[str, Any]:
    return log.requests[-1]


def test_deepseek_tool_call_turns_get_their_reasoning_back(
    simulator: ServerThread, make_proxy: ProxyFactory, log: SimulatorLog
) -> None:
    model = "reference+rounds=1+provider=deepseek"
    assert DEEPSEEK_REASONING in refused(simulator.url, model, history())
    with make_proxy() as proxy:
        assert create(proxy.url, model, history()).choices[0].message is not None
        assert sent(log)["messages"][1]["reasoning_content"] == " "
        # reasoning the client kept under another name is what goes back
        create(proxy.url, model, history(reasoning="I list the files first."))
        assert sent(log)["messages"][1]["reasoning_content"] == "I list the files first."
    with make_proxy(upstream_profile="generic") as proxy:  # the control: no family, refused
        assert DEEPSEEK_REASONING in refused(proxy.url, model, history())


def test_deepseek_gets_system_for_developer(
    simulator: ServerThread, make_proxy: ProxyFactory, log: SimulatorLog
) -> None:
    model = "reference+rounds=1+provider=deepseek"
    messages = [{"role": "developer", "content": "be brief"}, {"role": "user", "content": "hi"}]
    assert "unknown variant `developer`" in refused(simulator.url, model, messages)
    with make_proxy() as proxy:
        create(proxy.url, model, messages)
    assert sent(log)["messages"][0] == {"role": "system", "content": "be brief"}


def test_moonshot_tool_call_turns_get_their_reasoning_back(
    simulator: ServerThread, make_proxy: ProxyFactory, log: SimulatorLog
) -> None:
    model = "reference+rounds=1+provider=moonshot"
    text = refused(simulator.url, model, history(content=""))
    assert "thinking is enabled but reasoning_content is missing in assistant tool call " in text
    assert "message at index 1" in text
    with make_proxy() as proxy:
        create(proxy.url, model, history(content=""))
    assert sent(log)["messages"][1]["reasoning_content"] == ""
    details = [{"type": "reasoning.text", "text": "Listing first."}]
    with make_proxy() as proxy:
        create(proxy.url, model, history(content="", reasoning_details=details))
    assert sent(log)["messages"][1]["reasoning_content"] == "Listing first."


MCP_TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": "search",
            "description": "search the index",
            "parameters": {
                "type": "object",
                "properties": {
                    "query": {"description": "what to look for"},
                    "mode": {"type": "string", "anyOf": [{"enum": ["fast"]}, {"enum": ["deep"]}]},
                    "limit": {"enum": [10, 50], "description": "how many"},
                },
                "required": ["query", "cursor"],
            },
        },
    }
]


def test_moonshot_gets_its_flavor_of_json_schema(
    simulator: ServerThread, make_proxy: ProxyFactory, log: SimulatorLog
) -> None:
    model = "reference+rounds=1+provider=moonshot"
    messages = [{"role": "user", "content": "find it"}]
    text = refused(simulator.url, model, messages, MCP_TOOLS)
    assert "is not a valid moonshot flavored json schema" in text
    with make_proxy() as proxy:
        create(proxy.url, model, messages, MCP_TOOLS)
    schema = sent(log)["tools"][0]["function"]["parameters"]
    properties = schema["properties"]
    assert properties["query"] == {"description": "what to look for", "type": "string"}
    assert properties["mode"] == {
        "anyOf": [{"enum": ["fast"], "type": "string"}, {"enum": ["deep"], "type": "string"}]
    }
    assert properties["limit"] == {"enum": [10, 50], "description": "how many", "type": "integer"}
    assert schema["required"] == ["query"]
    assert MOONSHOT_ANYOF  # the refusal the anyOf rule answers (see the simulator's validator)


def test_zhipu_gets_null_beside_tool_calls(
    simulator: ServerThread, make_proxy: ProxyFactory, log: SimulatorLog
) -> None:
    model = "reference+rounds=1+provider=zhipu"
    assert "content和tool_calls 字段不能同时为空" in refused(simulator.url, model, history(""))
    with make_proxy() as proxy:
        create(proxy.url, model, history(""))
    assert sent(log)["messages"][1]["content"] is None


def test_minimax_gets_a_space_for_an_empty_result(
    simulator: ServerThread, make_proxy: ProxyFactory, log: SimulatorLog
) -> None:
    model = "reference+rounds=1+provider=minimax"
    messages = history(result="")
    assert MINIMAX_EMPTY in refused(simulator.url, model, messages)
    with make_proxy() as proxy:
        create(proxy.url, model, messages)
    assert sent(log)["messages"][2]["content"] == " "


def test_ollama_gets_an_empty_string_for_null(
    simulator: ServerThread, make_proxy: ProxyFactory, log: SimulatorLog
) -> None:
    model = "reference+rounds=1+provider=ollama"
    assert OLLAMA_NULL in refused(simulator.url, model, history(None))
    with make_proxy(upstream_profile="ollama") as proxy:
        create(proxy.url, model, history(None))
    assert sent(log)["messages"][1]["content"] == ""


def test_gemini_gets_the_schema_keywords_it_knows(
    simulator: ServerThread, make_proxy: ProxyFactory, log: SimulatorLog
) -> None:
    model = "reference+rounds=1+provider=gemini"
    tools: list[Any] = [
        {
            "type": "function",
            "function": {
                "name": "write",
                "parameters": {
                    "$schema": "http://json-schema.org/draft-07/schema#",
                    "type": "object",
                    "properties": {"path": {"type": "string", "description": "where"}},
                    "additionalProperties": False,
                },
            },
        }
    ]
    messages = [{"role": "user", "content": "write it"}]
    assert 'Unknown name "$schema"' in refused(simulator.url, model, messages, tools)
    with make_proxy() as proxy:
        create(proxy.url, model, messages, tools)
    assert sent(log)["tools"][0]["function"]["parameters"] == {
        "type": "object",
        "properties": {"path": {"type": "string", "description": "where"}},
    }
