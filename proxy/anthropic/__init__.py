"""Anthropic Messages (`POST {base}/messages`, SPEC §8): the surface's sans-IO core.

The grammar-neutral decisions (ids, replays, the breaker, leaked text calls) are the shared
ones in `proxy.core`; this package is what is Anthropic's own: the request's content blocks
(`request.py`), the event grammar of a stream (`stream.py`, `blocks.py`), a whole message
(`message.py`), the follow-up round's messages (`followup.py`), the error shape (`wire.py`)
and the exchange that runs the rounds (`exchange.py`).
"""
