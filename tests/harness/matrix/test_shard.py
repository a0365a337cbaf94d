"""Spec of `--shard i/n` selection and the GPU-per-worker mapping
(benchmarks/harness/matrix/shard.py)."""

from __future__ import annotations

import itertools
import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.harness.errors import DeviceError, MatrixError
from benchmarks.harness.matrix.shard import (
    gpu_for_worker,
    model_of_cell,
    parse_gpus,
    parse_shard,
    select_shard,
)

ROOT = Path(__file__).resolve().parents[3]
MODELS = ["qwen2.5-0.5b", "llama-3.2-1b", "tiny-gpt2", "phi-cpu-mini"]


def cell_ids(models=MODELS, batches=(1, 4), prompts=(128, 512), dtypes=("float32", "bfloat16")):
    return [
        f"{m}-cuda-{d}-b{b}-p{p}-n32"
        for m, d, b, p in itertools.product(models, dtypes, batches, prompts)
    ]


@pytest.mark.parametrize("text", ["1/1", "1/4", "4/4", " 2/3 ", "10/12"])
def test_parse_shard_accepts_index_over_count(text):
    index, count = parse_shard(text)
    assert 1 <= index <= count
    assert f"{index}/{count}" == text.strip()


@pytest.mark.parametrize(
    ("text", "hint"),
    [
        ("0/4", "counts from 1"),
        ("5/4", "counts from 1"),
        ("1/0", "at least 1"),
        ("1", "INDEX/COUNT"),
        ("a/b", "INDEX/COUNT"),
        ("-1/4", "INDEX/COUNT"),
        ("1/4/2", "INDEX/COUNT"),
        ("", "INDEX/COUNT"),
    ],
)
def test_parse_shard_rejects_bad_input_with_the_fix(text, hint):
    with pytest.raises(MatrixError, match="--shard") as info:
        parse_shard(text)
    assert hint in str(info.value)


@pytest.mark.parametrize("count", [1, 2, 3, 4, 5, 7, 16, 40])
def test_every_cell_lands_in_exactly_one_shard(count):
    ids = cell_ids()
    shards = [select_shard(ids, i, count) for i in range(1, count + 1)]
    flat = [cell for shard in shards for cell in shard]
    assert sorted(flat) == sorted(ids)
    assert len(flat) == len(set(flat))


def test_the_split_is_the_same_whatever_the_order_of_the_ids():
    ids = cell_ids()
    shuffled = ids[:]
    random.Random(7).shuffle(shuffled)
    for i in range(1, 4):
        assert set(select_shard(ids, i, 3)) == set(select_shard(shuffled, i, 3))


def test_the_split_is_the_same_in_another_process_with_another_hash_seed():
    """Two runners must agree; str hashing is randomised per process, so it must not matter."""
    ids = cell_ids()
    code = (
        "import json,sys; from benchmarks.harness.matrix.shard import select_shard; "
        "ids=json.loads(sys.argv[1]); print(json.dumps([select_shard(ids,i,3) for i in (1,2,3)]))"
    )

    outs = {
        subprocess.run(
            [sys.executable, "-c", code, json.dumps(ids)],
            check=True,
            capture_output=True,
            text=True,
            env={"PYTHONHASHSEED": seed, "PYTHONPATH": str(ROOT)},
        ).stdout
        for seed in ("1", "2")
    }
    assert len(outs) == 1
    assert json.loads(outs.pop()) == [select_shard(ids, i, 3) for i in (1, 2, 3)]


def test_a_shard_keeps_its_ids_in_input_order_and_counts_duplicates_once():
    ids = cell_ids()
    doubled = ids + ids[::-1]
    selected = select_shard(doubled, 1, 2)
    assert len(selected) == len(set(selected))
    assert selected == [cell for cell in ids if cell in set(selected)]


