"""The parent side of a tensor-parallel run: the saved random model, torchrun, the timeout.

* **The saved model** (`save_random_model`): transformers applies a TP plan only in
  `from_pretrained`, so a `source: config` model's random weights are saved once per (model,
  dtype, seed, config, transformers version) under `model_cache_root()`:
  `$PHASEBENCH_TP_MODEL_CACHE`, else `$XDG_CACHE_HOME/phasebench/tp-models`, else
  `~/.cache/phasebench/tp-models`. A save goes to a temporary folder beside the final one and is
  renamed into place at the end, with a marker file written last inside it; a folder that exists
  is complete and is reused, never rewritten (two runs saving at once: the second rename fails
  and that run uses the first one's folder). A `source: checkpoint` model that is a local folder
  is used as it is.
* **The run** (`run_tp`): `python -m torch.distributed.run --standalone --nproc-per-node N -m
  benchmarks.harness.tp.worker ...` (torchrun with this interpreter, so a second venv runs its
  own transformers) as a child in a new session, with a timeout. torchrun starts each worker in a
  session of its own, so signalling torchrun's group does not reach them: the launcher polls the
  process tree while it waits and remembers every process it saw (psutil, which checks a pid's
  start time before signalling, so a reused pid is never hit). When the run times out or fails,
  every remembered process gets SIGTERM, then SIGKILL after a grace period; the result lists any
  that survived (it must be empty). Its `reason` is each rank's last error (its JSON), the stage
  a silent rank was last seen at and where its stack was when it was ended (`files.stack_frames`),
  and torchrun's own record of which rank exited with what code; the rank torchrun names as the
  first failure leads, since its peers' errors ("Connection closed by peer") only follow from it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import transformers

from benchmarks.harness.device.cpustate import allowed_cpus
from benchmarks.harness.device.devices import dtype_name
from benchmarks.harness.device.proctree import ProcessTree
from benchmarks.harness.model.models import ModelSpec, build_model
from benchmarks.harness.model.saved import save_once
from benchmarks.harness.tp.bytes import TPError
from benchmarks.harness.tp.cpuranks import cpu_rank_env
from benchmarks.harness.tp.files import RESULT_FILE, rank_file, read_json, stack_file, stack_frames
from benchmarks.harness.tp.timing import threads_per_rank

REPO_ROOT = Path(__file__).resolve().parents[3]
CACHE_ENV = "PHASEBENCH_TP_MODEL_CACHE"
MARKER = "phasebench-tp.json"  # written last inside a saved model: its presence means complete
GRACE_S = 3.0
_POLL_S = 0.1
_LOG_TAIL_CHARS = 4000
_ROOT_CAUSE = re.compile(r"rank\s*:\s*(\d+) \(local_rank: \d+\)\s*\n\s*exitcode\s*:\s*(-?\d+)")
_FIRST_FAILURE = "Root Cause (first observed failure)"  # torchrun's summary heading
_WORKER_FILE = "benchmarks/harness/tp/"  # frames of ours in a rank's stack dump


def model_cache_root() -> Path:
    """Where saved random models live (module docstring)."""
    explicit = os.environ.get(CACHE_ENV)
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "phasebench" / "tp-models"


@dataclass(frozen=True)
class SavedModel:
    """A model folder `from_pretrained` can load, and what saving it cost (0 when reused)."""

    path: Path
    reused: bool
    save_s: float
    bytes: int  # the weight files' bytes on disk


def saved_model_key(spec: ModelSpec, dtype: torch.dtype, seed: int) -> str:
    """The cache folder's name: model, dtype, seed, and a digest of the config and versions."""
    text = json.dumps(
        {"config": spec.config, "transformers": transformers.__version__, "seed": seed},
        sort_keys=True,
        default=str,
    )
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]
    return f"{spec.name}-{dtype_name(dtype)}-seed{seed}-{digest}"


def _weight_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.glob("*.safetensors"))


