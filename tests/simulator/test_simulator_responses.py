"""The simulator's Responses endpoint really has the quirks the proxy is tested against."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import orjson
import pytest

from proxy.simulator import create_simulator_app

TOOLS = [{"type": "function", "name": "bash", "parameters": {"type": "object"}}]


@pytest.fixture
async def sim() -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=create_simulator_app())
    async with httpx.AsyncClient(transport=transport, base_url="http://sim") as client:
        yield client


def events(body: bytes) -> list[dict[str, Any]]:
    return [orjson.loads(block.split(b"data: ", 1)[1]) for block in body.split(b"\n\n") if block]


async def stream(sim: httpx.AsyncClient, model: str) -> list[dict[str, Any]]:
    answer = await sim.post(
        "/v1/responses", json={"model": model, "input": "go", "tools": TOOLS, "stream": True}
    )
    assert answer.status_code == 200
    return events(answer.content)


async def test_kimi_restarts_call_ids_every_response(sim: httpx.AsyncClient) -> None:
    first = (
        await sim.post("/v1/responses", json={"model": "kimi", "input": "go", "tools": TOOLS})
    ).json()
    call = first["output"][-1]
    assert call["call_id"] == "functions.bash:0"
    output = [{"type": "function_call_output", "call_id": call["call_id"], "output": "ok"}]
    second = await sim.post(
        "/v1/responses",
        json={
            "model": "kimi",
            "input": output,
            "tools": TOOLS,
            "previous_response_id": first["id"],
        },
    )
    assert second.json()["output"][-1]["call_id"] == "functions.bash:0"


@pytest.mark.parametrize(
    ("model", "missing"),
    [
        ("no-done-events", "response.function_call_arguments.done"),
        ("no-finish", "response.completed"),
    ],
)
async def test_profiles_leave_out_events(sim: httpx.AsyncClient, model: str, missing: str) -> None:
    assert missing not in [e["type"] for e in await stream(sim, model)]


async def test_whole_arguments_in_added_and_missing_item_ids(sim: httpx.AsyncClient) -> None:
    added = [e for e in await stream(sim, "no-index") if e["type"] == "response.output_item.added"]
    assert added[-1]["item"]["arguments"] != ""
    items = (await sim.post("/v1/responses", json={"model": "no-item-ids", "input": "go"})).json()
    assert "id" not in items["output"][-1]


async def test_strict_pairing(sim: httpx.AsyncClient) -> None:
    orphan = [{"type": "function_call_output", "call_id": "nope", "output": "x"}]
    answer = await sim.post("/v1/responses", json={"model": "reference", "input": orphan})
    assert answer.status_code == 400 and "No tool call found" in answer.text
    call = {"type": "function_call", "call_id": "c1", "name": "bash", "arguments": "{}"}
    answer = await sim.post("/v1/responses", json={"model": "reference", "input": [call]})
    assert answer.status_code == 400 and "No tool output found" in answer.text
    unknown = await sim.post(
        "/v1/responses", json={"model": "reference", "input": "x", "previous_response_id": "r"}
    )
    assert unknown.status_code == 400
