"""Spec of benchmarks/harness/device/fingerprint.py: what the machine is, and which runs compare."""

from __future__ import annotations

import json
import platform
import re

import pytest
import torch
import transformers

from benchmarks.harness.device import fingerprint
from benchmarks.harness.device.fingerprint import ID_FIELDS, fingerprint_id, machine_fingerprint

REQUIRED_KEYS = {
    "os",
    "os_release",
    "arch",
    "cpu",
    "cpu_count",
    "accelerator",
    "accelerator_memory_bytes",
    "driver",
    "runtime",
    "torch",
    "transformers",
    "python",
}


def test_fingerprint_has_every_required_key_as_a_non_empty_string():
    fp = machine_fingerprint()
    assert set(fp) >= REQUIRED_KEYS
    assert all(isinstance(v, str) and v for v in fp.values())
    assert set(ID_FIELDS) <= set(fp)


def test_fingerprint_records_the_running_software_stack():
    fp = machine_fingerprint()
    assert fp["torch"] == torch.__version__
    assert fp["transformers"] == transformers.__version__
    assert fp["python"] == platform.python_version()
    assert fp["cpu_count"].isdigit()


def test_a_cpu_device_fingerprint_names_no_accelerator():
    fp = machine_fingerprint(torch.device("cpu"))
    assert fp["accelerator"] == "none"
    assert fp["driver"] == fp["runtime"] == "n/a"


def test_fingerprint_id_is_a_short_hex_hash_stable_across_calls():
    first = fingerprint_id(machine_fingerprint())
    assert re.fullmatch(r"[0-9a-f]{8}", first)
    assert fingerprint_id(machine_fingerprint()) == first


def test_fingerprint_id_is_a_pure_function_of_the_fields_across_processes_and_releases():
    # A golden value: no `hash()` randomisation, no process state, no dict order.
    fp = {key: f"{key}-value" for key in ID_FIELDS}
    assert fingerprint_id(fp) == "5ff6ba8c"


def test_fingerprint_id_ignores_key_order():
    fp = machine_fingerprint()
    assert fingerprint_id(dict(reversed(list(fp.items())))) == fingerprint_id(fp)


@pytest.mark.parametrize("field", ["torch", "transformers", "accelerator", "driver", "cpu"])
def test_fingerprint_id_changes_when_a_comparability_field_changes(field):
    fp = machine_fingerprint()
    changed = {**fp, field: fp[field] + "-other"}
    assert fingerprint_id(changed) != fingerprint_id(fp)


@pytest.mark.parametrize("field", ["os_release", "memory_bytes", "hostname"])
def test_fingerprint_id_ignores_descriptive_fields(field):
    fp = machine_fingerprint()
    changed = {**fp, field: "something-else"}
    assert fingerprint_id(changed) == fingerprint_id(fp)


def test_the_os_field_is_coarse_so_point_releases_keep_the_history():
    fp = machine_fingerprint()
    assert re.fullmatch(r"\S+( \d+(\.\d+)?)?", fp["os"])


def test_fingerprint_is_json_serialisable():
    fp = machine_fingerprint()
    assert json.loads(json.dumps(fp)) == fp


def test_linux_cpu_model_comes_from_proc_cpuinfo(tmp_path, monkeypatch):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nmodel name\t: Fake CPU @ 3.00GHz\nflags\t\t: fpu\n")
    monkeypatch.setattr(fingerprint.platform, "system", lambda: "Linux")
    monkeypatch.setattr(fingerprint, "Path", lambda _: cpuinfo)
    assert fingerprint._cpu_model() == "Fake CPU @ 3.00GHz"


# ---- hardware_id and stack (H1, issue 13) ---------------------------------------------------


