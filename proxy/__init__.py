"""toolcall-proxy: an OpenAI-compatible proxy that makes tool calls safe with any model."""

__version__ = "0.1.0"
