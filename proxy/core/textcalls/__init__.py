"""Tool calls leaked into the text: recover them as real tool calls (sans-IO).

When a server's tool parser is off or fails, the model's call arrives inside `content` as
raw markup. `TextCallScanner` is fed one choice's content fragments and hands back text and
recovered calls:
- text flows as it arrives, except from the first character that could start a marker until
  it is resolved: released as text if it is not a call, kept until the block is complete if
  it may be;
- a block becomes calls only if it is complete, names only offered tools, and its format's
  reader reads all of it (never a call with arguments other than those written); otherwise
  it is released exactly as it came. Nothing is ever dropped.

Two stages: whole.py decides the forms without a marker (the entire content is a JSON call,
calls separated by `;`, a pythonic call list, Phi-4-mini's `functools[...]`, xLAM's fenced
block), markers.py every format that starts with a marker, listed in formats.py: Kimi,
Hermes/Qwen, Qwen3-coder, Functionary v3.1 (Llama 3.1's custom format), Seed-OSS, GLM-4.5+,
DeepSeek V3/V3.1 and V3.2 (DSML), MiniMax-M2 and M1, Llama 3 and 4, Mistral (before and from
v11), LM Studio, gpt-oss (harmony), xLAM, Granite, InternLM2, Jamba/Hunyuan/Apriel, Nemotron,
LFM2, Apertus, Cohere Command, OLMo 3, FunctionGemma, LongCat. Both are linear in the
content, however it is split (markers.py says how).
"""

from __future__ import annotations

from proxy.core.textcalls.markers import MAX_BLOCK_CHARS
from proxy.core.textcalls.model import RecoveredCall, Segment
from proxy.core.textcalls.scanner import TextCallScanner

__all__ = ["MAX_BLOCK_CHARS", "RecoveredCall", "Segment", "TextCallScanner"]
