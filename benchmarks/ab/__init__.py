"""A/B mode (DESIGN §8): two software stacks measured on one machine, their rounds interleaved.

* `order` — the order of one benchmark's paired rounds: strict alternation, random start (pure).
* `turnstile` — the pytest plugin each side loads (`-p benchmarks.ab.turnstile`): every
  timed round of a benchmark waits for its turn, so the two sides' rounds alternate.
* `coordinator` — the other end of the turnstile: a UNIX-socket server that keeps both sides in
  step (`Referee` is its pure state machine).
* `precision` — when a benchmark's pairs are precise enough to stop (the verdict's own
  trimmed estimate, on the coordinator's clock).
* `cpus` — the CPUs both sides are pinned to, so other work on a core hits both alike.
* `memory` — whether both sides' models fit at once (else process-level interleaving).
* `sides` — what a side is: a tree, its Python environment (cached by dependency spec), its
  `matrix/models/` and environment variables; git worktrees for refs.
* `run` — `python -m benchmarks.ab` (`nox -s ab`): builds both sides, runs them, and
  hands the two pytest-benchmark JSON files to `python -m reports.ab` for the paired verdicts.

The verdicts are not here (`reports.ab` judges the two JSON files in a subprocess; see
`reports/analysis/paired.py`); `precision` calls that module's estimator rather than copy it.

May import: benchmarks.harness, reports.analysis, torch, psutil, yaml, pytest.
"""
