"""`doctor --self-check`: first contact with a GPU or Mac, the answers fakes cannot give.

After the doctor's machine checks, each probe runs in a process of its own, within its own
timeout (`Probe.timeout_s`) and the whole self-check's limit (`LIMIT_S`), so a probe that hangs
is killed and reported, and a crashed one (a sticky CUDA error, a segfault in a kernel) cannot
poison the probes after it. Each prints its findings as one JSON line (`MARKER`); a probe that
dies without one is a `bad` finding with its last error line, a probe that raises is `bad` with
its error (the doctor's rule), and the rest still run. What cannot apply to the device is
decided here and printed as a `skip` with the reason, without a process.

The probes, in order (each module's docstring says what it measures):
`compile_steps` (`compile`: graph breaks and launches per compiled decode step, the
record's fields, the other transformers versions), `cuda_graphs` (`graphs`: skips and
re-records over two cells of one build), `energy_counter` and `throttle_load` (`gpu`),
`peak_biggest_cell` (`peak`), `flash_attn_logits` and `greedy_tokens` (`model`).

`python -m benchmarks.harness.doctor.selfcheck PROBE --device D [--model M] [--matrix F]
[--full]` runs one probe (what the parent spawns).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from benchmarks.harness.doctor.findings import Finding, skip
from benchmarks.harness.doctor.selfcheck import versions
from benchmarks.harness.errors import MatrixError
from benchmarks.harness.matrix.parse import load_matrix
from benchmarks.harness.model.models import load_model_spec

ROOT = Path(__file__).resolve().parents[4]
MARKER = "PHASEBENCH_SELFCHECK_FINDINGS "
LIMIT_S = 330.0
"""The whole self-check, every probe's process included (about 5 minutes on one GPU)."""
DEFAULT_MODEL = "tiny-llama"


@dataclass(frozen=True)
class SelfCheckRequest:
    """What the self-check runs against: the device, the probes' model, the matrix."""

    device: torch.device
    model: str = DEFAULT_MODEL
    matrix: Path | None = None  # None: the device's shipped matrix
    full: bool = False  # the suite's peak budget instead of the doctor's
    also_transformers: tuple[str, ...] = ()  # compile_steps again on these (`versions`)


@dataclass(frozen=True)
class Probe:
    """One probe: its check name, what it takes on one GPU, when it is killed, when it cannot
    apply (decided in the parent), and what it runs (in the child)."""

    name: str
    budget_s: float
    timeout_s: float
    skip_reason: Callable[[SelfCheckRequest], str | None]
    run: Callable[[SelfCheckRequest], list[Finding]]


def _cuda_only(what: str) -> Callable[[SelfCheckRequest], str | None]:
    def reason(request: SelfCheckRequest) -> str | None:
        kind = request.device.type
        return None if kind == "cuda" else f"{kind}: {what} (CUDA only)"

    return reason


def _fa2_reason(request: SelfCheckRequest) -> str | None:
    # The kernel's own needs, decided without importing transformers here; the probe also
    # asks whether the model supports it (`model.fa2_skip_reason`).
    if request.device.type != "cuda":
        return f"{request.device.type}: flash_attention_2 runs on CUDA only"
    if importlib.util.find_spec("flash_attn") is None:
        return "flash_attention_2: flash-attn is not installed (pip install flash-attn)"
    return None


def _energy_reason(request: SelfCheckRequest) -> str | None:
    if request.device.type == "mps":
        return (
            "mps: powermetrics (root only) samples at the interval phasebench sets; there is "
            "no hardware counter period to probe"
        )
    if request.device.type == "cpu":
        from benchmarks.harness.device.rapl import RaplCounter, open_rapl  # noqa: PLC0415

        found = open_rapl()
        return None if isinstance(found, RaplCounter) else f"cpu: {found.reason}"
    return None


def _always(_: SelfCheckRequest) -> str | None:
    return None


def _run_compile(request: SelfCheckRequest) -> list[Finding]:
    from benchmarks.harness.doctor.selfcheck.compile import probe_compiled_steps  # noqa: PLC0415

    return probe_compiled_steps(request.model, request.device)


def _run_graphs(request: SelfCheckRequest) -> list[Finding]:
    from benchmarks.harness.doctor.selfcheck.graphs import probe_cuda_graphs  # noqa: PLC0415

    return [probe_cuda_graphs(request.model, request.device)]


