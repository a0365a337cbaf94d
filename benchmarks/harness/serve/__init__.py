"""Serving under load (DESIGN §13): a real OpenAI-compatible server, a load generator, metrics.

Owns `arrivals` (when each request of a pass is due: Poisson or gamma with a burstiness, seeded,
its span exactly (n - 1) / rate), `workload` (each request's prompt and N: fixed, ranged, a shared
prefix, a dataset file), `capacity` (the pure search for the highest rate that meets the SLOs),
`export` (every request of a cell as JSON Lines beside the history), `models` (`GET /v1/models`),
`sse` (server-sent events out of a byte stream, joined or split across reads), `metrics` (what
one request recorded and the pure `calculate_metrics` over those records: TTFT, ITL per token and
per chunk, TPOT, E2EL, throughputs, goodput), `client` (the asyncio load generator: one request
function that only records, arrivals generated apart from sending), `modeldir` (a random-weight
model folder with a word-level tokenizer and no EOS, written once and cached), `launcher` (a
server started in its own process group, ready on `GET /v1/models`, always stopped), `guard`
(the process that ends the server's group when its parent dies), `tserve` (`transformers serve`
with the server-side slowdown knob) and `fake` (an OpenAI-compatible server with scripted token
times: the tests' and the client-overhead measurement's server). docs/serving.md.

The harness never imports pytest: `benchmarks/suite/serve.py` wires these into the suite.

May import: benchmarks.harness.errors, benchmarks.harness.records, benchmarks.harness.device,
benchmarks.harness.model, benchmarks.harness.matrix.dataset, torch, transformers, tokenizers,
aiohttp, psutil.
"""
