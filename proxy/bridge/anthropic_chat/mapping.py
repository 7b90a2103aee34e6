"""What a Chat answer's stop signal and usage are in Anthropic's words (SPEC §9)."""

from __future__ import annotations

_STOP_REASONS = {
    "tool_calls": "tool_use",
    "function_call": "tool_use",  # the legacy form of the same
    "stop": "end_turn",
    "length": "max_tokens",
    "content_filter": "refusal",
}


def stop_reason(finish_reason: object, delivered_tools: bool) -> str:
    """Chat's `finish_reason` as Anthropic's `stop_reason`. The Chat exchange already made it
    truthful (SPEC §4); an unknown or missing one reads as the end of the turn, or `tool_use`
    when calls were delivered (SPEC §8)."""
    mapped = _STOP_REASONS.get(finish_reason) if isinstance(finish_reason, str) else None
    if mapped is None:
        return "tool_use" if delivered_tools else "end_turn"
    return mapped


def _count(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def anthropic_usage(usage: object) -> dict[str, int]:
    """Chat usage -> Anthropic usage. Anthropic's `input_tokens` excludes the tokens read from
    the cache (its total input is input + cache_creation + cache_read, which is how Claude
    Code sizes its context), while Chat's `prompt_tokens` includes them: the cached tokens
    (`prompt_tokens_details.cached_tokens`, or DeepSeek's `prompt_cache_hit_tokens`) move
    to `cache_read_input_tokens`."""
    if not isinstance(usage, dict):
        usage = {}  # an upstream that reported none (it ignored stream_options)
    # Chat has no word for tokens written to a cache: cache_creation_input_tokens stays 0.
    details = usage.get("prompt_tokens_details")
    cached = _count(details.get("cached_tokens")) if isinstance(details, dict) else 0
    cached = cached or _count(usage.get("prompt_cache_hit_tokens"))
    prompt = _count(usage.get("prompt_tokens"))
    cached = min(cached, prompt)
    return {
        "input_tokens": prompt - cached,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": cached,
        "output_tokens": _count(usage.get("completion_tokens")),
    }
