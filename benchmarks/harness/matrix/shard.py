"""Split a matrix's cells across machines (`--shard i/n`) and GPUs across processes.

A fleet of identical runners shares one large matrix: runner *i* of *n* runs
`select_shard(cell_ids, i, n)`. Every runner computes the same split from the same cell ids,
so the shards together hold every cell exactly once, with no coordination between machines.

How the split is made, and why: building a model is the slowest untimed step of a cell, so
the cells of one model are kept on one shard whenever that model's cells fit in a fair share
(`ceil(cells / n)`); only a model with more cells than that is cut into contiguous chunks. The
groups (and chunks) are then placed largest first on the least loaded shard (ties to the lowest
index). Everything is sorted first, so the result depends on the *set* of ids, never on their
order or on Python's per-process hash seed.

`gpu_for_worker` maps a worker (a pytest-xdist id such as `gw2`, or a plain number) to one
entry of a GPU list (`PHASEBENCH_GPUS="0,1,2,3"`) for `CUDA_VISIBLE_DEVICES`.

Deliberately not here: reading the environment or pytest options (the root conftest does that
and calls these pure functions), and weighting cells by their expected run time (cell count is
the unit of balance; a shard's wall time still varies with its models' sizes).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

from benchmarks.harness.errors import DeviceError, MatrixError

__all__ = ["gpu_for_worker", "model_of_cell", "parse_gpus", "parse_shard", "select_shard"]

_SHARD = re.compile(r"(\d+)/(\d+)")
# A cell id is "<model>-<device>-<dtype>-b<B>-p<P>-n<N>" (benchmarks/harness/matrix/cells.py builds
# it); model names contain dashes themselves, so the model is what is left of the fixed tail.
_CELL_TAIL = re.compile(r"-[^-]+-(?:float32|float16|bfloat16)-b\d+-p\d+-n\d+")
_WORKER = re.compile(r"(?:gw)?(\d+)")
_GPU = re.compile(r"\d+|(?:GPU|MIG)-[0-9A-Za-z-]+")


def parse_shard(text: str) -> tuple[int, int]:
    """Parse `"i/n"` (1-based shard *i* of *n*) into `(i, n)`.

    Raises `MatrixError` naming the bad value and the accepted form, for anything but two
    positive integers with `1 <= i <= n`.
    """
    match = _SHARD.fullmatch(text.strip())
    if match is None:
        raise MatrixError(
            f"--shard {text!r}: expected INDEX/COUNT with whole numbers, e.g. --shard 1/4 "
            "for the first of four shards"
        )
    index, count = int(match.group(1)), int(match.group(2))
    _check_shard(index, count, f"--shard {text!r}")
    return index, count


def _check_shard(index: int, count: int, where: str) -> None:
    if count < 1:
        raise MatrixError(f"{where}: the shard count must be at least 1, e.g. --shard 1/1")
    if not 1 <= index <= count:
        raise MatrixError(
            f"{where}: the shard index counts from 1 to the count; use 1/{count} ... "
            f"{count}/{count}"
        )


def model_of_cell(cell_id: str) -> str:
    """The model part of a cell id; the whole id when it does not have the cell id's shape."""
    match = _CELL_TAIL.search(cell_id)
    # The tail is anchored at the end on purpose: a model may contain "-cpu-" itself.
    if match is None or match.end() != len(cell_id) or match.start() == 0:
        return cell_id
    return cell_id[: match.start()]


def select_shard(cell_ids: Sequence[str], index: int, count: int) -> list[str]:
    """The cell ids that shard `index` (1-based) of `count` runs, in their input order.

    Duplicated ids count once (several test modules run the same cell; a cell is one unit of
    work). Across `index = 1..count` every distinct id appears in exactly one shard; a shard may
    be empty when there are fewer cells than shards. Raises `MatrixError` on a bad index/count.
    """
    _check_shard(index, count, f"shard {index}/{count}")
    unique = sorted(set(cell_ids))
    if not unique:
        return []
    fair_share = math.ceil(len(unique) / count)

    groups: dict[str, list[str]] = {}
    for cell_id in unique:
        groups.setdefault(model_of_cell(cell_id), []).append(cell_id)
    chunks: list[tuple[str, list[str]]] = []
    for model in sorted(groups):
        ids = groups[model]  # sorted, since `unique` is
        for start in range(0, len(ids), fair_share):
            chunks.append((f"{model}#{start}", ids[start : start + fair_share]))

    # Largest first onto the least loaded shard: the classic greedy that keeps the largest
    # shard within a chunk of the mean; the name breaks ties so the result is deterministic.
    chunks.sort(key=lambda chunk: (-len(chunk[1]), chunk[0]))
    loads = [0] * count
    mine: set[str] = set()
    for _, ids in chunks:
        target = min(range(count), key=lambda shard: (loads[shard], shard))
        loads[target] += len(ids)
        if target == index - 1:
            mine.update(ids)

    # dict.fromkeys keeps the first occurrence of each id, in input order.
    return [cell_id for cell_id in dict.fromkeys(cell_ids) if cell_id in mine]


def parse_gpus(text: str) -> tuple[str, ...]:
    """Parse a comma-separated GPU list (`"0,1,2,3"`, or `GPU-`/`MIG-` UUIDs); `""` is none.

    Raises `DeviceError` on an entry that is neither an index nor a UUID, or on a repeat.
    """
    gpus = tuple(part.strip() for part in text.split(",") if part.strip())
    for gpu in gpus:
        if _GPU.fullmatch(gpu) is None:
            raise DeviceError(
                f"PHASEBENCH_GPUS={text!r}: {gpu!r} is neither a GPU index nor a GPU-/MIG- "
                "UUID; list them as CUDA_VISIBLE_DEVICES does, e.g. PHASEBENCH_GPUS=0,1,2,3"
            )
    if len(set(gpus)) != len(gpus):
        raise DeviceError(
            f"PHASEBENCH_GPUS={text!r} names a GPU twice; two workers on one GPU would skew "
            "each other's timings, so list each GPU once"
        )
    return gpus


def gpu_for_worker(worker_id: str | None, gpus: Sequence[str]) -> str | None:
    """The `CUDA_VISIBLE_DEVICES` value for one worker, or None to leave it alone.

    `worker_id` is a pytest-xdist id (`"gw0"`, `"gw1"`, ...), a plain number, or None / `""` /
    `"master"` outside a worker pool. With no GPU list, or outside a pool, the answer is None.
    Worker *k* gets `gpus[k]`: one worker per GPU, never two on one (that would skew both
    timings), so a worker beyond the list raises `DeviceError` saying how many workers to start.
    """
    if not gpus or worker_id in (None, "", "master"):
        return None
    match = _WORKER.fullmatch(worker_id)
    if match is None:
        raise DeviceError(
            f"worker id {worker_id!r} is neither a pytest-xdist id (gw0, gw1, ...) nor a number"
        )
    worker = int(match.group(1))
    if worker >= len(gpus):
        raise DeviceError(
            f"worker {worker_id} has no GPU of its own: PHASEBENCH_GPUS lists {len(gpus)} "
            f"({','.join(gpus)}); start at most {len(gpus)} workers (-n {len(gpus)})"
        )
    return gpus[worker]
