"""SPEC §11 end to end: a session whose history holds a call the user interrupted (no result)
and a result whose call was compacted away. Straight to a strict upstream (the simulator's
`strict` option, OpenAI's rule and words) the request is refused, and so would be every later
request of the session; through the real proxy on loopback, driven by the openai SDK, the same
request is repaired and answered, and the repairs are counted."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest

from proxy.simulator import SimulatorLog
from tests.e2e.conftest import ProxyFactory
from tests.servers import ServerThread

MODEL = "reference+rounds=1+strict=1"
TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": "bash",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
        },
    }
]


def call(call_id: str, command: str) -> dict[str, Any]:
    arguments = '{"command": "' + command + '"}'
    return {"id": call_id, "type": "function", "function": {"name": "bash", "arguments": arguments}}


HISTORY: list[Any] = [
    {"role": "user", "content": "list the files, then show the log"},
    {"role": "assistant", "content": None, "tool_calls": [call("call_ls01", "ls")]},
    {"role": "tool", "tool_call_id": "call_ls01", "content": "a.py b.py"},
    {"role": "assistant", "content": None, "tool_calls": [call("call_tail01", "tail -f x.log")]},
    # the user pressed Esc while tail ran: no tool message for call_tail01
    {"role": "user", "content": "stop that, just say hi"},
    {"role": "tool", "tool_call_id": "call_gone01", "content": "output of a compacted call"},
    {"role": "user", "content": "hi?"},
]


def client(base: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base + "/v1", api_key="sk-test", max_retries=0)


def test_a_strict_upstream_refuses_the_history_and_the_proxy_repairs_it(
    simulator: ServerThread, make_proxy: ProxyFactory, log: SimulatorLog
) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        client(simulator.url).chat.completions.create(
            model=MODEL, messages=HISTORY, tools=TOOLS, stream=False
        )
    assert "must be followed by tool messages responding to each 'tool_call_id'" in str(
        refused.value
    )
    assert "call_tail01" in str(refused.value)

    with make_proxy() as proxy:
        answer = client(proxy.url).chat.completions.create(
            model=MODEL, messages=HISTORY, tools=TOOLS, stream=False
        )
        assert answer.choices[0].message is not None
        stream = client(proxy.url).chat.completions.create(
            model=MODEL, messages=HISTORY, tools=TOOLS, stream=True
        )
        assert [chunk for chunk in stream]  # served to its end, no error
        metrics = httpx.get(proxy.url + "/metrics").text
    sent = log.requests[-1]["messages"]
    roles = [m["role"] for m in sent]
    assert roles[3:6] == ["assistant", "tool", "user"]
    assert "no result was recorded" in sent[4]["content"].lower()
    assert sent[6]["role"] == "user" and sent[6]["content"].endswith("output of a compacted call")
    for kind in ("missing_result", "orphan_result"):
        line = f'toolcall_proxy_requests_repaired_total{{kind="{kind}",surface="chat_completions"}}'
        assert line + " 2.0" in metrics.splitlines()  # each request once, under each kind


def test_request_repair_off_sends_the_history_as_the_client_wrote_it(
    make_proxy: ProxyFactory, log: SimulatorLog
) -> None:
    """`request_repair: off` on the route: the strict upstream's refusal reaches the client."""
    with (
        make_proxy(request_repair=False) as proxy,
        pytest.raises(openai.BadRequestError) as refused,
    ):
        client(proxy.url).chat.completions.create(
            model=MODEL, messages=HISTORY, tools=TOOLS, stream=False
        )
    assert "call_tail01" in str(refused.value)
    assert [m["role"] for m in log.requests[-1]["messages"]] == [m["role"] for m in HISTORY]