def test_hardware_id_survives_a_software_upgrade_but_not_a_new_gpu():
    fp = machine_fingerprint()
    hid = fingerprint.hardware_id(fp)
    assert re.fullmatch(r"hw[0-9a-f]{8}", hid)
    for key, value in (("torch", "9.9.9"), ("transformers", "0.1"), ("driver", "999.1")):
        assert fingerprint.hardware_id({**fp, key: value}) == hid
    assert fingerprint.hardware_id({**fp, "os_release": "7.0.0-1"}) == hid
    for key in ("cpu", "cpu_count", "accelerator", "accelerator_memory_bytes", "arch"):
        assert fingerprint.hardware_id({**fp, key: "other"}) != hid
    assert fingerprint.hardware_id({**fp, "os": "Darwin 24.1"}) != hid


def test_stack_holds_the_software_fields_and_nothing_of_the_hardware():
    fp = machine_fingerprint()
    stack = fingerprint.stack(fp)
    assert stack["torch"] == torch.__version__
    assert stack["transformers"] == transformers.__version__
    assert set(stack) <= set(fingerprint.STACK_FIELDS)
    assert not set(stack) & set(fingerprint.HARDWARE_FIELDS)
    assert {"torch", "transformers", "python", "driver", "runtime"} <= set(stack)


def test_the_cpu_kernel_level_is_part_of_the_stack_not_of_the_hardware(monkeypatch):
    """An AVX-512 machine run as AVX2 (`ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2`, as
    GitHub's hosted runners are) runs other kernels: same hardware, another stack."""
    native = machine_fingerprint()
    assert native["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    emulated = machine_fingerprint()
    assert (emulated["aten_cpu_capability"], emulated["onednn_max_cpu_isa"]) == ("avx2", "AVX2")
    assert fingerprint.stack(emulated) != fingerprint.stack(native)
    assert fingerprint.hardware_id(emulated) == fingerprint.hardware_id(native)
    # The id that names a history series is unchanged: no existing history is split.
    assert fingerprint.fingerprint_id(emulated) == fingerprint.fingerprint_id(native)


def test_the_openmp_wait_policy_is_part_of_the_stack(monkeypatch):
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
    passive = fingerprint.stack(machine_fingerprint())
    monkeypatch.delenv("OMP_WAIT_POLICY")
    assert passive["omp_wait_policy"] == "PASSIVE"
    assert fingerprint.stack(machine_fingerprint())["omp_wait_policy"] == "unset"


def test_a_spin_count_the_user_set_is_part_of_the_stack_and_unset_adds_nothing(monkeypatch):
    monkeypatch.setenv("GOMP_SPINCOUNT", "10000")
    spin = fingerprint.stack(machine_fingerprint())
    monkeypatch.delenv("GOMP_SPINCOUNT")
    plain = fingerprint.stack(machine_fingerprint())
    assert spin["gomp_spincount"] == "10000"
    # Left out while unset: history recorded before the field had none, and reads the same.
    assert "gomp_spincount" not in plain
    assert {k: v for k, v in spin.items() if k != "gomp_spincount"} == plain


def test_mlx_versions_join_the_stack_of_a_run_with_mlx_cells_only(monkeypatch):
    """An mlx-lm upgrade is a stack change (DESIGN §14), like a torch upgrade; a torch-only run's
    stack does not change because mlx got installed."""
    versions = {"mlx": "0.32.4", "mlx-lm": "0.32.2"}
    monkeypatch.setattr(fingerprint.importlib.metadata, "version", versions.__getitem__)
    torch_only = machine_fingerprint()
    with_mlx = machine_fingerprint(mlx=True)
    assert "mlx" not in fingerprint.stack(torch_only)
    assert fingerprint.stack(with_mlx)["mlx_lm"] == "0.32.2"
    versions["mlx-lm"] = "0.33.0"
    upgraded = machine_fingerprint(mlx=True)
    assert fingerprint.stack(upgraded) != fingerprint.stack(with_mlx)
    assert fingerprint.hardware_id(upgraded) == fingerprint.hardware_id(with_mlx)
    assert fingerprint.fingerprint_id(upgraded) == fingerprint.fingerprint_id(torch_only)
