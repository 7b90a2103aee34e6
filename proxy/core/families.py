"""Provider families (SPEC §11): the rules one family of upstreams holds, as data.

The rules of §11 that every upstream holds live in `proxy.core.request_repair`. Some hold for
one family only: DeepSeek and Moonshot refuse a tool-call turn that lost its reasoning, GLM
and MiniMax refuse an empty string beside tool calls, Ollama refuses `null` there, Gemini's
and Moonshot's validators accept only their own subset of JSON Schema, DeepSeek knows no
`developer` role. A route's `upstream_profile` names its family (`auto`: from the upstream's
host name, else from the request's model name, as `dialect: auto` is decided); each
`Family` below says which of those rules it brings, and the surfaces' request walks apply
them in their own shape (`proxy.chat.families`, `proxy.anthropic.client_blocks`, the
schemas in `proxy.core.schemas`). docs/contract.md §11 cites each provider's own refusal.

Everything here is a pure function of the route's setting and the request: no state.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from proxy.core.rounds import RouteRules

# Every value of `upstream_profile` (the config's Literal mirrors it).
PROFILES: tuple[str, ...] = (
    "auto",
    "generic",
    "openai",
    "anthropic",
    "deepseek",
    "moonshot",
    "zhipu",
    "minimax",
    "qwen",
    "gemini",
    "mistral",
    "vllm",
    "ollama",
    "llamacpp",
)

# What a `tool_calls` assistant message's empty content becomes (`Family.tool_turn_content`).
KEEP = 0  # as the client sent it
NULL = 1  # "" -> null: the family refuses the empty string beside tool calls
EMPTY = 2  # null -> "": the family refuses null content


@dataclass(frozen=True, slots=True)
class Family:
    """One family's rules on top of every upstream's (SPEC §11)."""

    name: str
    # Thinking models: every tool-call turn of a request that offers tools carries
    # `reasoning_content` (`reasoning_passback`), `reasoning_fill` where the client kept none.
    passback: bool = False
    reasoning_fill: str = ""
    developer_role: bool = False  # the family knows the `developer` role (else -> `system`)
    tool_turn_content: int = KEEP  # `content`: a tool-call turn's empty content
    empty_result: str | None = None  # `content`: a `tool` message's empty content becomes this
    schema: str = ""  # the JSON Schema flavor its validator accepts (`proxy.core.schemas`)
    client_blocks: bool = False  # Anthropic-compatible, not Anthropic: client-only blocks -> text

    def rules(self, passback: bool = False) -> tuple[str, ...]:
        """The kinds of repair this family adds to every upstream's (start-up line, doctor)."""
        out: list[str] = []
        if self.passback or passback:
            out.append("reasoning_passback")
        if not self.developer_role:
            out.append("role")
        if self.tool_turn_content != KEEP or self.empty_result is not None:
            out.append("content")
        if self.schema:
            out.append("tool_schema")
        if self.client_blocks:
            out.append("client_only_block")
        return tuple(out)


FAMILIES: dict[str, Family] = {
    family.name: family
    for family in (
        Family("generic", developer_role=True),
        Family("openai", developer_role=True, schema="openai"),
        Family("anthropic"),
        # DeepSeek V4 refuses an empty reasoning_content (docs/contract.md §11): one space.
        Family(
            "deepseek",
            passback=True,
            reasoning_fill=" ",
            tool_turn_content=EMPTY,
            client_blocks=True,
        ),
        Family("moonshot", passback=True, schema="moonshot", client_blocks=True),
        Family("zhipu", tool_turn_content=NULL, empty_result=" ", client_blocks=True),
        Family(
            "minimax",
            tool_turn_content=NULL,
            empty_result=" ",
            schema="minimax",
            client_blocks=True,
        ),
        Family("qwen"),
        Family("gemini", schema="gemini"),
        Family("mistral"),
        Family("vllm", client_blocks=True),
        Family("ollama", tool_turn_content=EMPTY, client_blocks=True),
        Family("llamacpp"),
    )
}
GENERIC = FAMILIES["generic"]

