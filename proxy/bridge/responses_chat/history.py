"""Responses `input` items as a Chat Completions history (SPEC §9).

- `message` items: `system` / `developer` -> a `system` message in place; `user` -> `user`;
  `assistant` -> the assistant message of its turn.
- Consecutive model-made items (assistant `message`, `reasoning`, `function_call`,
  `custom_tool_call`) are one assistant message: its text, its `tool_calls` in order, and the
  text of our own reasoning items as its `reasoning_content` (`reasoning.unseal`).
- `function_call_output` / `custom_tool_call_output` -> one `tool` message each, in the order
  of the calls they answer, before anything else the client put between them (Chat wants the
  `tool` messages right after their assistant message); images of an output follow in a
  `user` message.
- Call ids travel as they are: the Chat exchange translates them into the route's dialect.
- Anything else (hosted tools' items, a provider's own reasoning, compaction) is left out
  and named.
"""

from __future__ import annotations

from typing import Any

from proxy.bridge.responses_chat.content import chat_content, text_of, tool_output
from proxy.bridge.responses_chat.reasoning import unseal
from proxy.bridge.responses_chat.tools import ToolTable
from proxy.core.errors import ClientRequestError
from proxy.core.jsontext import dumps

MODEL_ITEMS = frozenset({"reasoning", "function_call", "custom_tool_call"})
OUTPUT_ITEMS = frozenset({"function_call_output", "custom_tool_call_output"})
ROLES = {"system": "system", "developer": "system", "user": "user"}
LATE = 1 << 30  # the position of an output whose call is not in the assistant message


class HistoryBuilder:
    """Walks the items once; `messages` is the Chat history, `dropped` what it left out."""

    def __init__(self, table: ToolTable) -> None:
        self.table = table
        self.messages: list[dict[str, Any]] = []
        self.dropped: list[str] = []
        self._turn: dict[str, Any] | None = None  # the assistant message being built
        self._call_order: dict[str, int] = {}  # its calls' ids -> position
        self._outputs: list[tuple[int, int, dict[str, Any]]] = []  # (position, seq, message)
        self._after: list[dict[str, Any]] = []  # messages that come after the tool messages
        self._awaiting: set[str] = set()  # calls of the last assistant message not answered yet

    def add(self, item: dict[str, Any]) -> None:
        kind = item.get("type", "message")
        if kind == "message":
            self._message(item)
        elif kind in MODEL_ITEMS:
            self._model_item(kind, item)
        elif kind in OUTPUT_ITEMS:
            self._output(item)
        else:
            self.dropped.append(str(kind))

    def finish(self) -> list[dict[str, Any]]:
        self._close_turn()
        self._close_outputs()
        return self.messages

    # -- items ---------------------------------------------------------------------------------

    def _message(self, item: dict[str, Any]) -> None:
        role = item.get("role")
        if role == "assistant":
            self._open_turn()["text"].append(text_of(item.get("content")))
            return
        self._close_turn()
        message: dict[str, Any] = {"role": ROLES.get(str(role), "user")}
        message["content"] = chat_content(item.get("content"), self.dropped)
        if self._outputs or self._awaiting:
            self._after.append(message)
        else:
            self.messages.append(message)

    def _model_item(self, kind: str, item: dict[str, Any]) -> None:
        if kind == "reasoning":
            text = unseal(item.get("encrypted_content"))
            if text is None:
                self.dropped.append("reasoning_items")
                return
            self._open_turn()["reasoning"].append(text)
            return
        name = item.get("name") if isinstance(item.get("name"), str) else ""
        if kind == "custom_tool_call":
            raw = item.get("input")
            arguments = dumps({"input": raw if isinstance(raw, str) else ""}).decode()
        else:
            raw = item.get("arguments")
            arguments = raw if isinstance(raw, str) else dumps(raw or {}).decode()
        call = {
            "id": _call_id(kind, item),
            "type": "function",
            "function": {
                "name": self.table.chat_name_of(str(name), item.get("namespace")),
                "arguments": arguments,
            },
        }
        self._open_turn()["calls"].append(call)

    def _output(self, item: dict[str, Any]) -> None:
        self._close_turn()
        call_id = _call_id(str(item.get("type")), item)
        text, media = tool_output(item.get("output"), self.dropped)
        position = self._call_order.get(call_id, LATE)
        self._awaiting.discard(call_id)
        message = {"role": "tool", "tool_call_id": call_id, "content": text}
        self._outputs.append((position, len(self._outputs), message))
        if media:
            self._after.append({"role": "user", "content": media})

    # -- runs ----------------------------------------------------------------------------------

    def _open_turn(self) -> dict[str, Any]:
        if self._turn is None:
            self._close_outputs()
            self._turn = {"text": [], "reasoning": [], "calls": []}
        return self._turn

    def _close_turn(self) -> None:
        turn, self._turn = self._turn, None
        if turn is None:
            return
        message: dict[str, Any] = {"role": "assistant"}
        text = "".join(turn["text"])
        message["content"] = text if text or not turn["calls"] else None
        if turn["reasoning"]:
            message["reasoning_content"] = "".join(turn["reasoning"])
        if turn["calls"]:
            message["tool_calls"] = turn["calls"]
        self.messages.append(message)
        self._call_order = {
            call["id"]: n for n, call in enumerate(turn["calls"]) if isinstance(call["id"], str)
        }
        self._awaiting = set(self._call_order)

    def _close_outputs(self) -> None:
        """The tool messages in the order of their calls, then what came between them."""
        self.messages.extend(message for _, _, message in sorted(self._outputs, key=_order))
        self.messages.extend(self._after)
        self._outputs = []
        self._after = []
        self._awaiting = set()


def _call_id(kind: str, item: dict[str, Any]) -> str:
    """A call's or an output's `call_id`: Responses requires a string, and a Chat upstream
    pairs a call with its answer by it."""
    call_id = item.get("call_id")
    if not isinstance(call_id, str) or not call_id:
        raise ClientRequestError(
            f"every {kind} item needs a `call_id` string", code="invalid_call_id"
        )
    return call_id


def _order(entry: tuple[int, int, dict[str, Any]]) -> tuple[int, int]:
    return entry[0], entry[1]
