"""The proxy's benchmark: `make bench` or `python -m bench`.

One run measures the proxy against the same upstream reached directly, interleaved so that
machine noise lands on both sides alike, and reports what the proxy adds:

- `upstream`: a canned upstream in its own process (asyncio + httptools), so the upstream is
  never what is being measured;
- `client`: a blocking one-connection client that timestamps every read (latency, time to
  first and last byte, per-chunk forwarding delay); `interleaved` runs the one-connection
  phases with it, direct then proxied, request by request;
- `load`: requests per second under `wrk` (or an asyncio client when wrk is missing);
- `streams`: peak RSS of a proxy holding many open streams;
- `core`: CPU time per chunk of the sans-IO stream core alone;
- `reference`: the same measurements for the proxy over other upstream transports
  (`variant` serves it so), for the uvicorn floor (`floor`: an app that answers itself) and
  for nginx when it is installed;
- `procs` starts and stops the processes, `report` prints the table and writes the JSON.
"""