def save_random_model(
    spec: ModelSpec, dtype: torch.dtype, *, seed: int = 0, root: Path | None = None
) -> SavedModel:
    """The folder of `spec`'s random weights in `dtype`, saved now or reused (module docstring)."""
    if spec.source == "checkpoint":
        folder = Path(spec.checkpoint or "")
        if not folder.is_dir():
            raise TPError(
                f"{spec.name}: tensor parallel loads a local checkpoint folder; "
                f"{spec.checkpoint!r} is not one (download it once, point `checkpoint:` at it)"
            )
        return SavedModel(folder, True, 0.0, _weight_bytes(folder))

    def write(tmp: Path) -> dict[str, Any]:
        model = build_model(spec, torch.device("cpu"), dtype, seed)
        model.save_pretrained(tmp)
        del model
        return {"name": spec.name, "dtype": dtype_name(dtype), "seed": seed}

    key = saved_model_key(spec, dtype, seed)
    root = model_cache_root() if root is None else root
    saved = save_once(root, key, write, marker=MARKER)
    return SavedModel(saved.path, saved.reused, saved.save_s, _weight_bytes(saved.path))


@dataclass(frozen=True)
class WorkerOptions:
    """The worker's command-line options (`worker.parse_args`)."""

    prompt_len: int
    new_tokens: int
    batch: int = 1
    rounds: int = 3
    warmup: int = 1
    dtype: str = "float32"
    device: str = "cpu"
    seed: int = 0
    threads: int | None = None  # per rank; None: the worker's cores // world
    fail_rank: int | None = None
    fail_mode: str = "raise"
    fail_at: str = "init"

    def argv(self, model_dir: Path, out: Path) -> list[str]:
        """The options as worker arguments."""
        args = [
            "--model-dir", str(model_dir), "--out", str(out),
            "--prompt-len", str(self.prompt_len), "--new-tokens", str(self.new_tokens),
            "--batch", str(self.batch), "--rounds", str(self.rounds),
            "--warmup", str(self.warmup), "--dtype", self.dtype, "--device", self.device,
            "--seed", str(self.seed),
        ]  # fmt: skip
        if self.threads is not None:
            args += ["--threads", str(self.threads)]
        if self.fail_rank is not None:
            args += ["--fail-rank", str(self.fail_rank), "--fail-mode", self.fail_mode]
            args += ["--fail-at", self.fail_at]
        return args


def torchrun_command(
    nproc: int, model_dir: Path, out: Path, options: WorkerOptions, python: str
) -> list[str]:
    """torchrun (as `python -m torch.distributed.run`) starting `nproc` workers."""
    return [
        python, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc),
        "-m", "benchmarks.harness.tp.worker", *options.argv(model_dir, out),
    ]  # fmt: skip


@dataclass(frozen=True)
class LaunchResult:
    """How a run ended: the records, why it failed, and the processes it left."""

    returncode: int | None
    timed_out: bool
    wall_s: float
    result: dict[str, Any] | None  # rank 0's result.json
    ranks: tuple[dict[str, Any] | None, ...]
    reason: str | None  # None: every rank finished without errors
    log_tail: str
    pids: tuple[int, ...] = field(default=())  # every process of the run the launcher saw
    survivors: tuple[int, ...] = field(default=())  # those alive after cleanup: must be empty

    @property
    def ok(self) -> bool:
        """The run finished, every rank without errors, and nothing was left behind."""
        return self.reason is None and not self.survivors


def run_tp(
    model_dir: Path,
    out: Path,
    *,
    nproc: int,
    options: WorkerOptions,
    timeout_s: float,
    python: str = sys.executable,
    grace_s: float = GRACE_S,
) -> LaunchResult:
    """Run `nproc` ranks on `model_dir` into `out`; end them all within `timeout_s` (+ grace)."""
    out = out.resolve()  # the ranks run in the repository root, not in our working directory
    out.mkdir(parents=True, exist_ok=True)
    stale_files = [out / RESULT_FILE, *(rank_file(out, r) for r in range(nproc))]
    for stale in [*stale_files, *(stack_file(out, r) for r in range(nproc))]:
        stale.unlink(missing_ok=True)  # a record of an earlier run must not pass for this one's
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    if options.device == "cpu":
        env = cpu_rank_env(env)  # no GPU visible to a CPU rank (cpuranks)
        # torchrun would set 1 and warn; the worker pins the same figure
        threads = options.threads or threads_per_rank(len(allowed_cpus()), nproc)
        env["OMP_NUM_THREADS"] = str(max(1, threads))
    command = torchrun_command(nproc, model_dir, out, options, python)
    log_path = out / "torchrun.log"
    start = time.perf_counter()
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            command, cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        tree = ProcessTree(proc.pid)
        timed_out = False
        try:
            while proc.poll() is None:
                tree.poll()
                if time.perf_counter() - start > timeout_s:
                    timed_out = True
                    break
                time.sleep(_POLL_S)
        except BaseException:  # interrupted (Ctrl-C, a test's timeout): leave no rank behind
            tree.end(grace_s)
            raise
        returncode = proc.poll()
        if timed_out or returncode != 0 or tree.alive():
            tree.end(grace_s)
        returncode = proc.wait(timeout=grace_s) if returncode is None else returncode
    wall_s = time.perf_counter() - start
    ranks = tuple(read_json(rank_file(out, r)) for r in range(nproc))
    result = read_json(out / RESULT_FILE)
    tail = log_path.read_text(encoding="utf-8", errors="replace")[-_LOG_TAIL_CHARS:]
    stacks = tuple(_read_text(stack_file(out, r)) for r in range(nproc))
    reason = failure_reason(
        returncode, timed_out, timeout_s, ranks=ranks, result=result, log_tail=tail, stacks=stacks
    )
    return LaunchResult(
        returncode=returncode,
        timed_out=timed_out,
        wall_s=wall_s,
        result=result,
        ranks=ranks,
        reason=reason,
        log_tail=tail,
        pids=tuple(sorted(tree.seen)),
        survivors=tuple(sorted(p.pid for p in tree.alive())),
    )


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def _frame(frame: tuple[str, int, str]) -> str:
    path, line, func = frame
    # Short enough to read in a skip line: from the package folder on, not the venv's prefix.
    for anchor in ("site-packages/", f"{REPO_ROOT}/"):
        path = path.split(anchor, 1)[-1]
    return f"{func} ({path}:{line})"


