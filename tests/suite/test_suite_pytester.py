"""The benchmark suite end to end, through pytest itself (`pytester`), on tiny models in seconds.

Each test writes a small matrix (and, where needed, a models directory) into the pytester
directory and runs `pytest <repo>/benchmarks --matrix ...` in a subprocess, exactly as a user
would, then reads what came out: outcomes, terminal lines, and the saved history JSON.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
MODELS = ROOT / "matrix" / "models"
TINY = ("tiny-llama", "tiny-qwen2-sw")

pytest_plugins = ["pytester"]
# The repository's own configuration (import mode, strictness), whatever the working directory;
# peaks "none" because measuring the machine's peaks is not what these tests check, and slow
# dtypes allowed: on an AVX2-only CPU the tiny bfloat16 cells would be skipped at collection
# (tests/suite/test_slow_dtypes.py covers that), and these tests count them as run.
COMMON = (
    str(ROOT / "benchmarks"),
    "-c",
    str(ROOT / "pyproject.toml"),
    "-p",
    "no:cacheprovider",
    "-rs",
    "--peaks",
    "none",
    "--allow-slow-dtypes",
)
# Every measurement module runs every cell; test_kv_cache asserts and records no history.
# Every measurement module of a plain (single-request) cell: test_serve takes serving cells only
# (a matrix with a `serve` axis; tests/suite/test_serve_suite.py runs those), and
# test_interleaved runs only where a matrix names it (tests/suite/test_quant_suite.py).
OPT_IN = frozenset({"test_serve", "test_interleaved"})
MODULES = tuple(
    sorted(p.stem for p in (ROOT / "benchmarks").glob("test_*.py") if p.stem not in OPT_IN)
)
# The test function of each module, where its name is not the module's (test_prefill_forward
# times the model-side forward; it replaced test_prefill, which timed more).
FUNCTIONS = {"test_prefill": "test_prefill_forward"}


def write_matrix(path: Path, body: str) -> Path:
    path.write_text("schema: 1\n" + body, encoding="utf-8")
    return path


def models_dir(base: Path, *, broken: bool = False) -> Path:
    """A models directory holding the tiny models, plus one that cannot be built if asked."""
    directory = base / "models"
    directory.mkdir()
    for name in TINY:
        shutil.copy(MODELS / f"{name}.yaml", directory / f"{name}.yaml")
    if broken:
        # A vocabulary of 10^11 rows asks for ~25 TB of embedding: the build fails the way an
        # out-of-memory model does, after collection, inside the cell's own tests.
        text = (MODELS / "tiny-llama.yaml").read_text(encoding="utf-8")
        text = text.replace("name: tiny-llama", "name: tiny-broken")
        text = text.replace("vocab_size: 256", "vocab_size: 100000000000")
        assert "100000000000" in text
        (directory / "tiny-broken.yaml").write_text(text, encoding="utf-8")
    return directory


def run_suite(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    """Run the suite in a subprocess, as a user would (a fresh interpreter, real exit code)."""
    return pytester.runpytest_subprocess(*COMMON, *args, timeout=300)


def collect_suite(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    """Configure and collect only (in a subprocess too: torch does not survive re-imports)."""
    return run_suite(pytester, "--collect-only", "-q", *args)


def saved_runs(storage: Path) -> list[dict[str, Any]]:
    """Each saved file, its host-probe records (benchmarks/suite/hostprobe.py) moved from
    `benchmarks` to `host_probes`, so the checks below read the cells' records only."""
    runs = []
    for path in sorted(storage.rglob("*.json")):
        run = json.loads(path.read_text())
        records = run["benchmarks"]
        run["benchmarks"] = [b for b in records if not b["extra_info"].get("host_probe")]
        run["host_probes"] = [b for b in records if b["extra_info"].get("host_probe")]
        runs.append(run)
    return runs


