"""`toolcall-proxy doctor`: what a provider does wrong with tool calls, before anything is wired.

A short scripted tool-calling conversation with the real provider (parallel calls, several
turns, streaming and not), a minimal probe of every other API surface, then a report in the
words of the project's quirk list and the route settings that fit. Modules:

- `session`: the HTTP client side, bounded in requests and time, raw bytes kept.
- `script`: the conversation itself (tools, prompts, canned tool results).
- `views`: raw responses parsed into what the provider sent, call by call.
- `core`: the proxy's own core run offline on each response (to continue the conversation
  as a client would, and for the proxy's own account of what it would repair).
- `quirks` and `observers`: each quirk, and the code that spots it in the raw responses.
- `probes`: one probe per API surface (proxy.core.surfaces); `report`: text and JSON.
"""