def _where(stack: str) -> str:
    """`ended in FUNC (FILE:LINE)` of the innermost frame, and ours when that is not ours."""
    frames = stack_frames(stack, _WORKER_FILE)
    if not frames:
        return ""
    text = f"; ended in {_frame(frames[0])}"
    ours = next((f for f in frames if _WORKER_FILE in f[0]), frames[0])
    return text if ours == frames[0] else f"{text} from {_frame(ours)}"


def _rank_line(rank: int, record: dict[str, Any] | None, stack: str) -> str | None:
    if record is None:
        return f"rank {rank}: wrote no record{_where(stack)}"
    error = record.get("error")
    if isinstance(error, dict):
        return (
            f"rank {rank}: {error.get('type')}: {error.get('message')} (stage {error.get('stage')})"
        )
    if record.get("status") == "running":
        return f"rank {rank}: last seen at stage {record.get('stage')!r}{_where(stack)}"
    errors = record.get("errors") or []
    if errors:
        more = f" (+{len(errors) - 1} more)" if len(errors) > 1 else ""
        return f"rank {rank}: {errors[0]}{more}"
    return None


def _exits(log_tail: str) -> tuple[int | None, list[tuple[int, int]]]:
    """torchrun's first failed rank (None: not named) and every (rank, exit code) it listed."""
    exits = sorted({(int(r), int(c)) for r, c in _ROOT_CAUSE.findall(log_tail)})
    _, heading, after = log_tail.partition(_FIRST_FAILURE)
    first = _ROOT_CAUSE.search(after) if heading else None
    return (int(first.group(1)) if first else None), exits


def failure_reason(
    returncode: int | None,
    timed_out: bool,
    timeout_s: float,
    *,
    ranks: Sequence[dict[str, Any] | None],
    result: dict[str, Any] | None,
    log_tail: str,
    stacks: Sequence[str] = (),
) -> str | None:
    """Why the run failed, one line (None: it did not); torchrun's first failed rank first."""
    failed = timed_out or returncode != 0 or result is None or not result.get("ok", False)
    if not failed:
        return None
    parts: list[str] = []
    if timed_out:
        parts.append(f"timed out after {timeout_s:g} s; the whole group was ended")
    first, exits = _exits(log_tail)
    order = sorted(range(len(ranks)), key=lambda r: r != first)  # stable: the rest by rank
    for r in order:
        line = _rank_line(r, ranks[r], stacks[r] if r < len(stacks) else "")
        if line is not None:
            parts.append(line)
    if exits:
        codes = ", ".join(f"rank {r} exit code {c}" for r, c in exits)
        parts.append(f"torchrun: {codes}")
    if result is not None and result.get("errors"):
        parts.append(f"result: {result['errors'][0]}")
    if len(parts) == (1 if timed_out else 0):
        last = log_tail.strip().splitlines()[-1:] or ["no output"]
        parts.append(f"torchrun exited {returncode}: {last[0]}")
    return "; ".join(parts)
