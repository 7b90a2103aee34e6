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

`python -m bench.capacity` (also in `make bench`) measures how many concurrent, paced agent
streams one proxy process carries: `paced_upstream` serves the three APIs at a model's pace
with stamped deltas (`paced_wire`), `capacity_load` opens the streams from its own process,
`capacity_stats` turns the stamps into added delay and the capacity, `proctree` reads CPU and
RSS. `anthropic_core`, `responses_core` and `bridge_core` count instructions per stream in the
sans-IO cores under callgrind.
"""
