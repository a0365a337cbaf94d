"""A/B sides: dependency specs, their cache keys, environments that reuse the running torch."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from benchmarks.ab.sides import (
    ABError,
    EnvSpec,
    dependency_group,
    environment,
    parse_assignments,
    probe_stack,
)

ROOT = Path(__file__).resolve().parents[2]


def test_bench_group_resolves_includes(tmp_path: Path):
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(
        "[dependency-groups]\n"
        'base = ["torch>=2.4"]\n'
        'bench = [{include-group = "base"}, "pytest"]\n',
        encoding="utf-8",
    )
    assert dependency_group(pyproject) == ["torch>=2.4", "pytest"]
    pyproject.write_text("[dependency-groups]\nother = []\n", encoding="utf-8")
    with pytest.raises(ABError, match="bench"):
        dependency_group(pyproject)


def test_identical_specs_share_a_key_and_torch_requests_change_it(tmp_path: Path):
    here = EnvSpec.of(ROOT, {})
    assert here == EnvSpec.of(ROOT, {})
    assert here.digest == EnvSpec.of(ROOT, {}).digest
    other = EnvSpec.of(ROOT, {"PHASEBENCH_TORCH": "torch==2.12.0"})
    assert other.torch == "torch==2.12.0"
    assert other.digest != here.digest
    # unrelated variables do not change the environment
    assert EnvSpec.of(ROOT, {"OMP_NUM_THREADS": "1"}) == here


def test_the_running_spec_is_the_running_interpreter(tmp_path: Path):
    here = EnvSpec.of(ROOT, {})
    assert environment(here, here, tmp_path / "log", cache=tmp_path) == Path(sys.executable)


@pytest.mark.slow
def test_a_new_environment_reuses_the_running_torch(tmp_path: Path):
    """A spec the running packages already satisfy: built offline, no torch download."""
    running = EnvSpec.of(ROOT, {})
    spec = EnvSpec(requirements=(*running.requirements, "pytest>=1"), torch=None)
    python = environment(spec, running, tmp_path / "env.log", cache=tmp_path / "envs")
    assert python.parent.parent.parent == tmp_path / "envs"
    assert probe_stack(python)["torch"] == probe_stack(Path(sys.executable))["torch"]
    # cached: the second call builds nothing
    log = tmp_path / "second.log"
    assert environment(spec, running, log, cache=tmp_path / "envs") == python
    assert not log.exists()


def test_env_assignments():
    assert parse_assignments(["A=1", "B=x=y", "C="], "--head-env") == {
        "A": "1",
        "B": "x=y",
        "C": "",
    }
    for bad in ("NOEQUALS", "=1", "A B=1"):
        with pytest.raises(ABError, match="--head-env"):
            parse_assignments([bad], "--head-env")


def test_cpu_lists():
    from benchmarks.ab.cpus import parse_cpus  # noqa: PLC0415

    allowed = sorted(os.sched_getaffinity(0))
    assert parse_cpus(str(allowed[0])) == {allowed[0]}
    assert parse_cpus(f"{allowed[0]}-{allowed[-1]}") == set(allowed)
    for bad in ("x", "", "9999", "1-x"):
        with pytest.raises(ABError, match="--cpus"):
            parse_cpus(bad)
