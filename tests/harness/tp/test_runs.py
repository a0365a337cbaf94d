"""Real 2-rank gloo runs through `launch.run_tp`: torchrun, a saved tiny model, per-rank bytes.

* Where the installed transformers loads TP (5.x here): a tiny Llama (GQA 4/2, untied) and a
  tiny Qwen2 (GQA 4/2, tied embeddings, q/k/v biases) pass every KV and weight-byte assertion
  on both ranks, each rank holding half the tp-1 KV, and the round times are the max over ranks;
  a tiny DeepSeek-V3 (MLA, MoE) holds the whole latent, the tp-1 KV, on each rank.
* Where it does not (4.46): the run ends with the too-old reason on both ranks.
* A rank SIGKILLed mid-run and a rank that hangs end the run with that rank's reason within the
  timeout, and no process of the run is left (psutil over every process, not only the tree);
  nor when the launcher itself is interrupted.
* On a host whose torch reports an accelerator (a CUDA build: simulated by
  `fake_accelerator/sitecustomize.py`, which makes every process of the run report `cuda` where
  transformers and torch look), the CPU ranks still run on the CPU with no GPU visible.

On an MPS host every test here is skipped with `cpuranks.mac_host_reason` (as the suite skips
CPU tp cells there).

One thread per rank (`threads=1`), so the runs take the same few seconds on any machine.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import psutil
import pytest
import torch
import transformers
import yaml
from packaging.version import Version

from benchmarks.harness.cache.kv import analytic_kv
from benchmarks.harness.model.models import ModelSpec, build_model
from benchmarks.harness.tp import launch
from benchmarks.harness.tp.bytes import MLA_LATENT_SINCE
from benchmarks.harness.tp.cpuranks import mac_host_reason
from benchmarks.harness.tp.launch import (
    CACHE_ENV,
    GRACE_S,
    LaunchResult,
    SavedModel,
    WorkerOptions,
    run_tp,
    save_random_model,
)
from benchmarks.harness.tp.skips import too_old_reason, tp_loading

ROOT = Path(__file__).resolve().parents[3]
PROMPT, NEW, ROUNDS = 8, 4, 2
OPTIONS = WorkerOptions(prompt_len=PROMPT, new_tokens=NEW, rounds=ROUNDS, warmup=1, threads=1)
TIMEOUT_S = 120.0  # a healthy run takes ~10 s on 2 cores; the failure tests use less
LOADS_TP = tp_loading() is not None
FAKE_ACCELERATOR = Path(__file__).parent / "fake_accelerator"
_MAC = mac_host_reason(torch.backends.mps.is_available(), 2)
pytestmark = pytest.mark.skipif(_MAC is not None, reason=_MAC or "")


# DeepSeek-V3 with MLA (tests/kv_configs.py's shape): from 5.15 the cache holds the compressed
# latent, which the plan leaves whole on every rank, so each rank holds the tp-1 KV.
DEEPSEEK_V3 = {
    "model_type": "deepseek_v3", "num_hidden_layers": 3, "hidden_size": 64,
    "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 4,
    "vocab_size": 128, "max_position_embeddings": 512, "moe_intermediate_size": 32,
    "n_routed_experts": 4, "num_experts_per_tok": 2, "n_shared_experts": 1,
    "first_k_dense_replace": 1, "n_group": 1, "topk_group": 1, "kv_lora_rank": 32,
    "q_lora_rank": 48, "qk_rope_head_dim": 8, "qk_nope_head_dim": 16, "v_head_dim": 20,
}  # fmt: skip
MLA_LATENT = Version(transformers.__version__) >= MLA_LATENT_SINCE


def _spec(name: str) -> ModelSpec:
    if name == "tiny-deepseek-v3":
        data = {"schema": 1, "name": name, "source": "config", "config": DEEPSEEK_V3}
        return ModelSpec.from_mapping(data)
    path = ROOT / "matrix" / "models" / f"{name}.yaml"
    return ModelSpec.from_mapping(yaml.safe_load(path.read_text(encoding="utf-8")), path=path)


@pytest.fixture(scope="module")
def model_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("tp-models")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(CACHE_ENV, str(root))  # nothing goes to the home cache
        yield root


@pytest.fixture(scope="module")
def tiny_llama(model_cache: Path) -> SavedModel:
    saved = save_random_model(_spec("tiny-llama"), torch.float32)
    assert saved.path.parent == model_cache
    return saved


def _left_behind(out: Path) -> list[str]:
    """Every live process whose command line names this run's folder (any parent)."""
    found = []
    for process in psutil.process_iter(["cmdline", "status"]):
        info: dict[str, Any] = process.info
        if info["status"] == psutil.STATUS_ZOMBIE:
            continue
        if any(str(out) in part for part in info["cmdline"] or []):
            found.append(f"{process.pid}: {' '.join(info['cmdline'])}")
    return found


