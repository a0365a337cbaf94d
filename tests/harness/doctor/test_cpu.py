"""The sysfs CPU checks on fake trees: each setting that makes runs drift is named with its fix."""

from __future__ import annotations

import platform

import pytest

from benchmarks.harness.doctor import cpu


def tree(root, files):
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n")
    return root


def test_a_powersave_governor_on_one_cpu_is_a_warning_with_the_cpupower_fix(tmp_path):
    root = tree(
        tmp_path,
        {
            "cpu0/cpufreq/scaling_governor": "performance",
            "cpu1/cpufreq/scaling_governor": "powersave",
        },
    )
    found = cpu.check_governor(root, cpus=[0, 1])
    assert found.level == "warn"
    assert "powersave on 1 of 2 CPUs" in found.message
    assert found.action == "sudo cpupower frequency-set -g performance"
    # Only the CPUs this process may run on count: pinned to cpu0, the governor is fine.
    assert cpu.check_governor(root, cpus=[0]).level == "ok"


@pytest.mark.skipif(platform.system() != "Linux", reason="the skip text differs off Linux")
def test_no_cpufreq_is_a_skip_that_says_why(tmp_path):
    found = cpu.check_governor(tmp_path, cpus=[0])
    assert found.level == "skip"
    assert "host" in found.message


@pytest.mark.parametrize(
    ("files", "level", "fix"),
    [
        ({"intel_pstate/no_turbo": "0"}, "warn", "intel_pstate/no_turbo"),
        ({"intel_pstate/no_turbo": "1"}, "ok", "nothing to do"),
        ({"cpufreq/boost": "1"}, "warn", "cpufreq/boost"),
        ({"cpufreq/boost": "0"}, "ok", "nothing to do"),
    ],
)
def test_turbo_on_is_a_warning_with_the_switch_that_turns_it_off(tmp_path, files, level, fix):
    found = cpu.check_turbo(tree(tmp_path, files))
    assert found.level == level
    assert fix in found.action


def test_smt_on_is_a_warning_and_off_or_absent_is_not(tmp_path):
    on = cpu.check_smt(tree(tmp_path / "on", {"smt/active": "1", "smt/control": "on"}))
    assert on.level == "warn"
    assert "smt/control" in on.action
    off = cpu.check_smt(tree(tmp_path / "off", {"smt/active": "0", "smt/control": "off"}))
    assert off.level == "ok"
    vm = cpu.check_smt(tree(tmp_path / "vm", {"smt/active": "0", "smt/control": "notsupported"}))
    assert vm.level == "skip"


def test_isolated_cpus_we_do_not_run_on_are_a_warning_with_the_taskset_command(tmp_path):
    root = tree(tmp_path, {"isolated": "2-3"})
    outside = cpu.check_isolation(root, cpus=[0, 1, 2, 3])
    assert outside.level == "warn"
    assert "taskset -c 2,3" in outside.action
    assert cpu.check_isolation(root, cpus=[2, 3]).level == "ok"
    none = cpu.check_isolation(tree(tmp_path / "none", {"isolated": ""}), cpus=[0])
    assert none.level == "ok"
    assert "isolcpus" in none.message