# Host names (the name itself or any name under it) -> family.
_HOSTS: tuple[tuple[str, str], ...] = (
    ("api.deepseek.com", "deepseek"),
    ("api.moonshot.ai", "moonshot"),
    ("api.moonshot.cn", "moonshot"),
    ("api.kimi.com", "moonshot"),
    ("open.bigmodel.cn", "zhipu"),
    ("api.z.ai", "zhipu"),
    ("api.minimax.io", "minimax"),
    ("api.minimax.chat", "minimax"),
    ("api.minimaxi.com", "minimax"),
    ("api.minimaxi.chat", "minimax"),
    ("dashscope.aliyuncs.com", "qwen"),
    ("dashscope-intl.aliyuncs.com", "qwen"),
    ("generativelanguage.googleapis.com", "gemini"),
    ("api.mistral.ai", "mistral"),
    ("codestral.mistral.ai", "mistral"),
    ("api.openai.com", "openai"),
    ("api.anthropic.com", "anthropic"),
    ("ollama.com", "ollama"),
)
_PORTS: dict[int, str] = {11434: "ollama"}  # Ollama's own port, on any host

# Model names (lower case, any provider prefix) -> family, first match wins: a distilled
# `DeepSeek-R1-Distill-Qwen` is DeepSeek's, a Kimi served anywhere is Moonshot's.
_MODELS: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(pattern), family)
    for pattern, family in (
        (r"deepseek", "deepseek"),
        (r"kimi|moonshot", "moonshot"),
        (r"glm|zhipu", "zhipu"),
        (r"minimax|abab", "minimax"),
        (r"qwen|qwq", "qwen"),
        (r"gemini", "gemini"),
        (r"mistral|mixtral|codestral|devstral|magistral|ministral|pixtral", "mistral"),
        (r"claude", "anthropic"),
        (r"(^|/)(gpt-|chatgpt|o[1-9](-|$))", "openai"),
    )
)


def family_of_host(upstream: str | None) -> str | None:
    """The family an upstream base URL's host names, or None (a local server, a gateway)."""
    if not upstream:
        return None
    try:
        parts = urlsplit(upstream)
        host = (parts.hostname or "").lower()
        port = parts.port
    except ValueError:
        return None
    for name, family in _HOSTS:
        if host == name or host.endswith("." + name):
            return family
    return _PORTS.get(port) if port is not None else None


def family_of_model(model: object) -> str | None:
    if not isinstance(model, str):
        return None
    name = model.lower()
    for pattern, family in _MODELS:
        if pattern.search(name):
            return family
    return None


def route_profile(setting: str, upstream: str | None) -> str:
    """A route's profile as far as its settings decide it: `auto` becomes the host's family
    where the host names one, and stays `auto` (decided per request) where it does not."""
    if setting != "auto":
        return setting
    return family_of_host(upstream) or "auto"


def resolve_family(profile: str, model: object) -> Family:
    """The family of one request: the route's (`route_profile`), else its model name's."""
    if profile == "auto":
        profile = family_of_model(model) or "generic"
    return FAMILIES.get(profile, GENERIC)


@dataclass(frozen=True, slots=True)
class FamilyRules:
    """What one request's walk applies: its family, and whether reasoning goes back."""

    family: Family
    passback: bool

    @property
    def name(self) -> str:
        return self.family.name


def request_rules(profile: str, passback: bool, model: object) -> FamilyRules:
    """The family rules of one request (`passback`: the route's `reasoning_passback: on`)."""
    family = resolve_family(profile, model)
    return FamilyRules(family, passback or family.passback)


NO_FAMILY_RULES = FamilyRules(GENERIC, False)


def describe_family(profile: str, passback: bool) -> str:
    """A route's provider family and the rules it adds to every upstream's, in words (the
    start-up line, the doctor)."""
    if profile == "auto":
        extra = ", reasoning_passback" if passback else ""
        return f"provider family auto (from each request's model name{extra})"
    rules = FAMILIES.get(profile, GENERIC).rules(passback)
    return f"provider family {profile} ({', '.join(rules) if rules else 'no rules of its own'})"


def request_family(rules: RouteRules, body: Mapping[str, Any]) -> FamilyRules:
    """The family rules a route's request is sent under (SPEC §11)."""
    return request_rules(rules.upstream_profile, rules.reasoning_passback, body.get("model"))


__all__ = [
    "EMPTY",
    "FAMILIES",
    "GENERIC",
    "KEEP",
    "NO_FAMILY_RULES",
    "NULL",
    "PROFILES",
    "Family",
    "FamilyRules",
    "describe_family",
    "family_of_host",
    "family_of_model",
    "request_family",
    "request_rules",
    "resolve_family",
    "route_profile",
]
