"""Bridges (SPEC §9): a client's API served over an upstream that speaks another.

A bridge pairs two codecs at the grammar-neutral core: the client surface's grammar on one
side (its request mapped to the upstream's, the upstream's answer rendered back), and the
upstream surface's exchange on the other, which keeps every guarantee of SPEC §2-§5 (ids,
dialects, replays, the breaker, leaked calls, the repeat guard). `proxy.bridge.codecs` is the
table a route's `upstream_api` picks from; each pairing lives in its own package
(`responses_chat`: Responses clients over Chat Completions; `anthropic_chat`: Anthropic
Messages clients over Chat Completions).
"""