def _run_energy(request: SelfCheckRequest) -> list[Finding]:
    from benchmarks.harness.doctor.selfcheck.gpu import probe_energy_counter  # noqa: PLC0415

    return [probe_energy_counter(request.device)]


def _run_throttle(request: SelfCheckRequest) -> list[Finding]:
    from benchmarks.harness.doctor.selfcheck.gpu import probe_throttle  # noqa: PLC0415

    return [probe_throttle(request.device)]


def _run_peak(request: SelfCheckRequest) -> list[Finding]:
    from benchmarks.harness.doctor.selfcheck.peak import probe_peak  # noqa: PLC0415

    return [probe_peak(request.device, request.matrix, full=request.full)]


def _run_fa2(request: SelfCheckRequest) -> list[Finding]:
    from benchmarks.harness.doctor.selfcheck.model import probe_fa2  # noqa: PLC0415

    return [probe_fa2(request.model, request.device)]


def _run_greedy(request: SelfCheckRequest) -> list[Finding]:
    from benchmarks.harness.doctor.selfcheck.model import probe_greedy_tokens  # noqa: PLC0415

    return [probe_greedy_tokens(request.model, request.device)]


# Budgets are what each takes on one GPU (a cold inductor cache); the timeouts leave 3x.
PROBES: tuple[Probe, ...] = (
    Probe("compile_steps", 45.0, 150.0, _always, _run_compile),
    Probe("cuda_graphs", 90.0, 240.0, _cuda_only("CUDA graphs"), _run_graphs),
    Probe("energy_counter", 8.0, 60.0, _energy_reason, _run_energy),
    Probe("throttle_load", 8.0, 60.0, _cuda_only("NVML throttle counters"), _run_throttle),
    Probe("peak_biggest_cell", 30.0, 120.0, _always, _run_peak),
    Probe("flash_attn_logits", 20.0, 120.0, _fa2_reason, _run_fa2),
    Probe("greedy_tokens", 15.0, 120.0, _always, _run_greedy),
)


def probe_named(name: str) -> Probe:
    """The probe called `name` (KeyError for an unknown one)."""
    for probe in PROBES:
        if probe.name == name:
            return probe
    raise KeyError(name)


def request_from(device: torch.device, args: argparse.Namespace) -> SelfCheckRequest | None:
    """The self-check asked for on the command line (None: no `--self-check`); its model and
    matrix are read now, so a wrong name is bad input (exit 2) before any check runs."""
    also = versions.parse_versions(args.also_transformers)
    if not args.self_check:
        flags = (
            ("--matrix", args.matrix),
            ("--probe-model", args.probe_model),
            ("--also-transformers", also or None),
        )
        for flag, value in flags:
            if value is not None:
                raise MatrixError(f"{flag} applies to the self-check only; add --self-check.")
        return None
    request = SelfCheckRequest(
        device,
        args.probe_model or DEFAULT_MODEL,
        args.matrix,
        full=bool(args.full),
        also_transformers=also,
    )
    load_model_spec(request.model)  # ModelError names the closest known models
    if request.matrix is not None:
        load_matrix(request.matrix)  # MatrixError names the file, the field and the fix
    return request


# --- the parent: one process per probe ----------------------------------------------------------


def child_command(
    probe: Probe, request: SelfCheckRequest, python: str = sys.executable
) -> list[str]:
    """The command that runs `probe` in a process of its own (`python`: another
    environment's interpreter, for another transformers version)."""
    command = [
        python, "-m", "benchmarks.harness.doctor.selfcheck", probe.name,
        "--device", str(request.device), "--model", request.model,
    ]  # fmt: skip
    if request.matrix is not None:
        command += ["--matrix", str(request.matrix)]
    return [*command, "--full"] if request.full else command


Spawn = Callable[[list[str], float], "subprocess.CompletedProcess[str]"]


