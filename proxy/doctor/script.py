"""The scripted conversation: two tools, prompts that ask for parallel calls, canned results.

The tools are harmless lookups and their results are canned text: the doctor never runs
anything a model asks for. Turn 1 and turn 2 each ask for two calls at once; turn 3 sends
the second round's results and lets the model answer. A client continues with the calls as
the provider sent them (ids included), which is what makes ids that recur, replays and Kimi's
reading of its own history visible.
"""

from __future__ import annotations

from typing import Any

from proxy.core.surfaces import SURFACES

JSON = dict[str, Any]


def _tool(name: str, description: str, parameter: str, about: str) -> JSON:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": {parameter: {"type": "string", "description": about}},
                "required": [parameter],
            },
        },
    }


TOOLS: list[JSON] = [
    _tool("get_weather", "Current weather in a city", "city", "a city name, e.g. Paris"),
    _tool("get_time", "Current local time in a time zone", "timezone", "e.g. Europe/Paris"),
]
SYSTEM = (
    "You are being tested for tool calling. Use the tools for every question, and when a "
    "question needs several tools, call them all at once in one reply (parallel tool calls)."
)
# One user message per tool round; the conversation's last turn answers the last round.
PROMPTS = (
    "What is the weather in Paris and the local time there (Europe/Paris)? "
    "Call get_weather and get_time together, in one reply.",
    "Now the same for Tokyo (Asia/Tokyo): call get_weather and get_time together again.",
)
TURNS = len(PROMPTS) + 1
# Streaming first: most of what goes wrong only shows in streams.
CONVERSATIONS = ((True, "streaming"), (False, "non-streaming"))
# Requests a whole run may send: every conversation's turns plus one per other surface.
MAX_REQUESTS = len(CONVERSATIONS) * TURNS + len(SURFACES) - 1
CANNED = "canned answer from toolcall-proxy doctor (nothing was run): {result}"
RESULTS = {"get_weather": "sunny, 21 degrees C", "get_time": "14:05"}


def first_messages() -> list[JSON]:
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": PROMPTS[0]}]


def chat_request(model: str, messages: list[JSON], *, stream: bool) -> JSON:
    return {"model": model, "messages": messages, "tools": TOOLS, "stream": stream}


def tool_results(message: JSON) -> list[JSON]:
    """One canned tool message per call of an assistant message, keyed by the call's id."""
    results = []
    for call in message.get("tool_calls") or ():
        name = call.get("function", {}).get("name")
        result = RESULTS.get(name, "done") if isinstance(name, str) else "done"
        results.append(
            {
                "role": "tool",
                "tool_call_id": call.get("id"),
                "content": CANNED.format(result=result),
            }
        )
    return results


def continue_after(turn: int, assistant: JSON) -> list[JSON]:
    """The messages that follow turn `turn`'s answer, before turn `turn + 1` is asked."""
    follow = [assistant, *tool_results(assistant)]
    if turn < len(PROMPTS):
        follow.append({"role": "user", "content": PROMPTS[turn]})
    return follow