MAIN = """\
models: [tiny-llama, tiny-qwen2-sw, tiny-broken]
devices: [cpu]
dtypes: [float32]
batch: [1]
prompt_len: [16]
new_tokens: [4]
exclude:
  - {model: tiny-qwen2-sw}
include:
  - {model: tiny-qwen2-sw, device: cpu, dtype: bfloat16, batch: 2, prompt_len: 12, new_tokens: 3}
  # Beyond the tiny models' 1024 positions: skipped at collection with the reason.
  - {model: tiny-llama, device: cpu, dtype: float32, batch: 1, prompt_len: 1020, new_tokens: 8}
  # A device no test machine has (an 8-GPU node has cuda:7): skipped at collection, the reason.
  - {model: tiny-llama, device: "cuda:64", dtype: float16, batch: 1, prompt_len: 16, new_tokens: 4}
warmup: 1
rounds: 2
"""


@dataclass(frozen=True)
class Run:
    """A finished suite run: exit code, output lines, and where its history went."""

    ret: int
    stdout: pytest.LineMatcher
    stderr: pytest.LineMatcher
    outlines: list[str]
    storage: Path

    def outcomes(self) -> dict[str, int]:
        return pytest.RunResult.parse_summary_nouns(self.outlines)


@pytest.fixture(scope="module")
def main_run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    """One run of MAIN, shared by the tests below (a good cell, a batched bfloat16 cell, a
    broken cell, two skipped). pytester is function-scoped, so this one runs the same command
    with subprocess directly."""
    base = tmp_path_factory.mktemp("suite")
    matrix = write_matrix(base / "main.yaml", MAIN)
    storage = base / "history"
    command = [
        sys.executable,
        "-m",
        "pytest",
        *COMMON,
        "--matrix",
        str(matrix),
        "--models-dir",
        str(models_dir(base, broken=True)),
        f"--benchmark-storage=file://{storage}",
        "-v",
    ]
    # tiny-broken cannot fit in any memory: the fit check would skip it at collection
    # (tests/suite/test_memory_fit.py); the override lets it fail in its build, as tested here.
    env = {**os.environ, "PHASEBENCH_IGNORE_FIT": "1"}
    done = subprocess.run(
        command, cwd=base, capture_output=True, text=True, timeout=300, check=False, env=env
    )
    outlines = done.stdout.splitlines()
    return Run(
        ret=done.returncode,
        stdout=pytest.LineMatcher(outlines),
        stderr=pytest.LineMatcher(done.stderr.splitlines()),
        outlines=outlines,
        storage=storage,
    )


def test_the_run_collects_every_cell_and_measurement_by_id(main_run):
    result = main_run
    for cell in ("tiny-llama-cpu-float32-b1-p16-n4", "tiny-qwen2-sw-cpu-bfloat16-b2-p12-n3"):
        for module in MODULES:
            function = FUNCTIONS.get(module, module)
            result.stdout.fnmatch_lines([f"*{module}.py::{function}[[]{cell}[]] PASSED*"])


def test_cells_the_machine_cannot_run_are_skipped_with_their_reason(main_run):
    result = main_run
    result.stdout.fnmatch_lines(
        [
            "*tiny-llama-cpu-float32-b1-p1020-n8: P + N - 1 = 1027 positions exceed tiny-llama's"
            " 1024*",
            "*tiny-llama-cuda:64-float16-b1-p16-n4: cuda:64 unavailable*",
        ]
    )


def test_a_failing_cell_fails_only_its_own_tests_and_the_rest_is_saved(main_run):
    result, storage = main_run, main_run.storage
    outcomes = result.outcomes()
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    per_cell = len(MODULES)
    assert outcomes["passed"] == 2 * per_cell
    # test_interleaved's two tests skip on all 5 cells: the matrix does not name `interleaved`.
    opt_in = [line for line in result.outlines if "test_interleaved.py::" in line]
    assert len(opt_in) == 2 * 5
    assert all("SKIPPED" in line for line in opt_in)
    assert outcomes["skipped"] == 2 * per_cell + len(opt_in)
    assert outcomes["errors"] == per_cell  # every measurement of tiny-broken, at fixture setup
    result.stdout.fnmatch_lines(["*building tiny-broken on cpu in float32 failed*"])
    (run,) = saved_runs(storage)
    cells = {b["extra_info"]["cell_id"] for b in run["benchmarks"]}
    assert cells == {"tiny-llama-cpu-float32-b1-p16-n4", "tiny-qwen2-sw-cpu-bfloat16-b2-p12-n3"}


