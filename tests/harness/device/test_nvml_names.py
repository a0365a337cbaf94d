"""Every NVML name the code calls exists in the installed pynvml (nvidia-ml-py).

The doctor's NVML reads go through `_ask`, which turns any error into "unsupported": a misspelt
function (`nvmlDeviceGetComputeProcesses` for `nvmlDeviceGetComputeRunningProcesses`) then
reads as a GPU that does not say, on every GPU, and fakes written from the same misreading pass.
So the names are checked here against the real module, read from the source (attribute reads
`nv.nvmlX` and the strings the code hands to `getattr`), and the fakes refuse names the real
module lacks (`fake_nvml.PynvmlFake`).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from benchmarks.harness.doctor.gpu import _ask
from tests.harness.device.fake_nvml import (
    NVML_NAME,
    FakeNvml,
    PynvmlFake,
    UnknownNvmlName,
    fake_module,
    real_nvml_name,
)

ROOT = Path(__file__).resolve().parents[3]


def names_in(source: str) -> set[str]:
    """The NVML names a module's code reads: `x.nvmlFoo` / `x.NVML_FOO`, and a string that is
    exactly such a name (what `getattr(nv, "nvmlFoo")` and the name tables hold)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and NVML_NAME.fullmatch(node.attr):
            found.add(node.attr)
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and NVML_NAME.fullmatch(node.value)
        ):
            found.add(node.value)
    return found


def code_names() -> dict[str, list[str]]:
    """Every NVML name in benchmarks/ and the modules that use it."""
    users: dict[str, list[str]] = {}
    for path in sorted((ROOT / "benchmarks").rglob("*.py")):
        for name in names_in(path.read_text(encoding="utf-8")):
            users.setdefault(name, []).append(str(path.relative_to(ROOT)))
    return users


def test_the_scan_sees_calls_getattr_strings_and_name_tables():
    source = (
        "nv.nvmlDeviceGetName(h)\n"
        "getattr(nv, 'nvmlDeviceGetComputeRunningProcesses')(h)\n"
        "TABLE = (('NVML_CLOCK_SM', 'sm'),)\n"
        "readings.nvml_index\n"  # ours, not NVML's
        "'see nvmlDeviceGetSamples in the docs'\n"  # prose, not a name
    )
    assert names_in(source) == {
        "nvmlDeviceGetName",
        "nvmlDeviceGetComputeRunningProcesses",
        "NVML_CLOCK_SM",
    }


def test_every_nvml_name_the_code_calls_exists_in_the_installed_pynvml():
    users = code_names()
    # The doctor's process and power-limit reads are among them (the names once misspelt).
    for name in (
        "nvmlDeviceGetEnforcedPowerLimit",
        "nvmlDeviceGetComputeRunningProcesses",
        "nvmlDeviceGetGraphicsRunningProcesses",
    ):
        assert "benchmarks/harness/doctor/gpu.py" in users.get(name, []), name
    missing = {name: where for name, where in users.items() if not real_nvml_name(name)}
    assert missing == {}, f"pynvml has none of these; fix the names: {missing}"


def test_a_fake_cannot_define_a_name_pynvml_lacks():
    with pytest.raises(TypeError, match="nvmlDeviceGetComputeProcesses"):

        class _Wrong(PynvmlFake):
            def nvmlDeviceGetComputeProcesses(self, handle):  # noqa: N802 - the wrong name
                return []

    with pytest.raises(TypeError, match="nvmlDeviceGetEnforcedPowerManagementLimit"):
        fake_module(nvmlDeviceGetEnforcedPowerManagementLimit=lambda h: 1)


def test_reading_a_name_pynvml_lacks_escapes_the_codes_except_exception():
    fake = FakeNvml([])
    with pytest.raises(UnknownNvmlName, match="nvmlDeviceGetGraphicsProcesses"):
        _ask(lambda: fake.nvmlDeviceGetGraphicsProcesses(None))  # `except Exception` inside
    # A real name the fake does not implement is an ordinary AttributeError (getattr defaults).
    assert getattr(fake, "nvmlDeviceGetCurrentClocksEventReasons", None) is None