def _assert_nothing_left(run: LaunchResult, out: Path) -> None:
    assert run.survivors == ()
    assert len(run.pids) >= 3  # torchrun and both ranks were seen, so all were ended
    assert _left_behind(out) == []


@pytest.mark.skipif(not LOADS_TP, reason=too_old_reason())
@pytest.mark.parametrize(
    ("name", "kv_split"),
    [
        ("tiny-llama", 2),
        ("tiny-qwen2", 2),
        pytest.param(
            "tiny-deepseek-v3",
            1,
            marks=pytest.mark.skipif(not MLA_LATENT, reason="MLA latent cache from 5.15 only"),
        ),
    ],
)
def test_two_gloo_ranks_pass_every_byte_rule(
    name: str, kv_split: int, model_cache: Path, tmp_path: Path
) -> None:
    spec = _spec(name)
    saved = save_random_model(spec, torch.float32)
    out = tmp_path / "run"
    run = run_tp(saved.path, out, nproc=2, options=OPTIONS, timeout_s=TIMEOUT_S)
    assert run.reason is None, run.reason + "\n" + run.log_tail
    assert run.ok
    assert run.returncode == 0
    assert not run.timed_out
    assert run.wall_s < 60
    _assert_nothing_left(run, out)
    result, ranks = run.result, run.ranks
    assert result is not None
    assert all(r is not None for r in ranks)
    assert (result["tp_size"], result["backend"], result["ok"]) == (2, "gloo", True)
    assert result["same_tokens"]

    # KV: each rank holds the tp-1 figure / kv_split, after the prefill and after every step.
    config = spec.hf_config()
    tp1 = [
        analytic_kv(config, dtype=torch.float32, batch=1, seq_len=PROMPT + step).total_bytes
        for step in range(NEW)
    ]
    assert result["kv_tp1_after_prefill_bytes"] == tp1[0]
    assert result["kv_per_rank_after_prefill_bytes"] == [tp1[0] // kv_split] * 2
    assert result["kv_per_rank_final_bytes"] == [tp1[-1] // kv_split] * 2
    for record in ranks:
        assert record is not None
        assert record["status"] == "ok"
        assert record["kv"]["match"]
        assert record["kv"]["measured_per_step_bytes"] == [b // kv_split for b in tp1[1:]]
        assert record["load_warnings"] == []  # 5.x: `distributed_config`, not the deprecated form

    # Weights: local shards, never the DTensors' global numel.
    dense = sum(
        p.numel() * p.element_size()
        for p in build_model(spec, torch.device("cpu"), torch.float32).parameters()
    )
    weights = [r["weights"] for r in ranks if r is not None]
    assert result["weights_global_bytes"] == dense
    assert result["weights_per_rank_bytes"] == [w["local_bytes"] for w in weights]
    assert weights[0] == weights[1]
    assert sum(w["sharded_local_bytes"] for w in weights) == weights[0]["sharded_global_bytes"]
    assert weights[0]["local_bytes"] < dense
    assert weights[0]["sharded_count"] > 0

    # Timing: every rank saw the same rounds; a round is first start to last end on the one
    # clock the ranks of this host share.
    rank0, rank1 = ranks
    assert rank0 is not None
    assert rank1 is not None
    assert result["round_clock"] == "one_clock"
    for phase in ("prefill", "decode"):
        starts, ends = rank0[f"{phase}_t0_s"], rank0[f"{phase}_t1_s"]
        assert (starts, ends) == (rank1[f"{phase}_t0_s"], rank1[f"{phase}_t1_s"])
        assert len(starts) == ROUNDS
        key = "prefill_s" if phase == "prefill" else "decode_step_s"
        assert result[key] == [max(b) - min(a) for a, b in zip(starts, ends, strict=True)]
        assert result[f"{phase}_start_skew_s"] == [max(a) - min(a) for a in starts]
        for round_starts, round_ends in zip(starts, ends, strict=True):
            assert all(b > a for a, b in zip(round_starts, round_ends, strict=True))

    # Peaks: loading and running apart, labelled; on Linux the run's peak starts after the load.
    for record in (rank0, rank1):
        assert record["load_peak_bytes"] > 0
        assert record["run_peak_bytes"] > 0
    assert result["load_peak_per_rank_bytes"] == [r["load_peak_bytes"] for r in ranks if r]
    assert "end of loading" in result["load_peak_label"]
    assert result["run_peak_label"].startswith("process peak RSS")


@pytest.mark.skipif(not LOADS_TP, reason=too_old_reason())
def test_cpu_ranks_on_a_host_with_an_accelerator_hide_it_and_run_on_the_cpu(
    tiny_llama: SavedModel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A CUDA build reports `cuda` whether or not a GPU is visible, and transformers would bind
    every gloo rank to cuda:LOCAL_RANK (a CPU-only torch then raises): the ranks hide it."""
    path = os.pathsep.join(filter(None, [str(FAKE_ACCELERATOR), os.environ.get("PYTHONPATH")]))
    monkeypatch.setenv("PYTHONPATH", path)
    monkeypatch.setenv("PHASEBENCH_FAKE_ACCELERATOR", "cuda")
    probe = "import torch; print(torch._C._get_accelerator().type)"
    seen = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120
    )
    assert seen.stdout.strip() == "cuda"  # the simulation is live in a new process
    out = tmp_path / "run"
    run = run_tp(tiny_llama.path, out, nproc=2, options=OPTIONS, timeout_s=TIMEOUT_S)
    assert run.ok, run.reason
    for rank in run.ranks:
        assert rank is not None
        assert (rank["device"], rank["backend"]) == ("cpu", "gloo")
        assert rank["hidden_accelerator"] == "cuda"
        assert rank["cuda_visible_devices"] == ""
    _assert_nothing_left(run, out)


@pytest.mark.skipif(LOADS_TP, reason="this transformers loads TP: the runs above cover it")
def test_a_transformers_without_tp_ends_the_run_with_the_reason(
    tiny_llama: SavedModel, tmp_path: Path
) -> None:
    out = tmp_path / "run"
    run = run_tp(tiny_llama.path, out, nproc=2, options=OPTIONS, timeout_s=60)
    assert not run.ok
    assert not run.timed_out
    assert run.reason is not None
    for rank in (0, 1):
        assert f"rank {rank}: TPError: {too_old_reason()} (stage load)" in run.reason
    _assert_nothing_left(run, out)


def test_a_killed_rank_ends_the_run_with_its_reason(tiny_llama: SavedModel, tmp_path: Path) -> None:
    stage = "generate" if LOADS_TP else "init"  # mid-run where the model loads, else early
    options = replace(OPTIONS, fail_rank=1, fail_mode="kill", fail_at=stage)
    out = tmp_path / "run"
    run = run_tp(tiny_llama.path, out, nproc=2, options=options, timeout_s=60)
    assert not run.ok
    assert not run.timed_out
    assert run.wall_s < 60
    assert run.reason is not None
    # torchrun names the killed rank first; its peer's broken collective follows.
    assert run.reason.startswith(f"rank 1: last seen at stage '{stage}'"), run.reason
    assert "rank 1 exit code -9" in run.reason
    _assert_nothing_left(run, out)


def test_a_hung_rank_is_ended_at_the_timeout_with_where_it_hung(
    tiny_llama: SavedModel, tmp_path: Path
) -> None:
    options = replace(OPTIONS, fail_rank=1, fail_mode="hang", fail_at="init")
    out = tmp_path / "run"
    timeout_s = 15.0  # `init` comes in ~2 s, before transformers is imported
    run = run_tp(tiny_llama.path, out, nproc=2, options=options, timeout_s=timeout_s)
    assert run.timed_out
    assert not run.ok
    assert run.wall_s < timeout_s + 2 * GRACE_S + 5
    assert run.reason is not None
    assert run.reason.startswith("timed out after 15 s; the whole group was ended; ")
    # The hung rank is in its own code; its peer waits in the barrier it never reached.
    assert (
        "rank 1: last seen at stage 'init'; ended in __call__ (benchmarks/harness/tp/worker.py:"
    ) in run.reason
    # Its peer's place is a bonus: on a loaded machine (CI, two test workers) its stack dump was
    # once not in by the time the launcher read it; where it is, the peer waits in the barrier.
    assert "rank 0: last seen at stage 'init'" in run.reason
    peer = run.reason.split("rank 0: ", 1)[1].split("; rank 1", 1)[0]
    if "ended in" in peer:
        assert "from barrier (benchmarks/harness/tp/timing.py:" in peer, peer
    _assert_nothing_left(run, out)


def test_an_interrupted_launcher_leaves_no_rank_behind(
    tiny_llama: SavedModel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    polls = 0

    class InterruptingTime:
        """The launcher's `time`, raising KeyboardInterrupt (Ctrl-C) after ~3 s of polling."""

        perf_counter = staticmethod(time.perf_counter)

        @staticmethod
        def sleep(seconds: float) -> None:
            nonlocal polls
            polls += 1
            if polls > 30:
                raise KeyboardInterrupt
            time.sleep(seconds)

    monkeypatch.setattr(launch, "time", InterruptingTime)
    out = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        run_tp(tiny_llama.path, out, nproc=2, options=OPTIONS, timeout_s=TIMEOUT_S)
    assert _left_behind(out) == []