def spawn(command: list[str], timeout_s: float) -> subprocess.CompletedProcess[str]:
    """Run a probe's process from the repository root (`python -m` finds the package there)."""
    return subprocess.run(
        command,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def findings_from(name: str, done: subprocess.CompletedProcess[str]) -> list[Finding]:
    """The probe's findings from its JSON line; `bad` when it died without one."""
    lines = [line for line in done.stdout.splitlines() if line.startswith(MARKER)]
    errors = [line for line in (done.stderr or "").splitlines() if line.strip()]
    last = errors[-1].strip() if errors else "no output"
    if lines:
        try:
            return [_finding(item) for item in json.loads(lines[-1][len(MARKER) :])]
        except (ValueError, KeyError, TypeError) as error:  # a line cut short, a bad level
            last = f"unreadable findings: {error}"
    return [
        _bad(
            name, f"the probe's process ended with exit {done.returncode} and no findings ({last})"
        )
    ]


def _bad(name: str, what: str) -> Finding:
    return Finding(
        f"selfcheck.{name}",
        "bad",
        f"{what}, so it vouches for nothing",
        "rerun; if it repeats, report it with this line",
    )


def _finding(item: dict[str, object]) -> Finding:
    data = item.get("data")
    return Finding(
        check=str(item["check"]),
        level=item["level"],  # type: ignore[arg-type]  # validated by Finding
        message=str(item["message"]),
        action=str(item["action"]),
        data=dict(data) if isinstance(data, dict) else {},
    )


def run_probe(
    probe: Probe,
    request: SelfCheckRequest,
    *,
    timeout_s: float,
    run: Spawn = spawn,
    python: str = sys.executable,
) -> list[Finding]:
    """One probe in its own process; a timeout or a death is a `bad` finding."""
    try:
        done = run(child_command(probe, request, python), timeout_s)
    except OSError as error:  # the interpreter could not be started
        return [_bad(probe.name, f"the probe's process could not start ({error})")]
    except subprocess.TimeoutExpired:
        return [
            Finding(
                f"selfcheck.{probe.name}",
                "bad",
                f"the probe did not finish within {timeout_s:.0f} s (it takes about "
                f"{probe.budget_s:.0f} s on one GPU) and was stopped, so it vouches for nothing",
                f"rerun it alone: {' '.join(child_command(probe, request, python))}",
                {"timeout_s": timeout_s},
            )
        ]
    return findings_from(probe.name, done)


def self_check(
    request: SelfCheckRequest,
    *,
    probes: Sequence[Probe] = PROBES,
    run: Spawn = spawn,
    clock: Callable[[], float] = time.monotonic,
    install: versions.Run = versions.spawn,
) -> Iterator[Finding]:
    """Every probe's findings, in order, as each finishes (the caller prints them); then
    `compile_steps` on each of `request.also_transformers` (outside `LIMIT_S`: an install
    takes what the network gives it, and the versions are asked for by name)."""
    deadline = clock() + LIMIT_S
    for probe in probes:
        try:
            reason = probe.skip_reason(request)
        except Exception as error:  # deciding crashed: the probe vouches for nothing
            yield _bad(probe.name, f"deciding whether it applies crashed ({error})")
            continue
        if reason is not None:
            yield skip(f"selfcheck.{probe.name}", reason)
            continue
        left_s = deadline - clock()
        if left_s < probe.budget_s:
            yield Finding(
                f"selfcheck.{probe.name}",
                "warn",
                f"not run: {left_s:.0f} s of the self-check's {LIMIT_S:.0f} s were left, and it "
                f"takes about {probe.budget_s:.0f} s",
                "rerun the self-check; the probes before it took longer than on a GPU",
            )
            continue
        yield from run_probe(probe, request, timeout_s=min(probe.timeout_s, left_s), run=run)
    root = versions.overlay_root()
    compile_probe = probe_named("compile_steps")
    for version in request.also_transformers:
        python = versions.ensure_overlay(version, root, install)
        if isinstance(python, str):
            yield versions.not_installed(version, python, root)
            continue
        found = run_probe(
            compile_probe, request, timeout_s=compile_probe.timeout_s, run=run, python=str(python)
        )
        yield from versions.renamed(found, version)


# --- the child: one probe ---------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    """Run one probe; print its findings as one JSON line (a crash is a `bad` finding)."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.harness.doctor.selfcheck")
    parser.add_argument("probe", choices=[p.name for p in PROBES])
    parser.add_argument("--device", required=True)
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--matrix", type=Path, default=None)
    parser.add_argument("--full", action="store_true")
    args = parser.parse_args(argv)
    request = SelfCheckRequest(torch.device(args.device), args.model, args.matrix, args.full)
    probe = probe_named(args.probe)
    try:
        found = probe.run(request)
    except Exception as error:  # a bug or an odd device: say so; the parent goes on
        first = str(error).splitlines()[0] if str(error) else ""
        found = [_bad(probe.name, f"the probe crashed ({type(error).__name__}: {first})")]
    print(MARKER + json.dumps([finding.to_json() for finding in found]), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