def test_progress_lines_name_the_build_warmup_and_rounds(main_run):
    result = main_run
    result.stdout.fnmatch_lines(
        [
            "phasebench: [[]*[]] built tiny-llama on cpu in float32: * s, * MiB of weights",
            "phasebench: [[]*[]] tiny-llama-cpu-float32-b1-p16-n4: warmup done in * s",
            "phasebench: [[]*[]] tiny-llama-cpu-float32-b1-p16-n4: prefill, 2 round(s) ...",
        ],
        consecutive=False,
    )


def test_each_model_is_built_once_even_across_modules(main_run):
    result = main_run
    lines = [line for line in result.outlines if "] built " in line]
    assert len(lines) == 2, lines  # tiny-llama float32, tiny-qwen2-sw bfloat16


def test_history_has_flat_params_schema_1_extra_info_raw_rounds_and_the_fingerprint(main_run):
    storage = main_run.storage
    (run,) = saved_runs(storage)
    assert run["machine_info"]["phasebench"]["schema"] == 1
    assert len(run["machine_info"]["phasebench"]["fingerprint_id"]) == 8
    by_name = {b["name"]: b for b in run["benchmarks"]}
    assert "partial" not in run["machine_info"]["phasebench"]  # a complete run
    prefill = by_name["test_prefill_forward[tiny-qwen2-sw-cpu-bfloat16-b2-p12-n3]"]
    assert prefill["params"] == {
        "model": "tiny-qwen2-sw",
        "device": "cpu",
        "dtype": "bfloat16",
        "batch": 2,
        "prompt_len": 12,
        "new_tokens": 3,
    }
    assert prefill["group"] == "prefill"
    assert len(prefill["stats"]["data"]) == 2
    info = prefill["extra_info"]
    assert info["schema"] == 1
    assert info["measurement"] == "prefill"
    assert (info["warmup"], info["rounds"], info["timer"], info["sync"]) == (
        1,
        2,
        "perf_counter",
        "none (cpu)",
    )
    assert info["prefill_tok_per_s"] == pytest.approx(2 * 12 / info["prefill_s"])
    assert info["kv_measured_after_prefill_bytes"] == info["kv_analytic_after_prefill_bytes"] > 0
    assert info["weights_bytes"] > 0
    assert "UNSERIALIZABLE" not in json.dumps(run)

    decode = by_name["test_decode[tiny-llama-cpu-float32-b1-p16-n4]"]["extra_info"]
    assert decode["decode_tok_per_s"] == pytest.approx(1 / decode["decode_step_s"])
    assert decode["kv_measured_final_bytes"] == decode["kv_analytic_final_bytes"]

    generate_bench = by_name["test_generate[tiny-llama-cpu-float32-b1-p16-n4]"]
    generate = generate_bench["extra_info"]
    assert len(generate["step_s"]) == len(generate["gap_s"]) == 3
    # One name, one quantity: extra_info's e2e_s is the median of the gated rounds.
    rounds_s = sorted(generate_bench["stats"]["data"])
    assert generate["e2e_s"] == pytest.approx((rounds_s[0] + rounds_s[1]) / 2)
    assert info["prefill_s"] == pytest.approx(prefill["stats"]["median"])
    assert generate["tpot_s"] == pytest.approx((generate["e2e_s"] - generate["ttft_s"]) / 3)
    assert generate["itl_p50_s"] <= generate["itl_p90_s"] <= generate["itl_p99_s"]
    assert (generate["itl_samples"], generate["ttft_samples"]) == (2 * 3, 2)
    # The bookkeeping's cost is measured apart (the untimed asserting pass against the rounds),
    # and every round's prefill is kept for the report's consistency line.
    assert isinstance(generate["bookkeeping_per_step_s"], float)
    assert len(generate["generate_prefill_rounds_s"]) == 2
    # CPU has no allocator counters: neither a true nor a sampled peak.
    assert generate["peak_allocated_bytes"] is None
    assert generate["peak_allocated_sampled_bytes"] is None
    assert generate["kv_state_analytic_bytes"] == generate["kv_state_measured_bytes"] == 0
    assert len(generate["kv_bytes_per_step"]) == 3
    assert generate["kv_measured_final_bytes"] == generate["kv_analytic_final_bytes"]
    phases = [s["phase"] for s in generate["resource_samples"]]
    assert phases == [
        "before_prefill",
        "after_prefill",
        "after_decode",
        "after_decode",
        "after_decode",
    ]
    groups = {b["group"] for b in run["benchmarks"]}
    assert groups == {m.removeprefix("test_") for m in MODULES} - {"kv_cache"}


