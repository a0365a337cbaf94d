"""History: pytest-benchmark JSON files -> runs -> what is compared with what.

Owns `runfile` (one file: its benchmarks, machine, stack, shard; schema checks), `rounds` (a
record's per-round values, or the statistic it names in their place), `load` (a
folder of files -> runs grouped by machine, unreadable files named and skipped), `selection`
(current run and baseline per machine: merge-base, re-runs, shards, planned cells) and `scale`
(a synthetic history for `bench-scale`).

May import: reports.errors.
"""
