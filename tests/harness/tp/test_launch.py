"""The launcher's pure parts: the saved-model cache, the worker's command line, the files the
ranks write, and the one-line failure reason built from the ranks' records and torchrun's log.

The real runs (torchrun, killed and hung ranks) are in test_runs.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import transformers

from benchmarks.harness.model.models import ModelSpec
from benchmarks.harness.tp.bytes import TPError
from benchmarks.harness.tp.files import read_json, stack_frames, write_json
from benchmarks.harness.tp.launch import (
    CACHE_ENV,
    MARKER,
    WorkerOptions,
    failure_reason,
    model_cache_root,
    save_random_model,
    saved_model_key,
    torchrun_command,
)
from benchmarks.harness.tp.worker import parse_args

CONFIG = {
    "model_type": "llama",
    "num_hidden_layers": 1,
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 64,
    "max_position_embeddings": 64,
}


def _spec(**overrides: object) -> ModelSpec:
    return ModelSpec.from_mapping(
        {
            "schema": 1,
            "name": "tp-tiny",
            "source": "config",
            "config": {**CONFIG, **overrides},
        }
    )


def test_the_cache_root_follows_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "explicit"))
    assert model_cache_root() == tmp_path / "explicit"
    monkeypatch.delenv(CACHE_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert model_cache_root() == tmp_path / "xdg" / "phasebench" / "tp-models"


def test_a_saved_model_is_reused_never_rewritten(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    first = save_random_model(_spec(), torch.float32)
    assert first.path.parent == tmp_path / "cache"
    assert not first.reused
    assert first.save_s > 0
    assert (first.path / MARKER).is_file()
    assert (first.path / "config.json").is_file()
    weights = sorted(first.path.glob("*.safetensors"))
    assert first.bytes == sum(p.stat().st_size for p in weights) > 0
    stamps = {p: p.stat().st_mtime_ns for p in first.path.iterdir()}
    again = save_random_model(_spec(), torch.float32)
    assert again.path == first.path
    assert again.reused
    assert again.save_s == 0.0
    assert {p: p.stat().st_mtime_ns for p in first.path.iterdir()} == stamps
    # No temporary folder is left beside the saved one.
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [first.path.name]


def test_the_key_separates_dtype_seed_config_and_transformers() -> None:
    key = saved_model_key(_spec(), torch.float32, 0)
    assert key.startswith("tp-tiny-float32-seed0-")
    assert saved_model_key(_spec(), torch.bfloat16, 0) != key
    assert saved_model_key(_spec(), torch.float32, 1) != key
    assert saved_model_key(_spec(hidden_size=64), torch.float32, 0) != key
    assert transformers.__version__  # part of the digest: a newer transformers saves anew


def test_a_checkpoint_that_is_not_a_local_folder_is_refused(tmp_path: Path) -> None:
    spec = ModelSpec.from_mapping(
        {"schema": 1, "name": "ckpt", "source": "checkpoint", "checkpoint": "org/some-model"}
    )
    with pytest.raises(TPError, match="tensor parallel loads a local checkpoint folder"):
        save_random_model(spec, torch.float32, root=tmp_path)


def test_the_worker_reads_back_the_options_the_launcher_writes(tmp_path: Path) -> None:
    options = WorkerOptions(
        prompt_len=8, new_tokens=4, rounds=2, warmup=0, threads=1, fail_rank=1, fail_mode="hang"
    )
    command = torchrun_command(2, tmp_path / "m", tmp_path / "o", options, "python")
    assert command[:6] == [
        "python",
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        "2",
    ]
    args = parse_args(command[command.index("benchmarks.harness.tp.worker") + 1 :])
    assert (args.model_dir, args.out) == (tmp_path / "m", tmp_path / "o")
    assert (args.prompt_len, args.new_tokens, args.rounds, args.warmup) == (8, 4, 2, 0)
    assert (args.threads, args.fail_rank, args.fail_mode, args.fail_at) == (1, 1, "hang", "init")
    plain = parse_args(WorkerOptions(prompt_len=8, new_tokens=4).argv(tmp_path, tmp_path))
    assert (plain.threads, plain.fail_rank) == (None, None)


def test_rank_files_are_written_whole(tmp_path: Path) -> None:
    path = tmp_path / "rank0.json"
    write_json(path, {"stage": "load"})
    write_json(path, {"stage": "decode"})
    assert read_json(path) == {"stage": "decode"}
    assert [p.name for p in tmp_path.iterdir()] == ["rank0.json"]  # no temporary file left
    assert read_json(tmp_path / "absent.json") is None
    (tmp_path / "half.json").write_text('{"stage": "lo', encoding="utf-8")
    assert read_json(tmp_path / "half.json") is None


DUMP = """\
Thread 0x00007f1 (most recent call first):
  File "/usr/lib/python3.11/threading.py", line 331 in wait
  File "/venv/lib/python3.11/site-packages/tqdm/_monitor.py", line 69 in run

