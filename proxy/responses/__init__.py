"""The OpenAI Responses surface (SPEC §8): a sans-IO core like `proxy.chat`'s, over the same
shared decisions (ledger, ids, guard, text calls), in Responses' own items and events."""
