"""The compiled-step probe with real dynamo on this CPU (the `eager` backend): one graph per
decode step on the installed transformers, and a `bad` line when a step breaks in two (an
injected break; on 4.x the engine's positions withheld, issue 30 row 1's cause)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch._dynamo
import transformers

from benchmarks.harness.doctor.selfcheck import compile as sc
from benchmarks.harness.model import compat
from benchmarks.harness.model.models import build_model

CPU = torch.device("cpu")


def test_a_compiled_static_cache_step_is_one_graph_launch_on_this_transformers():
    steps, fields, versions = sc.probe_compiled_steps("tiny-llama", CPU)
    assert steps.level == "ok", steps.message
    assert steps.data["compile_graph_breaks"] == 0
    assert steps.data["graph_launches_per_decode_step"] == 1
    assert steps.data["transformers"] == transformers.__version__
    assert fields.data["compile_graph_breaks"] == 0
    assert fields.data["compile_timed_frames"] == 0
    assert "energy_window_s" in fields.data  # from devstate.RoundsMeter around the rounds
    assert "decode_j_per_tok" in fields.data  # records.phase_energy_fields
    assert versions.level == "skip"


def _with_a_break(spec: Any, device: torch.device, dtype: torch.dtype, **kwargs: Any) -> Any:
    model = build_model(spec, device, dtype, **kwargs)
    layer = model.model.layers[0]
    layer.register_forward_pre_hook(lambda *_: torch._dynamo.graph_break())
    return model


def test_a_step_broken_in_two_graphs_is_bad(monkeypatch):
    monkeypatch.setattr(sc, "build_model", _with_a_break)
    steps, _, _ = sc.probe_compiled_steps("tiny-llama", CPU)
    assert steps.level == "bad"
    assert steps.data["compile_graph_breaks"] >= 1
    assert steps.data["graph_launches_per_decode_step"] >= 2
    assert "several graphs" in steps.message


def test_on_4x_a_forward_without_positions_breaks_every_step(monkeypatch):
    """What issue 30 row 1 fixed (commit 54c0b9c), as the probe would see it on a GPU."""
    model = build_model(sc.load_model_spec("tiny-llama"), CPU, torch.float32)
    if compat.position_kwarg(model) is None:
        pytest.skip(f"transformers {transformers.__version__} takes no cache_position")
    monkeypatch.setattr(compat, "position_kwarg", lambda _model: None)
    steps, _, _ = sc.probe_compiled_steps("tiny-llama", CPU)
    assert steps.level == "bad"
    assert steps.data["compile_graph_breaks"] >= 1


def test_launch_counter_counts_each_call_of_a_compiled_graph():
    counter = sc.LaunchCounter("eager")
    double = torch.compile(lambda x: x * 2, backend=counter)
    for _ in range(3):
        double(torch.ones(4))
    torch._dynamo.reset()
    assert (counter.graphs, counter.launches) == (1, 3)


@pytest.mark.parametrize(
    ("compiled", "launches", "timed", "error", "level"),
    [
        ({"compile_graph_breaks": 0}, 1.0, {"compile_timed_frames": 0}, None, "ok"),
        ({"compile_graph_breaks": 1}, 2.0, {"compile_timed_frames": 0}, None, "bad"),
        ({"compile_graph_breaks": 0}, 1.0, {"compile_timed_frames": 2}, None, "bad"),
        ({"compile_graph_breaks": 0}, 1.0, {}, "recompiled: guard failed", "bad"),
    ],
)
def test_the_steps_verdict(compiled, launches, timed, error, level):
    found = sc.judge_steps("tiny", compiled, launches_per_step=launches, timed=timed, error=error)
    assert found.level == level
    assert f"{launches:g} graph launch(es) per decode step" in found.message


def test_the_record_fields_line_holds_the_records_compile_energy_and_throttle_fields():
    info = {
        "compile_graph_breaks": 0,
        "compile_timed_frames": 0,
        "compile_s": 12.0,  # not a field this line answers for
        "energy_window_s": 0.02,
        "energy_reason": "did not advance",
        "decode_j_per_tok": None,
        "gpu_throttle_reasons": ["sw_power_cap"],
        "gpu_sm_clock_mhz_min": 1400,
    }
    found = sc.record_fields(info)
    assert set(found.data) == {
        "compile_graph_breaks",
        "compile_timed_frames",
        "energy_window_s",
        "energy_reason",
        "decode_j_per_tok",
        "gpu_throttle_reasons",
    }
    assert found.data["gpu_throttle_reasons"] == "sw_power_cap"
    assert "energy_window_s 0.02" in found.message


def test_the_other_versions_line_says_how_to_check_one_in_its_own_environment():
    found = sc.other_versions()
    installed = transformers.__version__
    assert f"transformers {installed} only" in found.message
    assert installed not in found.message.split("not checked here:")[1]
    others = found.message.split("not checked here: ")[1].split(", ")
    assert found.action.endswith(f"--self-check --also-transformers {','.join(others)}")


def test_where_the_suite_skips_compiled_cells_the_probe_skips_with_its_reason(monkeypatch):
    monkeypatch.delenv("PHASEBENCH_MPS_COMPILE", raising=False)
    steps, versions = sc.probe_compiled_steps("tiny-llama", torch.device("mps"))
    assert steps.level == "skip"
    assert "PHASEBENCH_MPS_COMPILE=1" in steps.message
    assert versions.check == "selfcheck.transformers"


def test_on_a_gpu_the_probe_compiles_with_inductor_through_its_launch_counter():
    """The probe compiles for real on CUDA (inductor, the suite's backend) and with `eager`
    elsewhere (a CPU compile of a model's C++ takes minutes). The counter wraps inductor as it
    wraps eager: shown on this CPU with a one-op function (inductor's C++ kernel, seconds)."""
    assert sc.backend_for(torch.device("cuda", 0)) == "inductor"
    assert sc.backend_for(CPU) == "eager"
    counter = sc.LaunchCounter("inductor")
    compiled = torch.compile(lambda x: x * 2.0 + 1.0, backend=counter)
    x = torch.arange(4.0)
    try:
        for _ in range(3):
            assert torch.equal(compiled(x), x * 2.0 + 1.0)
    finally:
        torch._dynamo.reset()
    assert (counter.graphs, counter.launches) == (1, 3)