Current thread 0x00007f2 (most recent call first):
  File "/v/site-packages/torch/distributed/distributed_c10d.py", line 5356 in barrier
  File "/repo/benchmarks/harness/tp/timing.py", line 132 in barrier
  File "/repo/benchmarks/harness/tp/worker.py", line 185 in main
"""


def test_the_main_threads_frames_are_read_from_a_faulthandler_dump() -> None:
    frames = stack_frames(DUMP, "benchmarks/harness/tp/")
    assert frames[0] == (
        "/v/site-packages/torch/distributed/distributed_c10d.py",
        5356,
        "barrier",
    )
    assert len(frames) == 3
    assert stack_frames(DUMP + DUMP.replace("5356", "9999"), "benchmarks/harness/tp/")[0][1] == 9999
    assert stack_frames("", "benchmarks/harness/tp/") == []


TORCHRUN_TAIL = """\
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
benchmarks.harness.tp.worker FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2026-12-03_14:19:56
  host      : vm
  rank      : 0 (local_rank: 0)
  exitcode  : -15 (pid: 11)
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-12-03_14:19:55
  host      : vm
  rank      : 1 (local_rank: 1)
  exitcode  : -9 (pid: 12)
============================================================
"""


def test_the_first_failed_rank_leads_the_reason_before_its_peers_symptoms() -> None:
    peer = {
        "status": "error",
        "stage": "generate",
        "error": {
            "type": "RuntimeError",
            "message": "Connection closed by peer",
            "stage": "generate",
        },
    }
    killed = {"status": "running", "stage": "generate"}
    reason = failure_reason(
        1, False, 60, ranks=[peer, killed], result=None, log_tail=TORCHRUN_TAIL, stacks=["", ""]
    )
    assert reason == (
        "rank 1: last seen at stage 'generate'; "
        "rank 0: RuntimeError: Connection closed by peer (stage generate); "
        "torchrun: rank 0 exit code -15, rank 1 exit code -9"
    )


def test_a_timed_out_rank_is_reported_with_where_its_stack_was() -> None:
    running = {"status": "running", "stage": "prefill"}
    reason = failure_reason(
        0, True, 15, ranks=[running, None], result=None, log_tail="", stacks=[DUMP, ""]
    )
    assert reason is not None
    assert reason.startswith("timed out after 15 s; the whole group was ended; ")
    assert (
        "rank 0: last seen at stage 'prefill'; ended in barrier "
        "(torch/distributed/distributed_c10d.py:5356) from barrier "
        "(/repo/benchmarks/harness/tp/timing.py:132)"
    ) in reason
    assert "rank 1: wrote no record" in reason


def test_a_clean_run_has_no_reason_and_byte_mismatches_are_one() -> None:
    ok = {"status": "ok", "errors": []}
    assert failure_reason(0, False, 60, ranks=[ok, ok], result={"ok": True}, log_tail="") is None
    bad = {"status": "error", "errors": ["KV at 9 positions: analytic 1 B, measured 2 B", "x"]}
    reason = failure_reason(
        1, False, 60, ranks=[ok, bad], result={"ok": False, "errors": ["rank 1: KV"]}, log_tail=""
    )
    assert reason == (
        "rank 1: KV at 9 positions: analytic 1 B, measured 2 B (+1 more); result: rank 1: KV"
    )
    silent = failure_reason(2, False, 60, ranks=[ok, ok], result=None, log_tail="boom\nlast line")
    assert silent == "torchrun exited 2: last line"