def test_pytest_benchmark_compare_still_reads_the_history(main_run):
    storage = main_run.storage
    listed = subprocess.run(
        [sys.executable, "-m", "pytest_benchmark", "--storage", f"file://{storage}", "list"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert ".json" in listed.stdout
    compared = subprocess.run(
        [sys.executable, "-m", "pytest_benchmark", "--storage", f"file://{storage}", "compare"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "test_prefill_forward[tiny-llama-cpu-float32-b1-p16-n4]" in compared.stdout


BROKEN = """\
models: [tiny-llama]
devices: [cpu]
dtypes: [float32, bf16]
batch: [1]
prompt_len: [16]
new_tokens: [4]
"""


def test_an_invalid_matrix_fails_before_anything_runs_with_its_message(pytester):
    matrix = write_matrix(pytester.path / "broken.yaml", BROKEN)
    result = collect_suite(pytester, "--matrix", str(matrix))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            f"ERROR: {matrix}: dtypes[[]1[]]: unknown dtype 'bf16' (did you mean 'bfloat16'?); "
            "use one of float32, float16, bfloat16"
        ]
    )
    assert "] built " not in result.stdout.str()


SHARDED = """\
models: [tiny-llama, tiny-qwen2-sw]
devices: [cpu]
dtypes: [float32]
batch: [1]
prompt_len: [8, 16, 32]
new_tokens: [2]
"""


def test_shards_split_the_cells_disjointly_and_completely(pytester):
    matrix = write_matrix(pytester.path / "sharded.yaml", SHARDED)
    seen = []
    for shard in ("1/2", "2/2"):
        result = collect_suite(pytester, "--matrix", str(matrix), "--shard", shard)
        assert result.ret == pytest.ExitCode.OK
        ids = {
            line.split("[", 1)[1].rstrip("]")
            for line in result.outlines
            if "::test_prefill_forward[" in line
        }
        assert ids
        seen.append(ids)
    assert not seen[0] & seen[1]
    assert len(seen[0] | seen[1]) == 6


def test_a_bad_shard_is_a_usage_error(pytester):
    matrix = write_matrix(pytester.path / "sharded.yaml", SHARDED)
    result = collect_suite(pytester, "--matrix", str(matrix), "--shard", "3/2")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: --shard '3/2'*"])


ONE = """\
models: [tiny-llama]
devices: [cpu]
dtypes: [float32]
batch: [1]
prompt_len: [8]
new_tokens: [3]
warmup: 0
rounds: 1
"""


def test_profile_writes_a_trace_per_generate_cell_and_saves_no_history(pytester):
    matrix = write_matrix(pytester.path / "one.yaml", ONE)
    storage = pytester.path / "history"
    traces = pytester.path / "traces"
    result = run_suite(
        pytester,
        "--matrix",
        str(matrix),
        "--profile",
        str(traces),
        f"--benchmark-storage=file://{storage}",
        "-k",
        "generate",
    )
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    result.stdout.fnmatch_lines(["*--profile*timings are NOT saved to history*"])
    assert [p.name for p in traces.iterdir()] == ["tiny-llama-cpu-float32-b1-p8-n3.trace.json"]
    assert not storage.exists() or not list(storage.rglob("*.json"))


def test_min_timed_s_times_more_rounds_than_the_floor_and_records_both(pytester):
    from benchmarks.suite.rounds import timed_rounds  # noqa: PLC0415 - the rule under test

    # tiny-llama's rounds take milliseconds: half a second of them is far more than 2 rounds.
    body = ONE.replace("rounds: 1", "rounds: 2\nmin_timed_s: 1")
    matrix = write_matrix(pytester.path / "timed.yaml", body)
    out = pytester.path / "bench.json"
    result = run_suite(
        pytester, "--matrix", str(matrix), f"--benchmark-json={out}", "-k", "prefill or decode"
    )
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    result.stdout.fnmatch_lines(["*prefill, 2+ round(s), >= 1 s timed ...*"])
    records = json.loads(out.read_text())["benchmarks"]
    for record in (r for r in records if not r["extra_info"].get("host_probe")):
        extra, data = record["extra_info"], record["stats"]["data"]
        assert (extra["rounds"], extra["min_timed_s"]) == (2, 1)
        assert len(data) > 2
        # The count is the rule's, from the warm round's recorded time: rounds timed on a shared
        # machine can run faster than the warm one, so their sum is not the check (it read
        # 0.43 s of a 1-s target once under two test workers).
        assert len(data) == timed_rounds(2, extra["warm_round_s"], 1.0)


# --- noise control: --threads, --warmup-until-stable, thermal state --------------------------

JSON_SCALARS = (str, int, float, bool, type(None))


def test_every_timed_record_has_the_warmup_and_thermal_fields(main_run):
    (run,) = saved_runs(main_run.storage)
    for bench in run["benchmarks"]:
        info = bench["extra_info"]
        assert info["warmup_policy"] == "fixed:1", bench["name"]
        assert info["warmup_generations_run"] == 1
        assert info["warmup_final_cv"] is None
        for key in ("thermal_before", "thermal_after"):
            # Maybe empty (VMs and containers often expose nothing), but always a flat dict.
            assert isinstance(info[key], dict), (bench["name"], key)
            assert all(isinstance(v, JSON_SCALARS) for v in info[key].values())


def test_every_timed_record_names_the_fp_state_the_thread_policy_and_the_machines_load(main_run):
    (run,) = saved_runs(main_run.storage)
    for bench in run["benchmarks"]:
        info = bench["extra_info"]
        # Pinned per cell: FTZ/DAZ off, as in a user's process (benchmarks/harness/device/fpstate).
        assert info["flush_denormal"] is False, bench["name"]
        cpus = info["others_cpus"]
        assert cpus == os.cpu_count()  # the whole machine, never more cores than it has
        if info["other_cpu_pct"] is None:  # rounds too short for the CPU counters: unknown
            assert info["others_cores"] is None
            assert "unknown" in info["other_cpu_note"], bench["name"]
        else:
            assert 0.0 <= info["other_cpu_pct"] <= 100.0, bench["name"]
            assert 0.0 <= info["others_cores"] <= cpus, bench["name"]
        # The whole test's window holds the timed rounds' (the reports add these up).
        assert info["others_test_window_s"] >= info["others_window_s"] > 0.0
        assert 0.0 <= info["others_test_cpu_s"] <= cpus * info["others_test_window_s"]
        assert info["torch_num_threads"] >= 1
        assert (
            info["omp_wait_policy"] == run["machine_info"]["phasebench"]["stack"]["omp_wait_policy"]
        )
    assert "cpu_capability" in run["machine_info"]["phasebench"]["stack"]


def test_thread_state_is_recorded_beside_the_fingerprint_and_not_hashed(main_run):
    from benchmarks.harness.device.fingerprint import fingerprint_id  # noqa: PLC0415

    (run,) = saved_runs(main_run.storage)
    phasebench = run["machine_info"]["phasebench"]
    threads = phasebench["threads"]
    assert threads["torch_num_threads"] >= 1
    assert {"torch_num_interop_threads", "env_OMP_NUM_THREADS", "cpu_affinity"} <= set(threads)
    # The id is the fingerprint's alone: recording the thread state changes no existing id.
    assert phasebench["fingerprint_id"] == fingerprint_id(phasebench["fingerprint"])
    assert phasebench["fingerprint"]["torch_num_threads"] == str(threads["torch_num_threads"])


WARM3 = """\
models: [tiny-llama]
devices: [cpu]
dtypes: [float32]
batch: [1]
prompt_len: [8]
new_tokens: [3]
warmup: 3
rounds: 1
"""


def run_noise(pytester: pytest.Pytester, body: str, *args: str) -> tuple[pytest.RunResult, Any]:
    """Run the one-cell matrix `body` with `args`; return the result and its saved history."""
    matrix = write_matrix(pytester.path / "noise.yaml", body)
    storage = pytester.path / "history"
    models = models_dir(pytester.path)
    result = run_suite(
        pytester,
        "--matrix",
        str(matrix),
        "--models-dir",
        str(models),
        f"--benchmark-storage=file://{storage}",
        *args,
    )
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    (run,) = saved_runs(storage)
    return result, run


def test_threads_are_pinned_and_until_stable_runs_at_least_the_matrix_warmup(pytester):
    # A CV bound of 10 holds for any two positive times (their CV is at most sqrt(2)), so the
    # warmup stops as soon as it may: at the matrix's warmup of 3, not at the window of 2.
    result, run = run_noise(
        pytester,
        WARM3,
        "--threads",
        "1",
        "--warmup-until-stable",
        "--stable-cv",
        "10",
        "--stable-window",
        "2",
        "--stable-max",
        "5",
        "-k",
        "prefill or generate",
    )
    result.stdout.fnmatch_lines(
        [
            "phasebench: torch intra-op threads pinned to 1 (--threads)",
            "phasebench: warmup until stable: CV < 10 over the last 2 generations,*at most 5",
        ]
    )
    phasebench = run["machine_info"]["phasebench"]
    assert phasebench["threads"]["torch_num_threads"] == 1
    assert phasebench["fingerprint"]["torch_num_threads"] == "1"
    assert {b["group"] for b in run["benchmarks"]} == {"prefill", "generate"}
    for bench in run["benchmarks"]:
        info = bench["extra_info"]
        assert info["warmup_policy"] == "until-stable:cv<10,k=2,max=5"
        assert info["warmup_generations_run"] == 3
        assert 0 <= info["warmup_final_cv"] < 10
        assert isinstance(info["thermal_before"], dict)
        assert isinstance(info["thermal_after"], dict)


def test_a_warmup_that_never_settles_stops_at_the_cap(pytester):
    result, run = run_noise(
        pytester,
        WARM3.replace("warmup: 3", "warmup: 1"),
        "--warmup-until-stable",
        "--stable-cv",
        "1e-12",
        "--stable-window",
        "2",
        "--stable-max",
        "3",
        "-k",
        "prefill",
    )
    result.stdout.fnmatch_lines(["*warmup done in * s: 3 generation(s), *NOT stable*"])
    (bench,) = run["benchmarks"]
    info = bench["extra_info"]
    assert info["warmup_generations_run"] == 3
    assert info["warmup_policy"] == "until-stable:cv<1e-12,k=2,max=3"
    assert info["warmup_final_cv"] >= 1e-12


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--threads", "0"], "--threads '0' is not a whole number >= 1; *"),
        (
            ["--warmup-until-stable", "--stable-cv", "-0.1"],
            "--stable-cv '-0.1' is not a number above 0; *--stable-cv 0.02",
        ),
        (
            ["--warmup-until-stable", "--stable-window", "1"],
            "--stable-window '1' is not a whole number >= 2; a CV needs at least two *",
        ),
        (
            ["--warmup-until-stable", "--stable-window", "4", "--stable-max", "3"],
            "--stable-max '3' is not a whole number >= 4; *",
        ),
        (
            ["--warmup-until-stable", "--stable-window", "2", "--stable-max", "2"],
            "--stable-max 2 is below the warmup 3 of noise.yaml (cell tiny-llama-*); "
            "raise --stable-max to at least 3",
        ),
    ],
)
def test_bad_noise_options_are_one_line_usage_errors(pytester, args, message):
    matrix = write_matrix(pytester.path / "noise.yaml", WARM3)
    result = collect_suite(pytester, "--matrix", str(matrix), *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: {message}"])
    assert "usage:" not in result.stderr.str()


# --- partial history: a killed run keeps what it measured -----------------------------------

# Long enough that the run cannot end between the first saved test and the signal: with 12
# tests a fast machine sometimes finished them all first, and the "killed" run was complete.
LONG_PROMPTS = list(range(8, 200, 4))
LONG = f"""\
models: [tiny-llama]
devices: [cpu]
dtypes: [float32]
batch: [1]
prompt_len: {LONG_PROMPTS}
new_tokens: [3]
warmup: 0
rounds: 1
"""


# Ctrl-C's own handler in the run, whatever this process inherited: a shell that starts a job in
# the background (`cmd &`, no job control) hands it SIGINT ignored, and so to every child.
_WITH_SIGINT = (
    "import signal, sys, pytest; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "sys.exit(pytest.main(sys.argv[1:]))"
)


def _start(base: Path, matrix: Path, storage: Path, *args: str) -> subprocess.Popen[str]:
    command = [sys.executable, "-c", _WITH_SIGINT, *COMMON, "--matrix", str(matrix)]
    command += [f"--benchmark-storage=file://{storage}", "-k", "prefill or decode", *args]
    return subprocess.Popen(
        command, cwd=base, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True,
    )  # fmt: skip


def _wait_for_history(storage: Path, process: subprocess.Popen[str]) -> list[dict[str, Any]]:
    """Poll until a history file with at least one benchmark exists (or the run ends)."""
    import time  # noqa: PLC0415

    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and process.poll() is None:
        runs = [r for r in saved_runs(storage) if r["benchmarks"]] if storage.exists() else []
        if runs:
            return runs
        time.sleep(0.05)
    raise AssertionError(f"no history appeared; the run ended with {process.poll()}")


@pytest.mark.parametrize("signal_name", ["SIGTERM", "SIGINT"])
def test_a_killed_run_keeps_its_finished_cells_in_a_partial_file(tmp_path, signal_name):
    """Killed mid-way, the run leaves one history file marked partial with the tests that
    finished; SIGTERM ends the process at once (the per-test file is what survives), SIGINT
    lets pytest-benchmark save, and that file is marked partial as well."""
    import signal  # noqa: PLC0415

    matrix = write_matrix(tmp_path / "long.yaml", LONG)
    storage = tmp_path / "history"
    process = _start(tmp_path, matrix, storage)
    try:
        _wait_for_history(storage, process)
        process.send_signal(getattr(signal, signal_name))
        output, _ = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
    (run,) = saved_runs(storage)  # one file: the partial one, never a second "complete" one
    assert run["machine_info"]["phasebench"]["partial"] is True, output
    names = [b["name"] for b in run["benchmarks"]]
    assert names, output
    assert len(names) < 2 * len(LONG_PROMPTS)  # mid-way: not every test of the matrix finished
    for bench in run["benchmarks"]:
        assert bench["stats"]["data"]  # raw rounds of a finished test
        assert "thermal_after" in bench["extra_info"]  # its record was complete
    assert not list(storage.rglob(".*.tmp"))


def test_a_normal_end_replaces_the_partial_file_by_the_complete_one(tmp_path):
    matrix = write_matrix(tmp_path / "short.yaml", LONG.replace(str(LONG_PROMPTS), "[8]"))
    storage = tmp_path / "history"
    process = _start(tmp_path, matrix, storage)
    output, _ = process.communicate(timeout=240)
    assert process.returncode == 0, output
    (run,) = saved_runs(storage)
    assert "partial" not in run["machine_info"]["phasebench"]
    assert len(run["benchmarks"]) == 2