def test_a_models_cells_stay_together_when_they_fit_a_shard():
    ids = cell_ids()  # 4 models x 8 cells, 4 shards: one model per shard
    for i in range(1, 5):
        models = {model_of_cell(cell) for cell in select_shard(ids, i, 4)}
        assert len(models) == 1
    # 2 shards: two whole models each
    for i in (1, 2):
        shard = select_shard(ids, i, 2)
        assert len(shard) == 16
        assert len({model_of_cell(cell) for cell in shard}) == 2


def test_a_model_larger_than_a_fair_share_is_split_and_the_shards_stay_balanced():
    ids = cell_ids(models=["only-model"])  # 8 cells of one model
    sizes = [len(select_shard(ids, i, 4)) for i in range(1, 5)]
    assert sizes == [2, 2, 2, 2]


def test_no_shard_holds_more_than_twice_its_fair_share():
    ids = cell_ids(models=[*MODELS, "odd-one"], batches=(1, 2, 4))
    for count in (2, 3, 4, 6):
        sizes = [len(select_shard(ids, i, count)) for i in range(1, count + 1)]
        fair = -(-len(ids) // count)
        assert max(sizes) <= 2 * fair
        assert sum(sizes) == len(ids)


def test_more_shards_than_cells_leaves_some_shards_empty():
    ids = cell_ids(models=["m"], batches=(1,), prompts=(8,), dtypes=("float32",))
    shards = [select_shard(ids, i, 3) for i in (1, 2, 3)]
    assert sorted(len(s) for s in shards) == [0, 0, 1]
    assert select_shard([], 1, 3) == []


@pytest.mark.parametrize(("index", "count"), [(0, 2), (3, 2), (1, 0)])
def test_select_shard_rejects_a_bad_index_or_count(index, count):
    with pytest.raises(MatrixError, match="shard"):
        select_shard(cell_ids(), index, count)


@pytest.mark.parametrize(
    ("cell", "model"),
    [
        ("qwen2.5-0.5b-cpu-bfloat16-b1-p512-n32", "qwen2.5-0.5b"),
        ("phi-cpu-mini-cuda-float16-b8-p128-n64", "phi-cpu-mini"),
        ("llama-mps-float32-b1-p1-n1", "llama"),
        ("not-a-cell-id", "not-a-cell-id"),
        ("cpu-float32-b1-p1-n1", "cpu-float32-b1-p1-n1"),
    ],
)
def test_model_of_cell_reads_the_model_left_of_the_fixed_tail(cell, model):
    assert model_of_cell(cell) == model


def test_parse_gpus_reads_a_cuda_visible_devices_style_list():
    assert parse_gpus("0,1, 2,3") == ("0", "1", "2", "3")
    assert parse_gpus("") == ()
    assert parse_gpus("GPU-8f4c-12ab,MIG-1a2b") == ("GPU-8f4c-12ab", "MIG-1a2b")


@pytest.mark.parametrize("text", ["0,0", "cuda:0", "0;1"])
def test_parse_gpus_rejects_repeats_and_non_gpus(text):
    with pytest.raises(DeviceError, match="PHASEBENCH_GPUS"):
        parse_gpus(text)


def test_each_xdist_worker_gets_its_own_gpu():
    gpus = ("0", "1", "2", "3")
    assert [gpu_for_worker(f"gw{k}", gpus) for k in range(4)] == ["0", "1", "2", "3"]
    assert gpu_for_worker("2", gpus) == "2"


@pytest.mark.parametrize("worker", [None, "", "master"])
def test_outside_a_worker_pool_the_gpu_is_left_alone(worker):
    assert gpu_for_worker(worker, ("0", "1")) is None


def test_without_a_gpu_list_the_gpu_is_left_alone():
    assert gpu_for_worker("gw3", ()) is None


def test_a_worker_beyond_the_gpu_list_is_refused_with_the_worker_count_to_use():
    with pytest.raises(DeviceError, match=r"-n 2"):
        gpu_for_worker("gw2", ("0", "1"))
    with pytest.raises(DeviceError, match="xdist"):
        gpu_for_worker("worker-a", ("0", "1"))
